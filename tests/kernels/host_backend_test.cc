// HostBackend and the host kernels: correctness on awkward shapes, replay by
// a client, parameter checking, fingerprint, and that the candidates really
// differ in speed.
#include "kernels/host/host_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/dense.h"
#include "kernels/engine.h"
#include "kernels/host/host_kernels.h"
#include "kernels/reference.h"
#include "tests/support/catch.h"
#include "tests/support/sanitized.h"

namespace gputune::kernels {
namespace {

// Odd sizes on purpose: M of 1, 3, 17; N and K that no tile divides.
const std::vector<DenseShape> kShapeTable = {
    {.m = 1, .n = 1, .k = 1},     {.m = 1, .n = 64, .k = 128},
    {.m = 3, .n = 17, .k = 33},   {.m = 17, .n = 5, .k = 1000},
    {.m = 2, .n = 70, .k = 1029}, {.m = 17, .n = 33, .k = 300},
};

// Every candidate the backend offers, plus parameter values it does not.
std::vector<Execution> AllHostExecutions(HostBackend& backend,
                                         const DenseShape& shape) {
  std::vector<Execution> out = backend.Candidates(shape, 100).value();
  out.push_back({"host.unrolled", {{"unroll", 4}}});
  out.push_back(
      {"host.blocked", {{"tile_m", 1}, {"tile_n", 1}, {"tile_k", 8}}});
  out.push_back(
      {"host.blocked", {{"tile_m", 64}, {"tile_n", 3}, {"tile_k", 4096}}});
  out.push_back({"host.threaded", {{"threads", 1}, {"tile", 1}}});
  out.push_back({"host.threaded", {{"threads", 3}, {"tile", 7}}});
  return out;
}

// What a client does: regenerate the inputs and run the execution itself.
std::vector<Bf16> ClientRun(const Execution& exec, const DenseShape& shape,
                            uint64_t seed) {
  std::vector<Bf16> x(shape.m * shape.k), w(shape.n * shape.k),
      y(shape.m * shape.n);
  FillUniformBf16(seed, kStreamX, x.data(), x.size());
  FillUniformBf16(seed, kStreamW, w.data(), w.size());
  const Status s = RunHostExecution(exec, shape, x.data(), w.data(), y.data());
  INFO(s.message());
  CHECK(s.ok());
  return y;
}

std::vector<Bf16> BackendOutput(HostBackend& backend, Workload& workload,
                                const Execution& exec) {
  const HostWorkload& wl = *HostBackend::AsHost(workload).value();
  const Tolerance tol = ToleranceFor(wl.shape().k);
  CHECK(backend.RunAndCompare(workload, exec, tol.atol, tol.rtol).ok());
  return std::vector<Bf16>(wl.y(), wl.y() + wl.outputs());
}

TEST_CASE("every host candidate matches the reference on a shape table") {
  HostBackend backend;
  for (const DenseShape& shape : kShapeTable) {
    auto workload = backend.Prepare(shape, 42).value();
    const Tolerance tol = ToleranceFor(shape.k);
    for (const Execution& exec : AllHostExecutions(backend, shape)) {
      INFO("m=" << shape.m << " n=" << shape.n << " k=" << shape.k << " "
                << exec.ToString());
      const Comparison c =
          backend.RunAndCompare(*workload, exec, tol.atol, tol.rtol).value();
      CHECK(c.mismatches == 0);
      CHECK(c.non_finite == 0);
      // fp32 accumulation plus one bf16 rounding stays far inside atol.
      CHECK(c.max_abs_error < tol.atol);
    }
  }
}

TEST_CASE("RunHostExecution replays every candidate bit-identically") {
  HostBackend backend;
  const DenseShape shape{.m = 3, .n = 40, .k = 300};
  auto workload = backend.Prepare(shape, 9).value();
  for (const Execution& exec : AllHostExecutions(backend, shape)) {
    INFO(exec.ToString());
    CHECK(ClientRun(exec, shape, 9) == BackendOutput(backend, *workload, exec));
  }
}

TEST_CASE("RunHostExecution replays the execution the engine chose") {
  HostBackend backend;
  const DenseShape shape{.m = 2, .n = 96, .k = 256};
  TuneOptions options;
  options.budget_seconds = 0.3;
  options.seed = 11;
  const TuneReport report = TuneDense(backend, shape, options);
  REQUIRE(report.status.ok());
  auto workload = backend.Prepare(shape, 11).value();
  // The chosen execution, parsed back from its text form as a client that
  // received it through the daemon would.
  const auto replayed = ParseExecution(report.chosen.ToString());
  REQUIRE(replayed.has_value());
  CHECK(ClientRun(*replayed, shape, 11) ==
        BackendOutput(backend, *workload, report.chosen));
}

TEST_CASE("host.threaded gives the same bits whatever the thread count") {
  HostBackend backend;
  const DenseShape shape{.m = 5, .n = 77, .k = 129};
  auto workload = backend.Prepare(shape, 3).value();
  const auto serial = BackendOutput(
      backend, *workload, {"host.threaded", {{"threads", 1}, {"tile", 4}}});
  for (int64_t threads : {2, 4, 16}) {
    INFO("threads=" << threads);
    CHECK(BackendOutput(backend, *workload,
                        {"host.threaded",
                         {{"threads", threads}, {"tile", 4}}}) == serial);
  }
}

TEST_CASE("RunHostExecution rejects unknown kernels and bad parameters") {
  const DenseShape shape{.m = 1, .n = 1, .k = 1};
  Bf16 x = 0, w = 0, y = 0;
  struct Bad {
    Execution exec;
    const char* reason;
  };
  const std::vector<Bad> bad = {
      {{"host.fast", {}}, "unknown host kernel"},
      {{"cublaslt", {{"algo_id", 1}}}, "unknown host kernel"},
      {{"host.naive", {{"unroll", 8}}}, "has no parameter unroll"},
      {{"host.unrolled", {}}, "needs parameter unroll"},
      {{"host.unrolled", {{"unroll", 5}}}, "is not 4, 8 or 16"},
      {{"host.unrolled", {{"unroll", 8}, {"extra", 1}}}, "no parameter extra"},
      {{"host.blocked", {{"tile_m", 0}, {"tile_n", 4}, {"tile_k", 64}}},
       "tile_m=0 is outside [1, 64]"},
      {{"host.threaded", {{"threads", 1000}, {"tile", 4}}}, "outside"},
      {{"host.naive", {}, 1024}, "takes no workspace"},
  };
  for (const Bad& b : bad) {
    INFO(b.exec.ToString());
    const Status run = RunHostExecution(b.exec, shape, &x, &w, &y);
    CHECK(run.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(run.message(), Catch::Contains(b.reason));
    CHECK(ValidateHostExecution(b.exec) == run);
  }
  CHECK(ValidateHostExecution({"host.naive", {}}).ok());
  CHECK(
      RunHostExecution({"host.naive", {}}, {.m = 0, .n = 1, .k = 1}, &x, &w, &y)
          .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("host candidates start with the naive default and respect the cap") {
  HostBackend backend;
  const DenseShape shape{.m = 4, .n = 64, .k = 64};
  const std::vector<Execution> all = backend.Candidates(shape, 100).value();
  REQUIRE(all.size() >= 6);
  CHECK(all.front() == Execution{"host.naive", {}});
  for (const char* family : {"host.unrolled", "host.blocked"}) {
    CHECK(std::any_of(all.begin(), all.end(),
                      [&](const Execution& e) { return e.kernel == family; }));
  }
  for (const Execution& e : all) CHECK(ValidateHostExecution(e).ok());
  CHECK(backend.Candidates(shape, 3)->size() == 3);
  CHECK(*backend.Candidates(shape, 1) == std::vector<Execution>{all.front()});
}

TEST_CASE("the host fingerprint names the CPU, its size and the build") {
  const Fingerprint f = HostBackend().GetFingerprint();
  CHECK(f.backend == "host");
  CHECK_FALSE(f.device_name.empty());
  CHECK(f.processor_count >= 1);
  CHECK(f.memory_bytes > (uint64_t{64} << 20));
  CHECK(f.kernel_version == kKernelVersion);
  CHECK_THAT(f.build, Catch::Contains("-O3"));
  CHECK(f.device_uuid.empty());
  CHECK(f == HostBackend().GetFingerprint());
}

TEST_CASE("host candidates genuinely differ in speed") {
  HostBackend backend;
  const DenseShape shape{.m = 4, .n = 128, .k = 1024};
  auto workload = backend.Prepare(shape, 1).value();
  auto best_of = [&](const Execution& exec) {
    double best = 1e9;
    for (int i = 0; i < 5; ++i) {
      best = std::min(best, backend.TimeSample(*workload, exec, 3).value());
    }
    return best;
  };
  // Sanitizer instrumentation defeats vectorisation, so speed comparisons
  // only hold in an uninstrumented build.
#ifdef GPUTUNE_SANITIZED
  WARN("sanitizer build: speed comparison skipped");
  return;
#endif
  const double naive = best_of({"host.naive", {}});
  const double unrolled = best_of({"host.unrolled", {{"unroll", 16}}});
  CHECK(unrolled > 0);
  // The vectorised dot product does several adds per cycle, the naive loop
  // one per add latency: far more than noise apart.
  CHECK(naive > 1.5 * unrolled);
}

TEST_CASE("host workloads rotate inputs among identical copies") {
  HostBackend backend;
  auto workload = backend.Prepare({.m = 2, .n = 8, .k = 16}, 5).value();
  HostWorkload& wl = *HostBackend::AsHost(*workload).value();
  REQUIRE(wl.copies() >= 1);
  for (int c = 0; c < wl.copies(); ++c) {
    CHECK(std::equal(wl.x(0), wl.x(0) + 32, wl.x(c)));
    CHECK(std::equal(wl.w(0), wl.w(0) + 128, wl.w(c)));
  }
  const int first = wl.NextCopy();
  CHECK(wl.NextCopy() == (first + 1) % wl.copies());
}

}  // namespace
}  // namespace gputune::kernels

namespace gputune::kernels {
namespace {

TEST_CASE("every host kernel and the reference stop on the cancel flag") {
  const DenseShape shape{.m = 8, .n = 512, .k = 256};
  std::vector<Bf16> x(shape.m * shape.k, 0x3f80), w(shape.n * shape.k, 0x3f80),
      y(shape.m * shape.n);
  std::atomic<bool> cancel{true};
  HostBackend backend;
  for (const Execution& exec : AllHostExecutions(backend, shape)) {
    INFO(exec.ToString());
    const StatusOr<HostKernel> kernel = HostKernel::Make(exec);
    REQUIRE(kernel.ok());
    CHECK(kernel->Run(shape, x.data(), w.data(), y.data(), &cancel) ==
          CancelledStatus());
    // Without the flag set, the same call completes.
    std::atomic<bool> running{false};
    CHECK(kernel->Run(shape, x.data(), w.data(), y.data(), &running).ok());
  }
  CHECK(ReferenceDense(shape, x.data(), w.data(), &cancel).status() ==
        CancelledStatus());
  CHECK(ReferenceExactCheck(shape, x.data(), w.data(), &cancel).status() ==
        CancelledStatus());
  backend.SetCancel(&cancel);
  CHECK(backend.Prepare(shape, 1).status() == CancelledStatus());
}

}  // namespace
}  // namespace gputune::kernels
