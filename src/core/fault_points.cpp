#include "core/fault_points.hpp"

#include <cstdlib>
#include <sstream>
#include <string>

namespace dmuon {

bool fault_armed(const char* point, int rank) {
  const char* env = std::getenv("DMUON_FAULT_POINT");
  if (!env || !*env) return false;
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ',')) {
    const auto at = item.find('@');
    const std::string name = item.substr(0, at);
    const int target = at == std::string::npos ? 0 : std::atoi(item.c_str() + at + 1);
    if (name == point && target == rank) return true;
  }
  return false;
}

}  // namespace dmuon
