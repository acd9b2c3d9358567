#include "core/replicas.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dmuon {

namespace {

void check_mpi(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) fail(DMUON_ERR_MPI, what + ": an MPI call failed");
}

// Host copy of a backend buffer, broadcast from root in pieces that fit an int count.
void bcast_buffer(Backend& b, MPI_Comm comm, void* buf, std::size_t bytes, int root, const std::string& what) {
  if (bytes == 0) return;
  std::vector<unsigned char> host(bytes);
  b.download(host.data(), buf, bytes);
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t at = 0; at < bytes; at += kPiece)
    check_mpi(MPI_Bcast(host.data() + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, root, comm), what);
  b.upload(buf, host.data(), bytes);
}

}  // namespace

namespace {

constexpr uint64_t kPrime = 0x100000001b3ull;  // odd: multiplying by it is a bijection

// The hash of replica_hash, fed in pieces (each a multiple of 32 bytes but
// the last), so that a device buffer can go through a small host buffer.
// Four independent lanes keep the multiplier busy; each is a chain of
// bijections of its words, and so is the fold.
class ReplicaHash {
 public:
  void add(const unsigned char* p, std::size_t bytes) {
    std::size_t i = 0;
    for (; i + 32 <= bytes; i += 32)
      for (int k = 0; k < 4; ++k) {
        uint64_t w;
        std::memcpy(&w, p + i + 8 * k, 8);
        lane_[k] = (lane_[k] ^ w) * kPrime;
      }
    for (; i < bytes; i += 8) {  // the tail: only in the last piece
      uint64_t w = 0;
      std::memcpy(&w, p + i, std::min<std::size_t>(8, bytes - i));
      tail_ = (tail_ ^ w) * kPrime;
    }
    bytes_ += bytes;
  }
  uint64_t value() const {
    uint64_t h = bytes_;
    for (uint64_t l : lane_) h = (h ^ l) * kPrime;
    h = (h ^ tail_) * kPrime;
    return h ^ (h >> 29);
  }

 private:
  uint64_t lane_[4] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull};
  uint64_t tail_ = 0x85ebca77c2b2ae63ull;
  uint64_t bytes_ = 0;
};

// Pieces of backend memory pass through this much host memory.
constexpr std::size_t kHashPiece = std::size_t{4} << 20;
static_assert(kHashPiece % 32 == 0, "pieces keep the hash's 32-byte lanes aligned");

}  // namespace

uint64_t replica_hash(const void* data, std::size_t bytes) {
  ReplicaHash h;
  h.add(static_cast<const unsigned char*>(data), bytes);
  return h.value();
}

void broadcast_params(Optimizer& opt, int root) {
  const dmuon_context_s& ctx = *opt.context();
  require(opt.finalized(), DMUON_ERR_NOT_FINALIZED, "dmuon_broadcast_params: call dmuon_optimizer_finalize first");
  require(root >= 0 && root < ctx.size, DMUON_ERR_INVALID_VALUE,
          "dmuon_broadcast_params: root " + std::to_string(root) + " is not a rank of the context (0.." +
              std::to_string(ctx.size - 1) + ")");
  Backend& b = opt.backend();
  b.check_not_failed("dmuon_broadcast_params");
  for (int d = 0; d < kNumDtypes; ++d) {
    const Dtype dt = static_cast<Dtype>(d);
    const std::size_t es = dtype_size(dt);
    const AdamBuffers& ab = opt.adam_buffers(dt);
    const MuonBuffers& mb = opt.muon_buffers(dt);
    bcast_buffer(b, ctx.comm, ab.param, static_cast<std::size_t>(ab.elements) * es, root, "dmuon_broadcast_params");
    bcast_buffer(b, ctx.comm, mb.param,
                 static_cast<std::size_t>(opt.layout().muon[static_cast<std::size_t>(d)].total_elements()) * es, root,
                 "dmuon_broadcast_params");
  }
  // Every rank's masters are read from root's parameters at the next step,
  // root's too, so the replicated Adam masters are equal on every rank.
  opt.reset_master_weights();
}

void check_replicas(Optimizer& opt, const char* call) {
  const dmuon_context_s& ctx = *opt.context();
  require(opt.finalized(), DMUON_ERR_NOT_FINALIZED, std::string(call) + ": call dmuon_optimizer_finalize first");
  Backend& b = opt.backend();
  b.check_not_failed(call);
  if (ctx.size == 1) return;  // one copy agrees with itself
  const auto& params = opt.registry().all();
  std::vector<unsigned long long> hash;
  std::vector<std::size_t> id;  // registered id of each hashed parameter
  std::vector<unsigned char> piece;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamRecord& p = params[i];
    if (p.kind != Kind::adam) continue;
    const std::size_t es = dtype_size(p.dtype);
    const char* base = static_cast<const char*>(opt.adam_buffers(p.dtype).param) + static_cast<std::size_t>(p.offset) * es;
    const std::size_t bytes = static_cast<std::size_t>(p.numel) * es;
    piece.resize(std::min(bytes, kHashPiece));
    ReplicaHash h;
    for (std::size_t at = 0; at < bytes; at += kHashPiece) {
      const std::size_t n = std::min(kHashPiece, bytes - at);
      b.download(piece.data(), base + at, n);
      h.add(piece.data(), n);
    }
    hash.push_back(h.value());
    id.push_back(i);
  }
  if (hash.empty()) return;
  // Registration is identical on every rank (finalize checked it), so the
  // hashes line up; two all-reduces over a handful of words.
  std::vector<unsigned long long> lo(hash.size()), hi(hash.size());
  const int n = static_cast<int>(hash.size());
  const std::string what = std::string(call) + " (comparing replicated parameters)";
  check_mpi(MPI_Allreduce(hash.data(), lo.data(), n, MPI_UNSIGNED_LONG_LONG, MPI_MIN, ctx.comm), what);
  check_mpi(MPI_Allreduce(hash.data(), hi.data(), n, MPI_UNSIGNED_LONG_LONG, MPI_MAX, ctx.comm), what);
  const auto first = std::mismatch(lo.begin(), lo.end(), hi.begin());
  if (first.first == lo.end()) return;
  const std::size_t k = static_cast<std::size_t>(first.first - lo.begin());
  // The lowest rank holding each extreme: the same message on every rank.
  int ranks[2] = {hash[k] == lo[k] ? ctx.rank : ctx.size, hash[k] == hi[k] ? ctx.rank : ctx.size}, lowest[2] = {0, 0};
  check_mpi(MPI_Allreduce(ranks, lowest, 2, MPI_INT, MPI_MIN, ctx.comm), what);
  fail(DMUON_ERR_REPLICAS_DIFFER,
       std::string(call) + ": the replicated parameter " + params[id[k]].describe() + " differs across ranks: rank " +
           std::to_string(lowest[0]) + " and rank " + std::to_string(lowest[1]) +
           " hold different values (initialise it the same on every rank, or call dmuon_broadcast_params)");
}

}  // namespace dmuon
