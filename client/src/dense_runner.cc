// gputune::DenseRunner on the kernel library's DenseRunner (kernels/cuda),
// which resolves, checks and caches the plans; this file translates the
// public types and errors. Built into libgputune_dense.so (CUDA only).
#include "gputune/dense_runner.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "client/src/dense_module.h"
#include "kernels/cuda/dense_runner.h"
#include "proto/execution_convert.h"

namespace gputune {

class DenseRunner::Impl {
 public:
  explicit Impl(std::unique_ptr<kernels::DenseRunner> runner)
      : runner(std::move(runner)) {}
  std::unique_ptr<kernels::DenseRunner> runner;
};

DenseRunner::DenseRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DenseRunner::~DenseRunner() = default;

absl::StatusOr<std::unique_ptr<DenseRunner>> DenseRunner::Create() {
  kernels::StatusOr<std::unique_ptr<kernels::DenseRunner>> runner =
      kernels::DenseRunner::Create();
  if (!runner.ok()) {
    return absl::FailedPreconditionError(
        "gputune: cannot run dense executions here: " +
        runner.status().message() +
        " (is a CUDA device visible? check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES)");
  }
  return std::unique_ptr<DenseRunner>(
      new DenseRunner(std::make_unique<Impl>(std::move(*runner))));
}

int DenseRunner::device() const { return impl_->runner->device(); }

absl::StatusOr<DenseRun> DenseRunner::Run(const v1::Execution& execution,
                                          const DenseArgs& args) {
  if (args.m < 1 || args.n < 1 || args.k < 1) {
    return absl::InvalidArgumentError(
        "dense shape must have M, N, K >= 1 (got M=" + std::to_string(args.m) +
        " N=" + std::to_string(args.n) + " K=" + std::to_string(args.k) + ")");
  }
  if (args.x == nullptr || args.w == nullptr || args.y == nullptr) {
    return absl::InvalidArgumentError("x, w and y must not be null");
  }
  if (args.workspace == nullptr && args.workspace_bytes > 0) {
    return absl::InvalidArgumentError(
        "workspace is null but workspace_bytes is " +
        std::to_string(args.workspace_bytes));
  }
  const kernels::DenseShape shape{args.m, args.n, args.k};
  kernels::StatusOr<kernels::DenseRunResult> r =
      impl_->runner->Run(FromProto(execution), shape, args.x, args.w, args.y,
                         static_cast<cudaStream_t>(args.stream), args.workspace,
                         args.workspace_bytes);
  if (!r.ok()) return absl::FailedPreconditionError(r.status().message());
  DenseRun run;
  run.fell_back = r->fell_back;
  if (r->fell_back) run.reason = std::move(r->reason);
  return run;
}

}  // namespace gputune

namespace {

absl::StatusOr<gputune::DenseRunner*> CreateRunner() {
  auto runner = gputune::DenseRunner::Create();
  if (!runner.ok()) return runner.status();
  return runner->release();
}

void DestroyRunner(gputune::DenseRunner* runner) { delete runner; }

absl::StatusOr<gputune::DenseRun> RunRunner(
    gputune::DenseRunner& runner, const gputune::v1::Execution& execution,
    const gputune::DenseArgs& args) {
  return runner.Run(execution, args);
}

constexpr gputune::client_internal::DenseModuleV1 kModule = {
    &CreateRunner, &DestroyRunner, &RunRunner};

}  // namespace

extern "C" __attribute__((visibility("default"))) const void*
gputune_dense_module_v1() {
  return &kModule;
}
