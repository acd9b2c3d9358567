// Shared by the CPU benchmark programs (bench_adam.cpp, bench_checkpoint.cpp,
// bench_read_patterns.cpp): the clock, failing loudly on a dmuon error, counts
// with K/M/G suffixes, reading the command line with Boost.Program_options,
// and dropping a file from the page cache. Each program keeps its
// own options and prints its own help.
#pragma once
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "dmuon/dmuon.h"

namespace bench {

namespace po = boost::program_options;

// Seconds on the steady clock.
inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A failed call ends the whole run: a benchmark of a failing optimizer measures nothing.
inline void check(int rc, dmuon_context_t ctx, const char* what) {
  if (rc == DMUON_SUCCESS) return;
  std::fprintf(stderr, "%s: %s (%s)\n", what, dmuon_error_string(rc), dmuon_context_last_error(ctx));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// "50M" -> 50000000: an optional K, M or G suffix (either case) on a number.
inline int64_t parse_count(const std::string& s) {
  const char suffix = s.empty() ? '\0' : s.back();
  const double base = std::stod(s);
  if (suffix == 'M' || suffix == 'm') return static_cast<int64_t>(base * 1e6);
  if (suffix == 'K' || suffix == 'k') return static_cast<int64_t>(base * 1e3);
  if (suffix == 'G' || suffix == 'g') return static_cast<int64_t>(base * 1e9);
  return static_cast<int64_t>(base);
}

// Reads the command line into vm; on a bad option prints why and returns false
// (the caller finalizes MPI and exits 2).
inline bool parse_options(int argc, char** argv, const po::options_description& desc, po::variables_map& vm) {
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return false;
  }
  return true;
}

// The options' description as --help prints it.
inline std::string help_text(const po::options_description& desc) {
  std::ostringstream text;
  text << desc;
  return text.str();
}

// Drops a file's pages from the page cache (written back first, so that
// they are clean and can go), so that the next read comes from the device.
inline void evict_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace bench
