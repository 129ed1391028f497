#include "kernels/cuda/dense_runner.h"

#include <cstdint>
#include <exception>
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

// Enqueues the plan; returns why it could not, empty on success.
std::string TryLaunch(const DensePlan& plan, cublasLtHandle_t lt, const void* x,
                      const void* w, void* y, void* workspace,
                      uint64_t workspace_bytes, cudaStream_t stream) {
  std::string why = plan.CannotLaunch(x, w, y, workspace_bytes);
  if (!why.empty()) return why;
  try {
    plan.Launch(lt, x, w, y, workspace, workspace_bytes, stream);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

std::unique_ptr<DenseRunner> DenseRunner::Create(std::string* error) {
  std::unique_ptr<DenseRunner> runner(new DenseRunner());
  const cudaError_t status = cudaGetDevice(&runner->device_);
  if (status != cudaSuccess) {
    *error = CudaErrorMessage(status, "cudaGetDevice");
    return nullptr;
  }
  const cublasStatus_t lt = cublasLtCreate(&runner->lt_);
  if (lt != CUBLAS_STATUS_SUCCESS) {
    *error = CublasErrorMessage(lt, "cublasLtCreate");
    return nullptr;
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
  Resolved resolved;
  resolved.plan =
      DensePlan::Make(lt_, cache.problem, execution, &resolved.error);
  cache.executions.emplace_back(execution, std::move(resolved));
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
  Resolved resolved;
  resolved.plan = DensePlan::Default(lt_, cache.problem, workspace_bytes,
                                     alignment, &resolved.error);
  return cache.defaults.emplace(key, std::move(resolved)).first->second;
}

DenseRunResult DenseRunner::Run(const Execution& execution,
                                const DenseShape& shape, const void* x,
                                const void* w, void* y, cudaStream_t stream,
                                void* workspace, size_t workspace_bytes) {
  DenseRunResult result;
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) {
    result.message = "dense shape must have M, N, K >= 1";
    return result;
  }
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device_) {
    result.message = "DenseRunner for device " + std::to_string(device_) +
                     " called while device " + std::to_string(current) +
                     " is current";
    return result;
  }
  auto [it, inserted] =
      shapes_.try_emplace(std::make_tuple(shape.m, shape.n, shape.k));
  ShapeCache& cache = it->second;
  if (inserted) {
    try {
      cache.problem = std::make_shared<const CublasLtDense>(shape);
    } catch (const std::exception& e) {
      shapes_.erase(it);
      result.message = e.what();
      return result;
    }
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
    Resolved& wanted = ResolveExecution(cache, execution);
    why = wanted.error;
    if (wanted.plan != nullptr) {
      why = TryLaunch(*wanted.plan, lt_, x, w, y, workspace, workspace_bytes,
                      stream);
      if (why.empty()) {
        result.ok = true;
        return result;
      }
    }
    result.fell_back = true;
    result.message = execution.kernel + " cannot run here (" + why +
                     "); ran cuBLASLt's default instead";
  }

  Resolved& fallback =
      ResolveDefault(cache, workspace_bytes, PointerAlignment(x, w, y));
  std::string fallback_error = fallback.error;
  if (fallback.plan != nullptr) {
    fallback_error = TryLaunch(*fallback.plan, lt_, x, w, y, workspace,
                               workspace_bytes, stream);
  }
  if (!fallback_error.empty()) {
    result.message = wants_default
                         ? "the default cannot run (" + fallback_error + ")"
                         : execution.kernel + " cannot run here (" + why +
                               ") and neither can the default (" +
                               fallback_error + ")";
    return result;
  }
  result.ok = true;
  return result;
}

}  // namespace gputune::kernels
