// DenseRunner: runs a tuned Execution in a client process.
//
//   StatusOr<std::unique_ptr<DenseRunner>> runner = DenseRunner::Create();
//   ...
//   StatusOr<DenseRunResult> r = (*runner)->Run(entry.execution, shape, x, w,
//                                               y, stream, workspace,
//                                               workspace_bytes);
//   if (!r.ok()) { /* nothing ran: r.status().message() says why */ }
//   if (r->fell_back) { /* log r->reason once: the default ran instead */ }
//
// A cuBLASLt execution is rebuilt from its params (cublasLtMatmulAlgoInit and
// the config attributes) and checked with cublasLtMatmulAlgoCheck; an own
// kernel is launched with its stored params. Both through DensePlan, exactly
// as the daemon's CudaBackend ran them, so on the same device and software the
// output is bit-for-bit what the daemon validated. When the execution cannot
// run here (unknown kernel, bad params, the algo check fails, the workspace is
// too small, pointers too little aligned, the launch is refused) the runner
// runs the default instead, cuBLASLt's first heuristic result for the given
// workspace and alignment (its algo as returned, never rebuilt from a config,
// so the default runs even where its config cannot be rebuilt), and reports
// that it fell back. An entry that kept the default (kCublasLtDefaultKernel)
// runs that same default for its own workspace_bytes (or less when less is
// given), which is the algo the daemon timed for it, without a fall-back.
// Launch errors are read from each launch's own result: an error the
// application left pending is neither reported as the runner's nor cleared
// (cuda_status.h, CheckLaunch). Resolved plans are cached per shape and
// execution, so repeated calls do no cuBLASLt queries and no allocation.
//
// Thread safety: not thread-safe. Use one runner per thread (or guard it);
// it may launch on any stream of its device.
#ifndef GPUTUNE_KERNELS_CUDA_DENSE_RUNNER_H_
#define GPUTUNE_KERNELS_CUDA_DENSE_RUNNER_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/cublaslt_dense.h"
#include "kernels/cuda/dense_plan.h"
#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// What Run enqueued: the execution, or the default in its place.
struct DenseRunResult {
  bool fell_back = false;  // the execution could not run; the default did
  std::string reason;      // why it fell back
};

class DenseRunner {
 public:
  // Binds to the device current on the calling thread and creates a cuBLASLt
  // handle. kFailedPrecondition naming the CUDA or cuBLASLt call and its
  // error string when there is no usable device. Never throws.
  static StatusOr<std::unique_ptr<DenseRunner>> Create();
  ~DenseRunner();
  DenseRunner(const DenseRunner&) = delete;
  DenseRunner& operator=(const DenseRunner&) = delete;

  // Enqueues y[M,N] = x[M,K] * W[N,K]^T (row-major bf16 device pointers) on
  // the stream, with the execution or, when it cannot run, the default. The
  // runner's device must be current. workspace may be null when
  // workspace_bytes is 0. An execution with an empty kernel (no tuned entry)
  // runs the default without reporting a fall-back. When neither can run,
  // nothing is enqueued and the status says why (kInvalidArgument for a bad
  // shape, kFailedPrecondition otherwise). Never throws.
  StatusOr<DenseRunResult> Run(const Execution& execution,
                               const DenseShape& shape, const void* x,
                               const void* w, void* y, cudaStream_t stream,
                               void* workspace, size_t workspace_bytes);

  int device() const { return device_; }

 private:
  // One resolved execution: a plan, or why there is none.
  using Resolved = StatusOr<std::unique_ptr<DensePlan>>;
  struct ShapeCache {
    std::shared_ptr<const CublasLtDense> problem;
    std::vector<std::pair<Execution, Resolved>> executions;
    // The default by (workspace bytes, pointer alignment).
    std::map<std::pair<uint64_t, uint32_t>, Resolved> defaults;
  };

  DenseRunner() = default;
  // Run's work; what it throws (std::bad_alloc) Run converts.
  StatusOr<DenseRunResult> RunOrFail(const Execution& execution,
                                     const DenseShape& shape, const void* x,
                                     const void* w, void* y,
                                     cudaStream_t stream, void* workspace,
                                     size_t workspace_bytes);
  Resolved& ResolveExecution(ShapeCache& cache, const Execution& execution);
  Resolved& ResolveDefault(ShapeCache& cache, uint64_t workspace_bytes,
                           uint32_t alignment);

  int device_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t>, ShapeCache> shapes_;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_DENSE_RUNNER_H_
