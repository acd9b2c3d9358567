#include "atomic_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace dmuon::ckpt {

namespace {
[[noreturn]] void io_fail(const std::string& what, int err) {
  fail(DMUON_ERR_IO, what + ": " + std::strerror(err));
}
std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

std::string checkpoint_name(int64_t user_step) { return "ckpt_" + std::to_string(user_step) + ".h5"; }

bool parse_checkpoint_name(const std::string& name, int64_t* step) {
  const std::string head = "ckpt_", tail = ".h5";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  const std::size_t start = digits[0] == '-' ? 1 : 0;
  if (start == digits.size() || digits.find_first_not_of("0123456789", start) != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (errno || *end) return false;
  if (step) *step = v;
  return true;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& dir) {
  if (dir.empty() || is_directory(dir)) return;
  const std::string parent = parent_of(dir);
  if (parent != dir) make_directories(parent);
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) io_fail("cannot create directory '" + dir + "'", errno);
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open '" + path + "' to fsync it", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) io_fail("fsync of '" + path + "' failed", err);
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) io_fail("cannot rename '" + from + "' to '" + to + "'", errno);
}

void remove_file(const std::string& path) noexcept { ::unlink(path.c_str()); }

void write_latest(const std::string& dir, const std::string& checkpoint) {
  const std::string tmp = join_path(dir, std::string(kLatestName) + ".tmp");
  const std::string text = checkpoint + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) io_fail("cannot create '" + tmp + "'", errno);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int werr = errno;
  const int rc = ::fsync(fd);
  const int serr = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    remove_file(tmp);
    io_fail("cannot write '" + tmp + "'", n < 0 ? werr : ENOSPC);
  }
  if (rc != 0) {
    remove_file(tmp);
    io_fail("fsync of '" + tmp + "' failed", serr);
  }
  rename_path(tmp, join_path(dir, kLatestName));
  fsync_path(dir);
}

std::string read_latest(const std::string& dir) {
  std::ifstream in(join_path(dir, kLatestName));
  std::string name;
  if (!in || !std::getline(in, name)) return "";
  // Only a plain file name in the same directory is followed.
  if (name.empty() || name.find('/') != std::string::npos) return "";
  return name;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    int64_t step = 0;
    if (parse_checkpoint_name(e->d_name, &step)) out.emplace_back(step, e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

void prune(const std::string& dir, int keep_last) {
  // A checkpoint directory belongs to one job, and saves are collective and
  // sequential: a ckpt_*.h5.tmp seen here is the leftover of a crashed save.
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0 && parse_checkpoint_name(n.substr(0, n.size() - 4), nullptr))
        stale.push_back(n);
    }
    ::closedir(d);
    for (const std::string& n : stale) remove_file(join_path(dir, n));
  }
  if (keep_last <= 0) return;
  const auto all = list_checkpoints(dir);
  for (std::size_t i = static_cast<std::size_t>(keep_last); i < all.size(); ++i)
    remove_file(join_path(dir, all[i].second));
}

}  // namespace dmuon::ckpt
