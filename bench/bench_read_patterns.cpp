// Where a restore's time goes, without dmuon: the same bytes read from one
// file in the patterns a plain read and a restore use, side by side in one
// run, plus what a restore does beside its reads (the kernel zeroing fresh
// memory, copies from the page cache) and the CPU rates involved.
//
// Threads stand in for ranks: "2T split" is two readers, each reading half
// of the file in order, as two ranks read their shares. "hint" gives each
// reader the restore's own ReadAhead (posix_fadvise(WILLNEED) from a helper
// thread, 256 MiB ahead in 8 MiB pieces); "cks" checksums each MiB read with CRC-32C
// and fletcher32, as a restore verifies its chunks. Before every cold test
// the file's pages are dropped (fdatasync, POSIX_FADV_DONTNEED); each
// repetition runs every test once, in order. Fresh memory is mapped and
// populated with the restore's own calls (core/mapped_memory.hpp).
//
// Usage: bench_read_patterns --file /tmp/x/f.bin --size-mb 1024 --reps 5
// (the file and its ".hot" twin are created and removed).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "core/mapped_memory.hpp"
#include "hdf5_io/crc32c.hpp"
#include "hdf5_io/fletcher32.hpp"
#include "hdf5_io/posix_io.hpp"

namespace po = boost::program_options;
using bench::now;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

volatile uint32_t g_sink;  // keeps the checksums from being optimised away

void checksum(const char* p, std::size_t n) {
  const uint32_t crc = dmuon::ckpt::crc32c(p, n);
  g_sink = crc + static_cast<uint32_t>(dmuon::ckpt::fletcher32_part(p, n, 0, n).sum1);
}

char* fresh(std::size_t n) { return static_cast<char*>(dmuon::map_anonymous(n)); }

// The kernel zeroes the pages now, as for the restore's staging.
void populate(char* p, std::size_t n) { (void)dmuon::populate(p, n); }

struct Reads {
  int threads = 1;
  std::size_t block = kMiB;
  bool interleave = false;  // thread t reads blocks t, t + T, ... (else a contiguous part each)
  bool checksums = false;
  bool hint = false;
  bool direct = false;  // O_DIRECT
};

// Seconds to read `bytes` of `path` into dst with the given pattern.
double read_file(const std::string& path, std::size_t bytes, const Reads& r, char* dst) {
  const int fd = ::open(path.c_str(), O_RDONLY | (r.direct ? O_DIRECT : 0));
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  const double t0 = now();
  std::vector<std::thread> readers;
  for (int t = 0; t < r.threads; ++t)
    readers.emplace_back([&, t] {
      const std::size_t lo = r.interleave ? 0 : bytes / r.threads * t;
      const std::size_t hi = r.interleave ? bytes : bytes / r.threads * (t + 1);
      const std::size_t first = r.interleave ? t * r.block : lo, step = r.interleave ? r.threads * r.block : r.block;
      std::unique_ptr<dmuon::ckpt::ReadAhead> ahead;
      if (r.hint) {
        ahead = std::make_unique<dmuon::ckpt::ReadAhead>(fd, dmuon::ckpt::kRestoreReadAheadBytes);
        for (std::size_t at = first; at < hi; at += step) ahead->add(at, std::min(r.block, hi - at));
      }
      for (std::size_t at = first; at < hi; at += step) {
        const std::size_t n = std::min(r.block, hi - at);
        if (ahead) ahead->advance(n);
        if (::pread(fd, dst + at, n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) std::perror("pread");
        if (r.checksums)
          for (std::size_t o = 0; o < n; o += kMiB) checksum(dst + at + o, std::min(kMiB, n - o));
      }
    });
  for (auto& t : readers) t.join();
  const double seconds = now() - t0;
  ::close(fd);
  return seconds;
}

// f's time while `threads` helpers zero `bytes` of fresh memory beside it.
double beside_zeroing(int threads, std::size_t bytes, const std::function<double()>& f) {
  char* z = fresh(bytes);
  std::vector<std::thread> helpers;
  for (int t = 0; t < threads; ++t) helpers.emplace_back([=] { populate(z + bytes / threads * t, bytes / threads); });
  const double seconds = f();
  for (auto& h : helpers) h.join();
  ::munmap(z, bytes);
  return seconds;
}

// f's time while `threads` helpers copy `bytes` of a file the page cache holds.
double beside_copies(const std::string& hot, int threads, std::size_t bytes, const std::function<double()>& f) {
  char* z = fresh(bytes);
  populate(z, bytes);
  const int fd = ::open(hot.c_str(), O_RDONLY);
  std::vector<std::thread> helpers;
  for (int t = 0; t < threads; ++t)
    helpers.emplace_back([=] {
      const std::size_t lo = bytes / threads * t, hi = bytes / threads * (t + 1);
      for (std::size_t at = lo; at < hi; at += 8 * kMiB)
        if (::pread(fd, z + at, std::min(8 * kMiB, hi - at), static_cast<off_t>(at)) < 0) std::perror("pread");
    });
  const double seconds = f();
  for (auto& h : helpers) h.join();
  ::close(fd);
  ::munmap(z, bytes);
  return seconds;
}

// Seconds f takes on n bytes of fresh memory (populated first when asked).
double on_fresh_memory(std::size_t n, bool populated, const std::function<void(char*)>& f) {
  char* p = fresh(n);
  if (populated) populate(p, n);
  const double t0 = now();
  f(p);
  const double seconds = now() - t0;
  ::munmap(p, n);
  return seconds;
}

struct Test {
  std::string name;
  bool cold;  // from the device (else from the page cache or memory)
  std::function<double()> run;
};

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("bench_read_patterns: read patterns of a restore against plain reads");
  std::string path;
  double size_mb = 1024;
  int reps = 5;
  desc.add_options()("help", "this text")("file", po::value(&path)->default_value("bench_read_patterns.bin"),
                                          "scratch file on the file system to measure (created, then removed)")(
      "size-mb", po::value(&size_mb)->default_value(1024), "file size in MiB")(
      "reps", po::value(&reps)->default_value(5), "repetitions (best, median and worst are reported)");
  po::variables_map vm;
  if (!bench::parse_options(argc, argv, desc, vm) || reps < 1 || size_mb < 16) return 2;
  if (vm.count("help")) {
    std::printf("%s\n", bench::help_text(desc).c_str());
    return 0;
  }
  const std::size_t n = static_cast<std::size_t>(size_mb) * kMiB / (16 * kMiB) * (16 * kMiB);
  const std::string hot = path + ".hot";
  // Destination: touched once, like the raw baseline's buffer in bench_checkpoint.
  char* mem = fresh(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(mem + i, &v, 8);
  }
  for (const std::string& p : {path, hot}) {
    const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
      std::perror(p.c_str());
      return 1;
    }
    for (std::size_t at = 0; at < n; at += 8 * kMiB)
      if (::pwrite(fd, mem + at, 8 * kMiB, static_cast<off_t>(at)) < 0) std::perror("pwrite");
    ::fsync(fd);
    ::close(fd);
  }
  const auto reads = [&](Reads r) { return [&, r] { return read_file(path, n, r, mem); }; };
  const std::size_t zeroed = n * 7 / 4;  // a 2-rank restore's staging of this payload
  std::vector<Test> tests = {
      {"plain 1T 8M (raw, 1 rank)", true, reads({1, 8 * kMiB})},
      {"plain 2T split 8M (raw, 2 ranks)", true, reads({2, 8 * kMiB})},
      {"plain 4T split 8M (raw, 4 ranks)", true, reads({4, 8 * kMiB})},
      {"1T 1M hint cks (restore, 1 rank)", true, reads({1, kMiB, false, true, true})},
      {"2T split 1M hint cks (restore, 2)", true, reads({2, kMiB, false, true, true})},
      {"4T split 1M hint cks (restore, 4)", true, reads({4, kMiB, false, true, true})},
      {"1T 1M cks, no hint", true, reads({1, kMiB, false, true, false})},
      {"1T 8M cks, no hint", true, reads({1, 8 * kMiB, false, true, false})},
      {"4T interleave 1M cks", true, reads({4, kMiB, true, true, false})},
      {"O_DIRECT 1T 8M", true, reads({1, 8 * kMiB, false, false, false, true})},
      {"O_DIRECT 4T interleave 8M", true, reads({4, 8 * kMiB, true, false, false, true})},
      {"O_DIRECT 4T interleave 4M cks", true, reads({4, 4 * kMiB, true, true, false, true})},
      {"plain 2T 8M + zeroing 4T", true,
       [&] { return beside_zeroing(4, zeroed, reads({2, 8 * kMiB})); }},
      {"restore 2 + zeroing 4T", true, [&] { return beside_zeroing(4, zeroed, reads({2, kMiB, false, true, true})); }},
      {"restore 2 + page-cache copies 2T", true,
       [&] { return beside_copies(hot, 2, n * 3 / 4, reads({2, kMiB, false, true, true})); }},
      {"restore 2 into fresh memory, 2 populating", true,
       [&] {
         char* d = fresh(n);
         std::thread a([=] { populate(d, n / 2); }), b([=] { populate(d + n / 2, n / 2); });
         const double s = read_file(path, n, {2, kMiB, false, true, true}, d);
         a.join();
         b.join();
         ::munmap(d, n);
         return s;
       }},
      {"page cache 1T 1M copy", false, reads({1, kMiB})},
      {"page cache 1T 1M copy + cks", false, reads({1, kMiB, false, true})},
      {"page cache 4T 1M copy + cks", false, reads({4, kMiB, true, true})},
      {"memory: checksums 1T", false,
       [&] {
         const double t0 = now();
         for (std::size_t at = 0; at < n; at += kMiB) checksum(mem + at, kMiB);
         return now() - t0;
       }},
      {"memory: kernel zeroing 1T", false, [&] { return on_fresh_memory(n, false, [&](char* p) { populate(p, n); }); }},
      {"memory: first touch 1T (faults)", false,
       [&] { return on_fresh_memory(n, false, [&](char* p) { for (std::size_t i = 0; i < n; i += 4096) p[i] = 1; }); }},
      {"memory: memcpy 1T", false, [&] { return on_fresh_memory(n, true, [&](char* p) { std::memcpy(p, mem, n); }); }},
  };
  std::vector<std::vector<double>> seconds(tests.size());
  for (int r = 0; r < reps; ++r)
    for (std::size_t i = 0; i < tests.size(); ++i) {
      bench::evict_page_cache(path);
      // The hot twin stays in the page cache for the copies.
      (void)read_file(hot, n, {2, 8 * kMiB}, mem);
      if (!tests[i].cold) (void)read_file(path, n, {2, 8 * kMiB}, mem);
      seconds[i].push_back(tests[i].run());
    }
  std::printf("%-44s %8s %8s %8s   GB/s over %zu MiB, %d reps\n", "test", "best", "median", "worst", n / kMiB, reps);
  for (std::size_t i = 0; i < tests.size(); ++i) {
    std::vector<double>& s = seconds[i];
    std::sort(s.begin(), s.end());
    std::printf("%-44s %8.2f %8.2f %8.2f\n", tests[i].name.c_str(), n / s.front() / 1e9, n / s[s.size() / 2] / 1e9,
                n / s.back() / 1e9);
  }
  std::remove(path.c_str());
  std::remove(hot.c_str());
  ::munmap(mem, n);
  return 0;
}
