// Per-optimizer state of the CUDA backend (private to backends/cuda): the
// stream, the pinned ring that carries each step's scalar tables to the
// device, workspaces, and the captured graphs.
#pragma once
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"

namespace dmuon {

// What a step stages for the device, each piece at a fixed device address so
// that captured kernels read the current values on every replay.
enum StagedPiece : int { kPieceHeader = 0, kPieceMuon = 1, kPieceAdam = 2, kNumPieces = 3 };

// Scalars of the step that setters change, read by kernels (never baked into
// a launch or a graph).
struct StepHeader {
  double max_norm;
  float momentum;
  float pad_;
};

// A run of one Adam row's elements handled by one block of the fused kernel.
struct AdamChunk {
  int32_t row;
  int32_t row_chunks;  // chunks of the row (its last finisher advances the step count)
  int64_t start;  // element index in the dtype's flat buffers, a multiple of the vector width
  int64_t count;
};

// Symmetric products of one shape (cuda_ns_symmetric.cu): pointer arrays and
// plans, freed through the deleter so that this header needs no definition.
struct SymShape;
struct SymShapeDeleter {
  void operator()(SymShape* s) const noexcept;
};
using SymShapePtr = std::unique_ptr<SymShape, SymShapeDeleter>;

// The three GEMM roles of a Newton-Schulz iteration (X X^T, b A + c A A,
// a X + B X): each may run a cuBLASLt algorithm other than the heuristic's
// first, chosen by timing the top candidates at the shape's first use.
constexpr int kNsGemmRoles = 3;
constexpr int kNsAlgoCandidates = 8;

// One cuBLASLt call of a shape's iteration, as the algorithm timing replays
// it: descriptors and operands of its first call in the recorded iteration,
// and the plan's candidate algorithms (heuristic order).
struct NsGemmCall {
  bool valid = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  const void *A = nullptr, *B = nullptr, *C = nullptr;
  void* D = nullptr;
  float alpha = 0.f, beta = 0.f;
  const std::vector<cublasLtMatmulAlgo_t>* candidates = nullptr;
};

// Workspace and graph of one Muon shape batch.
struct ShapeWork {
  Dtype dtype = Dtype::fp32;
  int64_t rows = 0, cols = 0;
  int count = 0;
  int blocks_per_matrix = 1;
  uint16_t *X = nullptr, *Xn = nullptr, *A = nullptr, *B = nullptr;  // bf16, batch-contiguous
  float* partials = nullptr;                                         // count * blocks_per_matrix
  // Where the Gram iteration takes the normalisation into its products
  // (defer_norm): per matrix kNormScales device-side alphas and betas (see
  // cuda_muon.cu), written by the momentum pass's last block to arrive
  // (arrivals counts them). With fuse_update, the last product also applies
  // the update to the parameter at param_offset.
  bool defer_norm = false;
  bool fuse_update = false;
  int64_t param_offset = 0;
  float* scales = nullptr;
  unsigned* arrivals = nullptr;
  bool warm = false;
  bool fallback = false;     // capture failed once: this shape stays eager
  std::string note;          // why it fell back
  using GraphKey = std::array<const void*, 12>;
  GraphKey graph_key{};      // pointers and settings the graph captured
  void* exec = nullptr;      // cudaGraphExec_t
  // Products X X^T and A A: plain GEMMs (sym_blocks 0) or symmetric over
  // sym_blocks row blocks, chosen once per shape (cuda_ns_tune.cu).
  bool gram_chosen = false;
  int sym_blocks = 0;
  bool fused = false;        // the whole step in the fused small-matrix kernel (cuda_ns_fused.hpp)
  SymShapePtr sym;
  // Index, per GEMM role, into the plan's candidate algorithms (0: the
  // heuristic's first); timed with the products, kept in the cache.
  int algo[kNsGemmRoles] = {0, 0, 0};
  NsGemmCall* record = nullptr;  // while set, the engine notes each role's first call here
  std::string gram_note;     // the choice and where it came from, for kernel_choices()
  void release() noexcept;
};

// One cuBLASLt matmul of Newton-Schulz: descriptors, the heuristic's
// candidate algorithms and the one in use (the shape's timed choice), made
// once per (shape, operands) and reused every step.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's candidates, best first
  bool usable = false;  // false: the heuristic offered nothing, use cublasGemmStridedBatchedEx
};

// The candidate `index` (clamped to those offered), so that an index from a
// cache written with more candidates still names a valid algorithm.
inline const cublasLtMatmulAlgo_t& algo_at(const std::vector<cublasLtMatmulAlgo_t>& algos, int index) {
  return algos[static_cast<std::size_t>(std::min<int>(std::max(index, 0), static_cast<int>(algos.size()) - 1))];
}

// A cuBLASLt layout of `batch` bf16 column-major rows x cols matrices (leading
// dimension ld), for the Newton-Schulz plans of cuda_muon.cu and
// cuda_ns_symmetric.cu. How the batch is addressed differs between them, so
// the caller names that attribute and its value (strided: the int64_t offset;
// pointer arrays: the uint32_t batch mode). `tag` ends each call's error text.
// `type` other than bf16: a parameter the last product updates in place.
template <class T>
void lt_batched_layout(cublasLtMatrixLayout_t& l, long rows, long cols, long ld, int32_t batch,
                       cublasLtMatrixLayoutAttribute_t addressing, const T& value, const std::string& tag,
                       cudaDataType_t type = CUDA_R_16BF) {
  cublas_check(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), ("cublasLtMatrixLayoutCreate" + tag).c_str());
  cublas_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
               ("cublasLtMatrixLayoutSetAttribute" + tag).c_str());
  cublas_check(cublasLtMatrixLayoutSetAttribute(l, addressing, &value, sizeof value),
               ("cublasLtMatrixLayoutSetAttribute" + tag).c_str());
}

// The heuristic's candidates for `op` on layouts a, b and c (c also the
// output), best first, at most kNsAlgoCandidates; those it marks as failed
// are left out, and a failed query offers none.
inline std::vector<cublasLtMatmulAlgo_t> lt_candidates(cublasLtHandle_t lt, cublasLtMatmulDesc_t op,
                                                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                       cublasLtMatrixLayout_t c, cublasLtMatmulPreference_t pref) {
  cublasLtMatmulHeuristicResult_t results[kNsAlgoCandidates] = {};
  int found = 0;
  const cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, kNsAlgoCandidates, results, &found);
  std::vector<cublasLtMatmulAlgo_t> out;
  for (int i = 0; rc == CUBLAS_STATUS_SUCCESS && i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(results[i].algo);
  return out;
}

struct CudaStepState final : StepState {
  static constexpr int kSlots = 8;  // steps the host may run ahead of the device
  cudaStream_t stream = nullptr;
  cudaStream_t own_stream = nullptr;
  cudaStream_t caller = nullptr;  // the user's stream, or cudaStreamLegacy: ordered with the step by events
  cudaEvent_t caller_ready = nullptr, step_done = nullptr;
  cudaStream_t side = nullptr;  // uploads of graph steps, outside the capture
  // The Adam update runs beside the Muon update: it forks from `stream` where
  // the Muon work begins (muon_fork, recorded by muon_update when it enqueues
  // work) and the stream joins it right after its launch (adam_done). Neither
  // touches the other's buffers, and both only read the statistics, finished
  // before the fork.
  cudaStream_t adam_stream = nullptr;
  cudaEvent_t muon_fork = nullptr, adam_done = nullptr;
  bool forked = false;  // muon_fork recorded this step, the Adam update not yet launched
  // Newton-Schulz products beside the main order (the Gram iteration's Q
  // update, core/newton_schulz.hpp): their stream, the events that fork it
  // from `stream` and join it back, and a cuBLAS workspace of their own, since
  // products then run on both streams at once. The workspace is allocated at
  // the first eager step of a shape that can use it (never in a capture);
  // until then the iteration runs in one order.
  cudaStream_t ns_stream = nullptr;
  cudaEvent_t ns_fork = nullptr, ns_join = nullptr;
  void* ns_workspace = nullptr;
  // Muon shape batches in concurrent orders (NsTuneConfig::shape_lanes): the
  // first lane is `stream` itself; each lane here has a stream, cuBLAS
  // workspaces and Newton-Schulz fork events of its own, since its products
  // run while the other lanes' do. Made at an eager step once every shape's
  // products are chosen, so that no timing sees another shape's work.
  struct ShapeLane {
    cudaStream_t stream = nullptr, ns_stream = nullptr;
    void* workspace = nullptr;
    void* ns_workspace = nullptr;
    cudaEvent_t ns_fork = nullptr, ns_join = nullptr, done = nullptr;
    void release() noexcept;
  };
  std::vector<ShapeLane> lanes;
  bool lanes_failed = false;  // a lane could not be made: the shapes stay in one order
  long lane_batches = 0;      // batches enqueued on a lane beyond `stream` (eager or captured)
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* cublas_workspace = nullptr;  // shared by cuBLAS and cuBLASLt: both run in stream order
  std::map<std::array<long, 10>, LtPlan> lt_plans;  // (operands, batch, device-side alpha and beta, output)
  cudaEvent_t slot_done[kSlots] = {};
  cudaEvent_t main_done = nullptr, uploads_done = nullptr;
  int slot = 0;
  struct Piece {
    void* dev = nullptr;
    std::size_t bytes = 0;
    void* host[kSlots] = {};
    int last_slot = -1;  // the slot whose host copy the device copy holds; -1: unknown
  } pieces[kNumPieces];
  bool uploaded = false;  // this step staged an upload (graph steps then wait for it)
  std::vector<char> muon_table;  // host assembly of the Muon piece, reused

  double* sumsq_partials = nullptr;
  // Adam: chunk lists per dtype, built at the first step.
  AdamChunk* chunks[kNumDtypes] = {};
  AdamChunk* chunks_host = nullptr;  // pinned source of their upload
  int num_chunks[kNumDtypes] = {};
  int* row_done = nullptr;  // per row: its chunks finished this step (back to 0 by the last)
  int adam_rows = -1;
  // A step without a norm whose statistics the Adam kernel finishes
  // (finish_stats' adam_follows); muon_update finishes them first instead.
  StepStats* stats_unfinished = nullptr;

  std::vector<ShapeWork> shapes;

  enum class Mode { eager, capture, replay } mode = Mode::eager;
  bool step_graph_wanted = false;
  bool step_graph_disabled = false;
  bool warm = false;
  uint64_t structure = 0;
  void* step_graph = nullptr;  // cudaGraph_t
  void* step_exec = nullptr;   // cudaGraphExec_t
  long replays = 0;
  std::string step_note;

  CudaStepState();  // on the backend's device, current in every public call
  ~CudaStepState() override;
  CudaStepState(const CudaStepState&) = delete;
  CudaStepState& operator=(const CudaStepState&) = delete;
  void drop_step_graph() noexcept;
  void drop_shape_graphs() noexcept;
  cudaStream_t upload_stream() const { return mode == Mode::eager ? stream : side; }
};

constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;  // cuBLAS' recommendation for Hopper
constexpr int kSumsqBlocks = 264;  // two per H100/H200 SM; fixed, so the reduction order is fixed
constexpr int kThreads = 256;

}  // namespace dmuon
