#include "kernels/cuda/dense_plan.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/execution_params.h"

namespace gputune::kernels {
namespace {

bool Aligned(const void* p, uint32_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

}  // namespace

StatusOr<std::unique_ptr<DensePlan>> DensePlan::Make(
    cublasLtHandle_t handle, std::shared_ptr<const CublasLtDense> problem,
    const Execution& execution) {
  if (execution.kernel == kCublasLtKernel) {
    StatusOr<LtAlgoConfig> config = LtAlgoConfigFromExecution(execution);
    if (!config.ok()) return config.status();
    std::unique_ptr<DensePlan> plan(
        new DensePlan(std::move(problem), Family::kCublasLt));
    StatusOr<LtPlan> lt = plan->problem_->BuildAlgo(handle, *config);
    if (!lt.ok()) return lt.status();
    plan->lt_ = *lt;
    plan->workspace_bytes_ = plan->lt_.workspace_bytes;
    plan->min_alignment_ = plan->lt_.min_alignment;
    return plan;
  }
  if (execution.kernel == kCublasLtDefaultKernel) {
    GPUTUNE_KERNELS_RETURN_IF_ERROR(OnlyKnownParams(execution, {}));
    return Default(handle, std::move(problem), execution.workspace_bytes, 256);
  }
  if (execution.kernel == kGemvSplitKKernel) {
    std::unique_ptr<DensePlan> plan(
        new DensePlan(std::move(problem), Family::kGemvSplitK));
    StatusOr<GemvSplitKParams> gemv =
        GemvSplitKParamsFromExecution(execution, plan->shape());
    if (!gemv.ok()) return gemv.status();
    plan->gemv_ = *gemv;
    plan->workspace_bytes_ =
        GemvSplitKWorkspaceBytes(plan->gemv_, plan->shape());
    plan->min_alignment_ = 16;
    return plan;
  }
  if (execution.kernel == kMmaSkinnyKernel) {
    std::unique_ptr<DensePlan> plan(
        new DensePlan(std::move(problem), Family::kMmaSkinny));
    StatusOr<MmaSkinnyParams> mma =
        MmaSkinnyParamsFromExecution(execution, plan->shape());
    if (!mma.ok()) return mma.status();
    plan->mma_ = *mma;
    // bf16 mma.sync needs 8.0. Checked once here, not at every launch; where
    // no device is current the launch itself fails. (No cudaGetLastError:
    // an error the application left pending is not ours to clear.)
    int device = 0;
    int major = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device) == cudaSuccess &&
        major < 8) {
      return FailedPreconditionError(
          std::string(kMmaSkinnyKernel) +
          ": needs compute capability 8.0 or newer, the device has " +
          std::to_string(major) + ".x");
    }
    plan->workspace_bytes_ = MmaSkinnyWorkspaceBytes(plan->mma_, plan->shape());
    plan->min_alignment_ = 16;
    return plan;
  }
  return InvalidArgumentError("unknown kernel \"" + execution.kernel + "\"");
}

StatusOr<std::unique_ptr<DensePlan>> DensePlan::Default(
    cublasLtHandle_t handle, std::shared_ptr<const CublasLtDense> problem,
    uint64_t workspace_limit, uint32_t alignment) {
  // Heuristics reports a cuBLASLt error by throwing (CheckCublas).
  StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> heuristics =
      GuardedStatus([&] {
        return problem->Heuristics(handle, kDefaultHeuristicCandidates,
                                   workspace_limit, alignment);
      });
  if (!heuristics.ok()) return heuristics.status();
  if (heuristics->empty()) {
    return FailedPreconditionError(
        "cuBLASLt's heuristic has no algo for this shape with " +
        std::to_string(workspace_limit) + " workspace bytes and " +
        std::to_string(alignment) + "-byte alignment");
  }
  return FromHeuristic(std::move(problem), heuristics->front());
}

StatusOr<std::unique_ptr<DensePlan>> DensePlan::FromHeuristic(
    std::shared_ptr<const CublasLtDense> problem,
    const cublasLtMatmulHeuristicResult_t& heuristic) {
  std::unique_ptr<DensePlan> plan(
      new DensePlan(std::move(problem), Family::kCublasLt));
  StatusOr<LtPlan> lt = plan->problem_->PlanFromHeuristic(heuristic);
  if (!lt.ok()) return lt.status();
  plan->lt_ = *lt;
  plan->workspace_bytes_ = plan->lt_.workspace_bytes;
  plan->min_alignment_ = plan->lt_.min_alignment;
  return plan;
}

Status DensePlan::CheckLaunchable(const void* x, const void* w, const void* y,
                                  uint64_t workspace_bytes) const {
  if (workspace_bytes < workspace_bytes_) {
    return FailedPreconditionError(
        "workspace too small: needs " + std::to_string(workspace_bytes_) +
        " bytes, got " + std::to_string(workspace_bytes));
  }
  if (!Aligned(x, min_alignment_) || !Aligned(w, min_alignment_) ||
      !Aligned(y, min_alignment_)) {
    return FailedPreconditionError("x, W and y must be " +
                                   std::to_string(min_alignment_) +
                                   "-byte aligned");
  }
  return OkStatus();
}

void DensePlan::Launch(cublasLtHandle_t handle, const void* x, const void* w,
                       void* y, void* workspace, uint64_t workspace_bytes,
                       cudaStream_t stream) const {
  switch (family_) {
    case Family::kCublasLt:
      problem_->Matmul(handle, lt_.algo, x, w, y, workspace, workspace_bytes,
                       stream);
      return;
    case Family::kGemvSplitK:
      LaunchGemvSplitK(gemv_, shape(), x, w, y, workspace, stream);
      return;
    case Family::kMmaSkinny:
      LaunchMmaSkinny(mma_, shape(), x, w, y, workspace, stream);
      return;
  }
}

}  // namespace gputune::kernels
