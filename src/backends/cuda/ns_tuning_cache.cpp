#include "backends/cuda/ns_tuning_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace dmuon {

namespace {

const char kHeader[] = "dmuon-ns-tuning v4";
// A real cache holds a line per shape; anything this large is not one.
constexpr std::size_t kMaxFileBytes = std::size_t{1} << 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool parse_int(const std::string& s, long long& v) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  v = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

bool parse_ms(const std::string& s, double& v) {
  if (s.empty() || s.size() > 32) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size() && std::isfinite(v) && v >= 0;
}

// mkdir -p: every missing component, 0755 (umask applies).
bool make_dirs(const std::string& dir, std::string& why) {
  if (dir.empty()) return true;
  std::string at;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    at = dir.substr(0, pos);
    if (at.empty()) continue;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      why = "cannot create " + at + ": " + std::strerror(errno);
      return false;
    }
  }
  struct stat sb {};
  if (::stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    why = dir + " is not a directory";
    return false;
  }
  return true;
}

}  // namespace

std::string ns_cache_dir_from_environment() {
  const std::string own = env("DMUON_CACHE_DIR");
  if (!own.empty()) return own;
  const std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/dmuon";
  const std::string home = env("HOME");
  if (!home.empty()) return home + "/.cache/dmuon";
  return "";
}

std::string ns_cache_file_name(const std::string& device_name, int cc_major, int cc_minor, int sms, long cublas_version) {
  std::string dev;
  for (char c : device_name) {
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                      c == '_';
    dev += keep ? c : '_';
  }
  if (dev.empty()) dev = "unknown";
  return "ns-tuning-v" + std::to_string(kNsCacheFormat) + "-" + dev + "-cc" + std::to_string(cc_major) +
         std::to_string(cc_minor) + "-" + std::to_string(sms) + "sm-cublas" + std::to_string(cublas_version) + ".txt";
}

bool ns_cache_parse(const std::string& text, NsCacheEntries& out) {
  out.clear();
  // A complete file ends with a newline: a write cut short does not.
  if (text.size() > kMaxFileBytes || text.empty() || text.back() != '\n') return false;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) return false;
  NsCacheEntries got;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string tok;
    while (ls >> tok) f.push_back(tok);
    if (f.size() != 7 + kNsCacheAlgos) return false;
    long long rows = 0, cols = 0, count = 0, blocks = 0, best = 0;
    NsCacheEntry e;
    if (!parse_int(f[0], rows) || !parse_int(f[1], cols) || !parse_int(f[2], count) || !parse_int(f[3], blocks) ||
        !parse_int(f[4], best) || !parse_ms(f[5], e.plain_ms) || !parse_ms(f[6], e.symmetric_ms))
      return false;
    if (rows <= 0 || cols <= 0 || count <= 0 || count > (1 << 30)) return false;
    auto valid = [](long long b) { return b == 0 || b == kNsGramBlocks || b == 2 || b == 4 || b == 8; };
    if (!valid(blocks) || !valid(best) || (blocks != 0 && blocks != best)) return false;
    for (int r = 0; r < kNsCacheAlgos; ++r) {
      long long a = 0;
      if (!parse_int(f[7 + r], a) || a > kNsCacheMaxAlgoIndex) return false;
      e.algo[r] = static_cast<int>(a);
    }
    e.blocks = static_cast<int>(blocks);
    e.best_symmetric_blocks = static_cast<int>(best);
    got[NsCacheKey{rows, cols, static_cast<int>(count)}] = e;
  }
  out.swap(got);
  return true;
}

std::string ns_cache_format(const NsCacheEntries& entries) {
  std::string s = std::string(kHeader) + "\n";
  char buf[160];
  for (const auto& kv : entries) {
    static_assert(kNsCacheAlgos == 3, "the line format names three algorithm fields");
    std::snprintf(buf, sizeof buf, "%lld %lld %d %d %d %.6g %.6g %d %d %d\n", static_cast<long long>(kv.first.rows),
                  static_cast<long long>(kv.first.cols), kv.first.count, kv.second.blocks,
                  kv.second.best_symmetric_blocks, kv.second.plain_ms, kv.second.symmetric_ms, kv.second.algo[0],
                  kv.second.algo[1], kv.second.algo[2]);
    s += buf;
  }
  return s;
}

bool ns_cache_read(const std::string& path, NsCacheEntries& out) {
  out.clear();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  std::string text;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxFileBytes) break;
  }
  const bool read_ok = !std::ferror(f);
  std::fclose(f);
  return read_ok && ns_cache_parse(text, out);
}

bool ns_cache_write(const std::string& path, const NsCacheEntries& entries, std::string& why) {
  const std::size_t slash = path.rfind('/');
  if (slash != std::string::npos && !make_dirs(path.substr(0, slash), why)) return false;
  // Unique per process and call: ranks sharing a node (and a cache) never
  // write into each other's temporary file; the last rename wins, whole.
  static std::atomic<unsigned> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  const std::string text = ns_cache_format(entries);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    why = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  std::size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = false;
      why = "cannot write " + tmp + ": " + std::strerror(errno);
      break;
    }
    done += static_cast<std::size_t>(w);
  }
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    why = "cannot flush " + tmp + ": " + std::strerror(errno);
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = "cannot close " + tmp + ": " + std::strerror(errno);
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    why = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
  }
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace dmuon
