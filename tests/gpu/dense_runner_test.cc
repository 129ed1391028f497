// DenseRunner, the client's replay: the bytes a client computes are the bytes
// the daemon validated, and an execution that cannot run here falls back to
// the default, saying why. Each test skips (and says so) without a device.
#include "kernels/cuda/dense_runner.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/cublaslt_dense.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/engine.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

using testing::CopyToHost;
using testing::MakeBackend;
using testing::Must;
using testing::ShapeName;

constexpr size_t kWorkspace = 32u << 20;

// A client process's side: its own stream, workspace and output buffer.
class Client {
 public:
  Client() {
    runner_ = Must(DenseRunner::Create());
    CheckCuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }
  ~Client() { cudaStreamDestroy(stream_); }

  // Runs exec on the workload's inputs into a fresh output; returns it.
  std::vector<Bf16> Run(const Execution& exec, const CudaWorkload& wl,
                        StatusOr<DenseRunResult>* result,
                        size_t workspace = kWorkspace) {
    const int64_t count = wl.shape().m * wl.shape().n;
    DeviceBuffer y(count * sizeof(Bf16));
    CheckCuda(cudaMemset(y.get(), 0xFF, y.size()), "cudaMemset");
    *result = runner_->Run(exec, wl.shape(), wl.x(), wl.w(), y.get(), stream_,
                           workspace_.get(), workspace);
    CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return CopyToHost<Bf16>(y.get(), count);
  }

  DenseRunner& runner() { return *runner_; }
  cudaStream_t stream() const { return stream_; }

 private:
  std::unique_ptr<DenseRunner> runner_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer workspace_{kWorkspace};
};

// The output of one candidate as the daemon's backend validated it.
std::vector<Bf16> DaemonOutput(CudaBackend& backend, Workload& workload,
                               const Execution& exec) {
  const auto& wl = dynamic_cast<const CudaWorkload&>(workload);
  const Tolerance tol = ToleranceFor(wl.shape().k, backend.Bf16Partials(exec));
  const Comparison c =
      Must(backend.RunAndCompare(workload, exec, tol.atol, tol.rtol));
  REQUIRE(c.mismatches == 0);
  REQUIRE(c.non_finite == 0);
  return CopyToHost<Bf16>(wl.y(), wl.shape().m * wl.shape().n);
}

TEST_CASE(
    "a client replaying any candidate gets the daemon's output bit for "
    "bit") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  Client client;
  for (const DenseShape shape : {DenseShape{.m = 1, .n = 4096, .k = 4096},
                                 DenseShape{.m = 4, .n = 1024, .k = 14336},
                                 DenseShape{.m = 16, .n = 6144, .k = 4096},
                                 DenseShape{.m = 128, .n = 4096, .k = 4096},
                                 DenseShape{.m = 3, .n = 333, .k = 1000}}) {
    INFO(ShapeName(shape));
    const auto candidates = Must(backend->Candidates(shape, 32));
    auto workload = Must(backend->Prepare(shape, 7));
    const auto& wl = dynamic_cast<const CudaWorkload&>(*workload);
    for (const Execution& exec : candidates) {
      INFO(exec.ToString());
      const std::vector<Bf16> daemon = DaemonOutput(*backend, *workload, exec);
      StatusOr<DenseRunResult> result = DenseRunResult{};
      const std::vector<Bf16> replay = client.Run(exec, wl, &result);
      INFO(result.status().message());
      REQUIRE(result.ok());
      CHECK_FALSE(result->fell_back);
      CHECK(replay == daemon);
    }
  }
}

TEST_CASE(
    "an error the application left pending is neither DenseRunner's nor "
    "cleared by it") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  Client client;
  const DenseShape shape{.m = 1, .n = 4096, .k = 4096};
  auto workload = Must(backend->Prepare(shape, 7));
  const auto& wl = dynamic_cast<const CudaWorkload&>(*workload);
  const Execution gemv = ToExecution(GemvSplitKParams{}, shape);
  const Execution lt = Must(backend->Candidates(shape, 1)).front();
  for (const Execution& exec : {gemv, lt}) {
    INFO(exec.ToString());
    // The application's own (non-sticky) error, still pending.
    REQUIRE(cudaSetDevice(1 << 20) != cudaSuccess);
    const cudaError_t pending = cudaPeekAtLastError();
    REQUIRE(pending != cudaSuccess);
    StatusOr<DenseRunResult> result = DenseRunResult{};
    const std::vector<Bf16> replay = client.Run(exec, wl, &result);
    INFO(result.status().message());
    CHECK(result.ok());
    CHECK_FALSE(result->fell_back);
    // Our own kernel's launch check leaves it for its owner; cuBLASLt's
    // internals are not ours to vouch for, so only the GEMV is checked.
    if (exec.kernel == kGemvSplitKKernel) {
      CHECK(cudaPeekAtLastError() == pending);
    }
    (void)cudaGetLastError();
  }
}

TEST_CASE(
    "an execution that cannot run falls back to the default and says "
    "why") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  Client client;
  const DenseShape shape{.m = 4, .n = 1024, .k = 4096};
  const auto candidates = Must(backend->Candidates(shape, 32));
  auto workload = Must(backend->Prepare(shape, 3));
  const auto& wl = dynamic_cast<const CudaWorkload&>(*workload);
  // Same workspace and alignment as the daemon: the same default.
  const std::vector<Bf16> by_default =
      DaemonOutput(*backend, *workload, candidates.front());

  StatusOr<DenseRunResult> result = DenseRunResult{};
  SECTION("no tuned entry runs the default without complaint") {
    // With the workspace the default was timed with: the same algo.
    CHECK(client.Run(Execution{}, wl, &result,
                     candidates.front().workspace_bytes) == by_default);
    CHECK(result.ok());
    CHECK_FALSE(result->fell_back);
  }
  SECTION("an entry that kept the default runs it with any larger workspace") {
    REQUIRE(candidates.front().kernel == kCublasLtDefaultKernel);
    CHECK(client.Run(candidates.front(), wl, &result, kWorkspace) ==
          by_default);
    CHECK(result.ok());
    CHECK_FALSE(result->fell_back);
  }
  SECTION("unknown kernel") {
    CHECK(client.Run(Execution{"gputune.future_kernel", {}, 0}, wl, &result) ==
          by_default);
    CHECK(result.ok());
    CHECK(result->fell_back);
    CHECK(result->reason.find("unknown kernel") != std::string::npos);
  }
  SECTION("cuBLASLt refuses the algo") {
    const Execution bogus = ToExecution(LtAlgoConfig{.algo_id = 1 << 30}, 0);
    CHECK(client.Run(bogus, wl, &result) == by_default);
    REQUIRE(result.ok());
    CHECK(result->fell_back);
    CHECK(result->reason.find("cublasLtMatmulAlgo") != std::string::npos);
  }
  SECTION("bad params of an own kernel") {
    Execution bad = ToExecution(GemvSplitKParams{.m_tile = 4}, shape);
    bad.params["vec"] = 4;
    CHECK(client.Run(bad, wl, &result) == by_default);
    REQUIRE(result.ok());
    CHECK(result->fell_back);
    CHECK(result->reason.find("vec") != std::string::npos);
  }
  SECTION("workspace too small for split-K") {
    const Execution split = ToExecution(
        GemvSplitKParams{.rows_per_warp = 1, .split_k = 4, .m_tile = 4}, shape);
    const std::vector<Bf16> out = client.Run(split, wl, &result, 1024);
    CHECK(result.ok());
    CHECK(result->fell_back);
    CHECK(result->reason.find("workspace too small") != std::string::npos);
    // The default for a 1 KiB workspace may be another algo: check values.
    const Tolerance tol = ToleranceFor(shape.k);
    const std::vector<float> ref =
        CopyToHost<float>(wl.reference(), shape.m * shape.n);
    for (size_t i = 0; i < out.size(); ++i) {
      REQUIRE(std::abs(Bf16ToFloat(out[i]) - ref[i]) <=
              tol.atol + tol.rtol * std::abs(ref[i]));
    }
  }
}

TEST_CASE("a misaligned client buffer falls back instead of faulting") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  Client client;
  const DenseShape shape{.m = 2, .n = 512, .k = 1024};
  auto workload = Must(backend->Prepare(shape, 5));
  const auto& wl = dynamic_cast<const CudaWorkload&>(*workload);
  // x shifted by one element: 2-byte aligned.
  DeviceBuffer x((shape.m * shape.k + 1) * sizeof(Bf16));
  void* x_odd = static_cast<char*>(x.get()) + sizeof(Bf16);
  CheckCuda(cudaMemcpy(x_odd, wl.x(), shape.m * shape.k * sizeof(Bf16),
                       cudaMemcpyDeviceToDevice),
            "cudaMemcpy");
  DeviceBuffer y(shape.m * shape.n * sizeof(Bf16));
  DeviceBuffer workspace(kWorkspace);
  const Execution gemv = ToExecution(GemvSplitKParams{.m_tile = 2}, shape);
  const StatusOr<DenseRunResult> result =
      client.runner().Run(gemv, shape, x_odd, wl.w(), y.get(), client.stream(),
                          workspace.get(), workspace.size());
  CheckCuda(cudaStreamSynchronize(client.stream()), "cudaStreamSynchronize");
  INFO(result.status().message());
  CHECK(result.ok());
  CHECK(result->fell_back);
  CHECK(result->reason.find("aligned") != std::string::npos);
  const std::vector<Bf16> out = CopyToHost<Bf16>(y.get(), shape.m * shape.n);
  const std::vector<float> ref =
      CopyToHost<float>(wl.reference(), shape.m * shape.n);
  const Tolerance tol = ToleranceFor(shape.k);
  for (size_t i = 0; i < out.size(); ++i) {
    REQUIRE(std::abs(Bf16ToFloat(out[i]) - ref[i]) <=
            tol.atol + tol.rtol * std::abs(ref[i]));
  }
}

}  // namespace
}  // namespace gputune::kernels
