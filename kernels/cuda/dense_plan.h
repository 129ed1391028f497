// DensePlan: one Execution resolved for one shape on the current device, ready
// to launch. The backend measures through it and DenseRunner replays through
// it, so a client runs the same rebuilt cuBLASLt algo (or the same own-kernel
// launch) that the daemon validated and timed.
#ifndef GPUTUNE_KERNELS_CUDA_DENSE_PLAN_H_
#define GPUTUNE_KERNELS_CUDA_DENSE_PLAN_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/cublaslt_dense.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/cuda/mma_skinny.h"
#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

class DensePlan {
 public:
  // Resolves the execution for problem->shape(): parses its params and, for
  // cuBLASLt, rebuilds and checks the algo with the handle
  // (kCublasLtDefaultKernel: Default() for its workspace_bytes and 256-byte
  // aligned pointers). Fails saying why it cannot run here:
  // kInvalidArgument for an unknown kernel or bad params,
  // kFailedPrecondition when cuBLASLt (cublasLtMatmulAlgoCheck) or the
  // device refuses. Never throws.
  static StatusOr<std::unique_ptr<DensePlan>> Make(
      cublasLtHandle_t handle, std::shared_ptr<const CublasLtDense> problem,
      const Execution& execution);

  // cuBLASLt's default for the problem: the first of the
  // kDefaultHeuristicCandidates heuristic results for workspace_limit bytes
  // and pointers aligned to `alignment` bytes, as the heuristic returned it.
  // What an Execution{kCublasLtDefaultKernel} resolves to, in the backend and
  // in DenseRunner alike. kFailedPrecondition when the heuristic has no algo,
  // kInternal naming the cuBLASLt call when it fails. Never throws.
  static StatusOr<std::unique_ptr<DensePlan>> Default(
      cublasLtHandle_t handle, std::shared_ptr<const CublasLtDense> problem,
      uint64_t workspace_limit, uint32_t alignment);

  // cuBLASLt's own heuristic result, as it returned it (no rebuild from a
  // config): what cuBLASLt runs untuned, the default. kFailedPrecondition
  // when the heuristic result is not usable. Never throws.
  static StatusOr<std::unique_ptr<DensePlan>> FromHeuristic(
      std::shared_ptr<const CublasLtDense> problem,
      const cublasLtMatmulHeuristicResult_t& heuristic);

  const DenseShape& shape() const { return problem_->shape(); }
  // The cuBLASLt algo (kCublasLt plans only).
  const cublasLtMatmulAlgo_t& lt_algo() const { return lt_.algo; }
  // Workspace bytes a launch needs.
  uint64_t workspace_bytes() const { return workspace_bytes_; }
  // Alignment in bytes that x, w and y must have.
  uint32_t min_alignment() const { return min_alignment_; }

  // OK when the pointers and workspace can take this plan, else
  // kFailedPrecondition saying why not (for a caller that would rather fall
  // back than fail).
  Status CheckLaunchable(const void* x, const void* w, const void* y,
                         uint64_t workspace_bytes) const;

  // Enqueues y = x * W^T on the stream. Throws std::runtime_error when the
  // launch is refused.
  void Launch(cublasLtHandle_t handle, const void* x, const void* w, void* y,
              void* workspace, uint64_t workspace_bytes,
              cudaStream_t stream) const;

 private:
  enum class Family { kCublasLt, kGemvSplitK, kMmaSkinny };
  DensePlan(std::shared_ptr<const CublasLtDense> problem, Family family)
      : problem_(std::move(problem)), family_(family) {}

  const std::shared_ptr<const CublasLtDense> problem_;
  const Family family_;
  LtPlan lt_;              // kCublasLt
  GemvSplitKParams gemv_;  // kGemvSplitK
  MmaSkinnyParams mma_;    // kMmaSkinny
  uint64_t workspace_bytes_ = 0;
  uint32_t min_alignment_ = 1;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_DENSE_PLAN_H_
