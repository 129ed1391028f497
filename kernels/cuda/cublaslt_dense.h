// cuBLASLt for the dense problem: descriptors, heuristic candidates, and the
// round trip between a cuBLASLt algo and an Execution's params. Used by the
// backend (to enumerate and measure) and by DenseRunner (to replay), so both
// run exactly the same rebuilt algo.
//
// Layout. gputune's tensors are row-major: x[M,K], W[N,K], y[M,N]. cuBLASLt is
// column-major, and a row-major [R,C] matrix is the column-major C x R matrix
// with leading dimension C. So y = x * W^T is computed as the column-major
//
//   y^T (N x M, ld N) = op(A) * op(B),  A = W  as K x N, ld K, transa = T
//                                       B = x  as K x M, ld K, transb = N
//
// i.e. cuBLASLt's (m, n, k) = (N, M, K), "TN", bf16 A/B/C/D, fp32 compute and
// scale (CUBLAS_COMPUTE_32F, CUDA_R_32F), alpha = 1, beta = 0, C = D = y.
//
//   CublasLtDense problem(shape);
//   auto heuristics = problem.Heuristics(handle, 8, 32 << 20, 256);
//   Execution e = ToExecution(ReadAlgoConfig(heuristics[0].algo),
//                             heuristics[0].workspaceSize);
//   ...later, in another process...
//   StatusOr<LtAlgoConfig> config = LtAlgoConfigFromExecution(e);
//   StatusOr<LtPlan> plan = config.ok() ? problem.BuildAlgo(handle, *config)
//                                       : config.status();
//   if (plan.ok()) {
//     problem.Matmul(handle, plan.algo, x, w, y, ws, ws_bytes, stream);
//   }
#ifndef GPUTUNE_KERNELS_CUDA_CUBLASLT_DENSE_H_
#define GPUTUNE_KERNELS_CUDA_CUBLASLT_DENSE_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// Execution::kernel of cuBLASLt candidates.
inline constexpr char kCublasLtKernel[] = "cublaslt";

// Execution::kernel of cuBLASLt's default: Execution{kCublasLtDefaultKernel,
// {}, workspace_bytes} is cuBLASLt's first heuristic result, as the heuristic
// returns it (never rebuilt from a config), for workspace_bytes of workspace
// and the pointers' alignment: what DenseRunner runs untuned. The backend's
// default candidate is this, so the default it times and the one a client
// replays from an entry that kept it are the same algo.
inline constexpr char kCublasLtDefaultKernel[] = "cublaslt.default";

// How many heuristic results the backend asks for by default. DenseRunner
// asks for as many when it needs the default, so that both take the first of
// the same list.
inline constexpr int kDefaultHeuristicCandidates = 8;

// The configuration of one cuBLASLt algo: every CUBLASLT_ALGO_CONFIG_*
// attribute CUDA 13 has. Together with the problem's descriptors it determines
// the algo completely (never an index into a heuristic list).
struct LtAlgoConfig {
  int32_t algo_id = 0;            // CUBLASLT_ALGO_CONFIG_ID
  uint32_t tile = 0;              // CUBLASLT_ALGO_CONFIG_TILE_ID
  uint32_t stages = 0;            // CUBLASLT_ALGO_CONFIG_STAGES_ID
  int32_t splitk = 1;             // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
  uint32_t reduction_scheme = 0;  // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME
  uint32_t swizzle = 0;           // CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING
  uint32_t custom_option = 0;     // CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION
  uint16_t inner_shape = 0;       // CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID
  uint16_t cluster_shape = 0;     // CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID
  friend bool operator==(const LtAlgoConfig&, const LtAlgoConfig&) = default;
};

// Execution{kCublasLtKernel, {algo_id, tile, stages, splitk,
// reduction_scheme, swizzle, custom_option, inner_shape, cluster_shape},
// workspace_bytes}. Every param fits in int32 (gputune.v1.Execution): the
// uint32 attributes are stored as the int32 of the same bits.
Execution ToExecution(const LtAlgoConfig& config, uint64_t workspace_bytes);

// The inverse of ToExecution (a uint32 attribute is read from its int32 form
// or its plain value). kInvalidArgument (naming the param) when the kernel is
// not kCublasLtKernel, a param is missing, unknown or out of range for its
// type.
StatusOr<LtAlgoConfig> LtAlgoConfigFromExecution(const Execution& execution);

// Reads every config attribute of an algo (e.g. a heuristic result). Throws
// std::runtime_error on a cuBLASLt error.
LtAlgoConfig ReadAlgoConfig(const cublasLtMatmulAlgo_t& algo);

// A rebuilt, checked algo and what it needs to run.
struct LtPlan {
  cublasLtMatmulAlgo_t algo{};
  uint64_t workspace_bytes = 0;  // required, from cublasLtMatmulAlgoCheck
  uint32_t min_alignment = 1;    // bytes, the largest of the algo's A/B/C/D
};

// The cuBLASLt descriptors of one shape. Immutable after construction, so one
// instance may be shared by any number of plans; the handle passed to each
// method must belong to the device that is current.
class CublasLtDense {
 public:
  // Throws std::runtime_error on a cuBLASLt error.
  explicit CublasLtDense(const DenseShape& shape);
  ~CublasLtDense();
  CublasLtDense(const CublasLtDense&) = delete;
  CublasLtDense& operator=(const CublasLtDense&) = delete;

  const DenseShape& shape() const { return shape_; }

  // Up to `count` heuristic results, best first, each with state SUCCESS and
  // needing at most workspace_limit bytes, for pointers aligned to
  // alignment_bytes (a power of two <= 256). Throws std::runtime_error on a
  // cuBLASLt error; an empty result means no algo supports the problem.
  std::vector<cublasLtMatmulHeuristicResult_t> Heuristics(
      cublasLtHandle_t handle, int count, uint64_t workspace_limit,
      uint32_t alignment_bytes) const;

  // Rebuilds the algo from its config (cublasLtMatmulAlgoInit, then each
  // config attribute) and checks it on the current device
  // (cublasLtMatmulAlgoCheck). kFailedPrecondition naming the cuBLASLt
  // call when any step fails: the algo cannot run here. Never throws.
  StatusOr<LtPlan> BuildAlgo(cublasLtHandle_t handle,
                             const LtAlgoConfig& config) const;

  // A plan of a heuristic result as cuBLASLt returned it: its algo, its
  // workspace and its alignment. kFailedPrecondition when the result is not
  // usable (state not SUCCESS). Never throws.
  StatusOr<LtPlan> PlanFromHeuristic(
      const cublasLtMatmulHeuristicResult_t& heuristic) const;

  // Enqueues y = x * W^T on the stream. x, w, y are device pointers to the
  // row-major bf16 tensors; workspace may be null when workspace_bytes is 0.
  // Throws std::runtime_error when cublasLtMatmul refuses.
  void Matmul(cublasLtHandle_t handle, const cublasLtMatmulAlgo_t& algo,
              const void* x, const void* w, void* y, void* workspace,
              uint64_t workspace_bytes, cudaStream_t stream) const;

 private:
  void Release();

  const DenseShape shape_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;  // A
  cublasLtMatrixLayout_t x_layout_ = nullptr;  // B
  cublasLtMatrixLayout_t y_layout_ = nullptr;  // C and D
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_CUBLASLT_DENSE_H_
