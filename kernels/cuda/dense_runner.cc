#include "kernels/cuda/dense_runner.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace gputune::kernels {
namespace {

// The largest power of two (<= 256) that all three pointers are aligned to.
uint32_t PointerAlignment(const void* x, const void* w, const void* y) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(x) |
                         reinterpret_cast<uintptr_t>(w) |
                         reinterpret_cast<uintptr_t>(y) | uintptr_t{256};
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// Enqueues the plan, or says why it could not.
Status TryLaunch(const DensePlan& plan, cublasLtHandle_t lt, const void* x,
                 const void* w, void* y, void* workspace,
                 uint64_t workspace_bytes, cudaStream_t stream) {
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      plan.CheckLaunchable(x, w, y, workspace_bytes));
  // Launch reports a refused launch by throwing (cuda_status.h).
  return GuardedStatus([&] {
           plan.Launch(lt, x, w, y, workspace, workspace_bytes, stream);
           return true;
         })
      .status();
}

}  // namespace

StatusOr<std::unique_ptr<DenseRunner>> DenseRunner::Create() {
  std::unique_ptr<DenseRunner> runner(new DenseRunner());
  const cudaError_t status = cudaGetDevice(&runner->device_);
  if (status != cudaSuccess) {
    return FailedPreconditionError(CudaErrorMessage(status, "cudaGetDevice"));
  }
  const cublasStatus_t lt = cublasLtCreate(&runner->lt_);
  if (lt != CUBLAS_STATUS_SUCCESS) {
    return FailedPreconditionError(CublasErrorMessage(lt, "cublasLtCreate"));
  }
  return runner;
}

DenseRunner::~DenseRunner() {
  shapes_.clear();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

DenseRunner::Resolved& DenseRunner::ResolveExecution(
    ShapeCache& cache, const Execution& execution) {
  for (auto& [e, resolved] : cache.executions) {
    if (e == execution) return resolved;
  }
  cache.executions.emplace_back(execution,
                                DensePlan::Make(lt_, cache.problem, execution));
  return cache.executions.back().second;
}

DenseRunner::Resolved& DenseRunner::ResolveDefault(ShapeCache& cache,
                                                   uint64_t workspace_bytes,
                                                   uint32_t alignment) {
  const auto key = std::make_pair(workspace_bytes, alignment);
  auto it = cache.defaults.find(key);
  if (it != cache.defaults.end()) return it->second;
  // The algo as the heuristic returned it, not rebuilt from its config: the
  // default is what cuBLASLt runs untuned, even when its config cannot be
  // rebuilt (CudaBackend then says so in the entry).
  return cache.defaults
      .emplace(key, DensePlan::Default(lt_, cache.problem, workspace_bytes,
                                       alignment))
      .first->second;
}

StatusOr<DenseRunResult> DenseRunner::Run(const Execution& execution,
                                          const DenseShape& shape,
                                          const void* x, const void* w, void* y,
                                          cudaStream_t stream, void* workspace,
                                          size_t workspace_bytes) {
  // What the standard library can throw on the way (std::bad_alloc from the
  // caches) becomes a status too: this is a client's inference path.
  StatusOr<StatusOr<DenseRunResult>> run = GuardedStatus([&] {
    return RunOrFail(execution, shape, x, w, y, stream, workspace,
                     workspace_bytes);
  });
  if (!run.ok()) return run.status();
  return std::move(*run);
}

StatusOr<DenseRunResult> DenseRunner::RunOrFail(const Execution& execution,
                                                const DenseShape& shape,
                                                const void* x, const void* w,
                                                void* y, cudaStream_t stream,
                                                void* workspace,
                                                size_t workspace_bytes) {
  DenseRunResult result;
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) {
    return InvalidArgumentError("dense shape must have M, N, K >= 1");
  }
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device_) {
    return FailedPreconditionError(
        "DenseRunner for device " + std::to_string(device_) +
        " called while device " + std::to_string(current) + " is current");
  }
  auto [it, inserted] =
      shapes_.try_emplace(std::make_tuple(shape.m, shape.n, shape.k));
  ShapeCache& cache = it->second;
  if (inserted) {
    // The descriptors report a cuBLASLt error by throwing (cuda_status.h).
    StatusOr<std::shared_ptr<const CublasLtDense>> problem = GuardedStatus(
        [&] { return std::make_shared<const CublasLtDense>(shape); });
    if (!problem.ok()) {
      shapes_.erase(it);
      return FailedPreconditionError(problem.status().message());
    }
    cache.problem = std::move(*problem);
  }

  // An empty execution (no tuned entry) asks for the default outright; an
  // entry that kept the default (kCublasLtDefaultKernel) asks for it with
  // the workspace it was timed with, so it runs the algo the daemon timed
  // (a larger workspace given here must not pick another #0).
  if (execution.kernel == kCublasLtDefaultKernel && execution.params.empty() &&
      workspace_bytes >= execution.workspace_bytes) {
    workspace_bytes = execution.workspace_bytes;
  }
  const bool wants_default =
      execution.kernel.empty() ||
      (execution.kernel == kCublasLtDefaultKernel && execution.params.empty());
  std::string why;
  if (!wants_default) {
    const Resolved& wanted = ResolveExecution(cache, execution);
    Status launched = wanted.status();
    if (wanted.ok()) {
      launched =
          TryLaunch(**wanted, lt_, x, w, y, workspace, workspace_bytes, stream);
      if (launched.ok()) return result;
    }
    why = launched.message();
    result.fell_back = true;
    result.reason = execution.kernel + " cannot run here (" + why +
                    "); ran cuBLASLt's default instead";
  }

  const Resolved& fallback =
      ResolveDefault(cache, workspace_bytes, PointerAlignment(x, w, y));
  Status fallback_launched = fallback.status();
  if (fallback.ok()) {
    fallback_launched =
        TryLaunch(**fallback, lt_, x, w, y, workspace, workspace_bytes, stream);
  }
  if (!fallback_launched.ok()) {
    const std::string& fallback_error = fallback_launched.message();
    return FailedPreconditionError(
        wants_default
            ? "the default cannot run (" + fallback_error + ")"
            : execution.kernel + " cannot run here (" + why +
                  ") and neither can the default (" + fallback_error + ")");
  }
  return result;
}

}  // namespace gputune::kernels
