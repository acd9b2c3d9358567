// Internal error type: thrown inside the library, turned into a status and a
// last-error message at the C boundary (api_guard.hpp). Nothing escapes.
#pragma once
#include <stdexcept>
#include <string>

#include "dmuon/dmuon.h"

namespace dmuon {

class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

[[noreturn]] inline void fail(int status, const std::string& message) { throw Error(status, message); }

inline void require(bool ok, int status, const std::string& message) {
  if (!ok) fail(status, message);
}

}  // namespace dmuon
