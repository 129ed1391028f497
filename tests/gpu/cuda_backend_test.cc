// CudaBackend on a real device: fingerprint, inputs and reference, every
// candidate valid on a table of shapes, and validation that rejects wrong
// candidates. Each test skips (and says so) without a device.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/cublaslt_dense.h"
#include "kernels/cuda/dense_plan.h"
#include "kernels/cuda/dense_runner.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/cuda/mma_skinny.h"
#include "kernels/dense.h"
#include "kernels/engine.h"
#include "kernels/reference.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

using testing::CopyToHost;
using testing::MakeBackend;
using testing::Must;
using testing::ShapeName;

// Decode and prefill M; K x N with and without tails (K % 256, N % 64 and
// K % 8 != 0, where only cuBLASLt applies).
std::vector<DenseShape> ShapeTable() {
  std::vector<DenseShape> shapes;
  for (const int64_t m : {1, 4, 16, 128}) {
    for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{
             {256, 512}, {4096, 1024}, {1024, 4096}, {1000, 333}, {1001, 64}}) {
      shapes.push_back({.m = m, .n = n, .k = k});
    }
  }
  return shapes;
}

TEST_CASE("the CUDA fingerprint names the device and every software version") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  const Fingerprint fp = backend->GetFingerprint();
  CHECK(fp.backend == "cuda");
  CHECK_FALSE(fp.device_name.empty());
  CHECK(std::regex_match(
      fp.device_uuid,
      std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                 "[0-9a-f]{12}")));
  CHECK(std::regex_match(fp.compute_capability, std::regex("[0-9]+\\.[0-9]")));
  CHECK(fp.processor_count > 0);
  CHECK(fp.memory_bytes > 0);
  // The driver's build (580.65.06) from /proc/driver/nvidia/version, else
  // the API level (13.0).
  CHECK(std::regex_match(fp.driver_version,
                         std::regex("[0-9]+(\\.[0-9]+){1,3}")));
  CHECK(std::regex_match(fp.runtime_version, std::regex("[0-9]+\\.[0-9]+")));
  CHECK(std::regex_match(fp.cublaslt_version,
                         std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")));
  CHECK(fp.kernel_version == kKernelVersion);
  CHECK(fp.build.find("nvcc") == 0);

  // The UUID selects the same device, in any case, with or without "GPU-".
  std::string upper = fp.device_uuid.substr(4);
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  CudaBackendOptions options;
  options.device = upper;
  auto by_uuid = MakeBackend(options);
  CHECK(by_uuid->GetFingerprint() == fp);
}

TEST_CASE(
    "device inputs are the host generator's and the device reference "
    "matches the host's double-precision one") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  for (const DenseShape shape : {DenseShape{.m = 3, .n = 70, .k = 520},
                                 DenseShape{.m = 65, .n = 129, .k = 33}}) {
    INFO(ShapeName(shape));
    auto workload = Must(backend->Prepare(shape, 42));
    const auto& wl = dynamic_cast<const CudaWorkload&>(*workload);
    const std::vector<Bf16> x = CopyToHost<Bf16>(wl.x(), shape.m * shape.k);
    const std::vector<Bf16> w = CopyToHost<Bf16>(wl.w(), shape.n * shape.k);
    std::vector<Bf16> host_x(x.size()), host_w(w.size());
    FillUniformBf16(42, kStreamX, host_x.data(), host_x.size());
    FillUniformBf16(42, kStreamW, host_w.data(), host_w.size());
    CHECK(x == host_x);
    CHECK(w == host_w);

    const std::vector<float> ref =
        CopyToHost<float>(wl.reference(), shape.m * shape.n);
    const std::vector<float> exact =
        Must(ReferenceDense(shape, x.data(), w.data()));
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(ref[i]) - exact[i]) /
                                  (1.0 + std::abs(exact[i])));
    }
    CHECK(worst < 1e-4);
  }
}

TEST_CASE(
    "the default is cuBLASLt's first heuristic result and own kernels "
    "are offered for decode") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  const auto decode =
      Must(backend->Candidates({.m = 4, .n = 4096, .k = 4096}, 16));
  REQUIRE(decode.size() >= 2);
  CHECK(decode.front().kernel == kCublasLtDefaultKernel);
  CHECK(std::any_of(decode.begin(), decode.end(), [](const Execution& e) {
    return e.kernel == kGemvSplitKKernel;
  }));
  if (backend->cc_major() >= 8) {
    CHECK(std::any_of(decode.begin(), decode.end(), [](const Execution& e) {
      return e.kernel == kMmaSkinnyKernel;
    }));
  }
  const auto prefill =
      Must(backend->Candidates({.m = 128, .n = 4096, .k = 4096}, 16));
  CHECK(std::none_of(prefill.begin(), prefill.end(), [](const Execution& e) {
    return e.kernel == kGemvSplitKKernel || e.kernel == kMmaSkinnyKernel;
  }));
  CHECK(Must(backend->Candidates({.m = 4, .n = 4096, .k = 4096}, 1)).size() ==
        1);
  for (const auto& e : decode) CHECK(e.workspace_bytes <= 32u << 20);
}

TEST_CASE(
    "mma_skinny is exact for every M from 1 to 16, with row tails and "
    "split-K") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  CudaBackendOptions options;
  options.rotate_inputs = false;  // validation only: one input set
  auto backend = MakeBackend(options);
  if (backend->cc_major() < 8) {
    WARN("skipped: mma_skinny needs compute capability 8.0");
    return;
  }
  for (int64_t m = 1; m <= 16; ++m) {
    // N = 1000: the last 16-row tile is partial; K = 14336: split-K.
    for (const DenseShape shape : {DenseShape{.m = m, .n = 1000, .k = 1024},
                                   DenseShape{.m = m, .n = 4096, .k = 14336}}) {
      INFO(ShapeName(shape));
      auto workload = Must(backend->Prepare(shape, 0x3a3a + m));
      const auto all = MmaSkinnyCandidates(shape, backend->sm_count(), 8);
      REQUIRE_FALSE(all.empty());
      for (const auto& params : all) {
        const Execution exec = ToExecution(params, shape);
        INFO(exec.ToString());
        const Tolerance tol = ToleranceFor(shape.k);
        const Comparison c =
            Must(backend->RunAndCompare(*workload, exec, tol.atol, tol.rtol));
        CHECK(c.mismatches == 0);
        CHECK(c.non_finite == 0);
        const Comparison exact =
            Must(backend->RunAndCompareExact(*workload, exec));
        CHECK(exact.mismatches == 0);
        CHECK(exact.non_finite == 0);
      }
    }
  }
}

TEST_CASE("every candidate validates on the shape table") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  for (const DenseShape& shape : ShapeTable()) {
    INFO(ShapeName(shape));
    const auto candidates = Must(backend->Candidates(shape, 32));
    REQUIRE_FALSE(candidates.empty());
    auto workload = Must(backend->Prepare(shape, 0x5eed));
    for (const Execution& exec : candidates) {
      INFO(exec.ToString());
      const Tolerance tol = ToleranceFor(shape.k, backend->Bf16Partials(exec));
      const Comparison c =
          Must(backend->RunAndCompare(*workload, exec, tol.atol, tol.rtol));
      CHECK(c.non_finite == 0);
      CHECK(c.mismatches == 0);
      // Exact on the integer inputs: split-K algos included, whatever they
      // reduce in.
      const Comparison exact =
          Must(backend->RunAndCompareExact(*workload, exec));
      CHECK(exact.non_finite == 0);
      CHECK(exact.mismatches == 0);
      // Timing goes through the same launch path with rotated inputs.
      CHECK(Must(backend->TimeSample(*workload, exec, 3)) > 0);
    }
  }
}

std::string Hex(const cublasLtMatmulAlgo_t& algo) {
  std::string out;
  const auto* bytes = reinterpret_cast<const unsigned char*>(&algo);
  for (size_t i = 0; i < sizeof(algo); ++i) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%02x", bytes[i]);
    out += buf;
  }
  return out;
}

// What production promises about the heuristic's algos (not that cuBLASLt
// rebuilds every one byte for byte, which it need not): the default is
// cuBLASLt's #0 as DenseRunner runs it for the entry's workspace, every
// rebuild that fails or differs is said in a note, and nothing is offered
// that a client cannot rebuild.
TEST_CASE(
    "the default is what DenseRunner runs for it, and every rebuild that "
    "fails or differs is noted") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  cublasLtHandle_t lt = nullptr;
  REQUIRE(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
  int mismatches = 0;
  for (const DenseShape& shape : ShapeTable()) {
    INFO(ShapeName(shape));
    const auto candidates = Must(backend->Candidates(shape, 32));
    const auto& rebuilds = backend->heuristic_rebuilds();
    REQUIRE_FALSE(rebuilds.empty());
    const auto notes = backend->CandidateNotes();
    const auto noted = [&](int index) {
      const std::string name = "cuBLASLt heuristic #" + std::to_string(index);
      return std::any_of(notes.begin(), notes.end(), [&](const auto& n) {
        return n.rfind(name + " ", 0) == 0;
      });
    };
    // The default first, resolved as DenseRunner resolves it.
    REQUIRE(candidates.front().kernel == kCublasLtDefaultKernel);
    auto problem = std::make_shared<const CublasLtDense>(shape);
    auto replayed = Must(DensePlan::Make(lt, problem, candidates.front()));
    auto dflt = Must(DensePlan::Default(
        lt, problem, candidates.front().workspace_bytes, 256));
    CHECK(std::memcmp(&replayed->lt_algo(), &dflt->lt_algo(),
                      sizeof(cublasLtMatmulAlgo_t)) == 0);
    for (const HeuristicRebuild& r : rebuilds) {
      INFO("heuristic #" << r.index << ": " << r.error);
      if (!r.rebuilt || !r.identical) {
        ++mismatches;
        CHECK(noted(r.index));
        WARN(ShapeName(shape)
             << " heuristic #" << r.index
             << (r.rebuilt ? " differs when rebuilt" : " cannot be rebuilt")
             << ":\n  heuristic " << Hex(r.heuristic) << "\n  rebuilt   "
             << Hex(r.rebuilt_algo));
      }
    }
    // Every cuBLASLt candidate but the default is a rebuilt config.
    for (size_t i = 1; i < candidates.size(); ++i) {
      if (candidates[i].kernel != kCublasLtKernel) continue;
      INFO(candidates[i].ToString());
      const Status planned =
          DensePlan::Make(lt, problem, candidates[i]).status();
      INFO(planned.message());
      CHECK(planned.ok());
    }
    for (const std::string& note : notes) WARN(note);
  }
  cublasLtDestroy(lt);
  WARN(mismatches << " heuristic algo(s) not rebuilt byte for byte");
}

TEST_CASE(
    "timing leaves no error behind, so every candidate takes all its "
    "samples") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  const DenseShape shape{.m = 1, .n = 4096, .k = 4096};
  auto workload = Must(backend->Prepare(shape, 3));
  for (const Execution& exec : Must(backend->Candidates(shape, 8))) {
    INFO(exec.ToString());
    for (int i = 0; i < 3; ++i) {
      CHECK(Must(backend->TimeSample(*workload, exec, 2)) > 0);
      // cudaEventQuery's cudaErrorNotReady must not be left pending.
      CHECK(cudaPeekAtLastError() == cudaSuccess);
    }
  }
  TuneOptions tune;
  tune.budget_seconds = 0.5;
  const TuneReport report = TuneDense(*backend, shape, tune);
  INFO(report.status.message());
  REQUIRE(report.status.ok());
  for (const CandidateReport& c : report.candidates) {
    INFO(c.execution.ToString() << ": " << c.error);
    CHECK(c.error.find("timing failed") == std::string::npos);
    if (c.validation == CandidateValidation::kPassed &&
        c.error.find("cut by budget") == std::string::npos) {
      CHECK(c.samples >= static_cast<uint32_t>(tune.min_samples));
    }
  }
}

TEST_CASE("the L2 scrub keeps W from being served out of L2") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  // 32 MiB of W: fits the H100/H200 L2, so without the scrub part of it can.
  const DenseShape shape{.m = 1, .n = 4096, .k = 4096};
  auto workload = Must(backend->Prepare(shape, 3));
  const Execution gemv = ToExecution(GemvSplitKParams{}, shape);
  const Execution lt = Must(backend->Candidates(shape, 1)).front();
  auto median = [&](bool scrub) {
    backend->set_scrub(scrub ? L2Scrub::kRead : L2Scrub::kNone);
    std::vector<double> samples;
    for (int i = 0; i < 15; ++i) {
      Must(backend->TimeSample(*workload, lt, 1));  // normal-priority W lines
      samples.push_back(Must(backend->TimeSample(*workload, gemv, 4)));
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
  };
  const double scrubbed = median(true);
  const double unscrubbed = median(false);
  backend->set_scrub(L2Scrub::kRead);
  WARN("GEMV 4096x4096: " << scrubbed * 1e6 << " us with the scrub, "
                          << unscrubbed * 1e6 << " us without");
  // The scrub can only take L2 hits away.
  CHECK(scrubbed >= unscrubbed * 0.97);
  // Weight bytes over time: never above the HBM's ~4.8 TB/s with the scrub.
  CHECK(2.0 * shape.n * shape.k / scrubbed < 5.5e12);
}

// A test-only kernel family: runs the default correctly, then overwrites one
// output element with 3.5e9 (bf16 0x4F4F), far outside any tolerance.
ExtraKernel WrongKernel(DenseRunner& runner) {
  return {"gputune.test_wrong", [&runner](const DenseLaunch& l) {
            const StatusOr<DenseRunResult> r =
                runner.Run(Execution{}, l.shape, l.x, l.w, l.y, l.stream,
                           l.workspace, l.workspace_bytes);
            // An extra kernel reports by throwing: the backend converts.
            if (!r.ok()) throw std::runtime_error(r.status().message());
            const int64_t middle = l.shape.m * l.shape.n / 2;
            CheckCuda(cudaMemsetAsync(static_cast<char*>(l.y) + 2 * middle,
                                      0x4F, 2, l.stream),
                      "cudaMemsetAsync");
          }};
}

TEST_CASE(
    "a candidate with one wrong output element is rejected and never "
    "chosen") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto runner = Must(DenseRunner::Create());
  CudaBackendOptions options;
  options.extra_kernels.push_back(WrongKernel(*runner));
  auto backend = MakeBackend(options);
  const DenseShape shape{.m = 4, .n = 1024, .k = 4096};

  auto workload = Must(backend->Prepare(shape, 1));
  const Tolerance tol = ToleranceFor(shape.k);
  const Comparison c = Must(backend->RunAndCompare(
      *workload, Execution{"gputune.test_wrong", {}, 0}, tol.atol, tol.rtol));
  CHECK(c.mismatches == 1);
  CHECK(c.non_finite == 0);

  TuneOptions tune;
  tune.budget_seconds = 0.3;
  const TuneReport report = TuneDense(*backend, shape, tune);
  REQUIRE(report.status.ok());
  CHECK(report.chosen.kernel != "gputune.test_wrong");
  bool seen = false;
  for (const CandidateReport& cand : report.candidates) {
    if (cand.execution.kernel != "gputune.test_wrong") continue;
    seen = true;
    CHECK(cand.validation == CandidateValidation::kFailed);
    CHECK_FALSE(cand.chosen);
    CHECK(cand.error.find("wrong results") != std::string::npos);
  }
  CHECK(seen);
}

TEST_CASE("a candidate that leaves outputs unwritten is caught by the poison") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  CudaBackendOptions options;
  options.extra_kernels.push_back(
      {"gputune.test_lazy", [](const DenseLaunch&) {}});
  auto backend = MakeBackend(options);
  const DenseShape shape{.m = 2, .n = 256, .k = 512};
  auto workload = Must(backend->Prepare(shape, 1));
  const Comparison c = Must(backend->RunAndCompare(
      *workload, Execution{"gputune.test_lazy", {}, 0}, 1.0, 0.0));
  CHECK(c.non_finite == shape.m * shape.n);
}

TEST_CASE("an execution the backend cannot run fails with the reason") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  const DenseShape shape{.m = 4, .n = 1024, .k = 1024};
  auto workload = Must(backend->Prepare(shape, 1));
  Execution bad = ToExecution(GemvSplitKParams{.m_tile = 4}, shape);
  bad.params["rows_per_warp"] = 3;
  CHECK_THAT(backend->RunAndCompare(*workload, bad, 1, 0).status().message(),
             Catch::Contains("rows_per_warp=3"));
  CHECK_THAT(backend->TimeSample(*workload, bad, 1).status().message(),
             Catch::Contains("rows_per_warp=3"));
  Execution bogus = ToExecution(LtAlgoConfig{.algo_id = 1 << 30}, 0);
  CHECK_THAT(backend->RunAndCompare(*workload, bogus, 1, 0).status().message(),
             Catch::Contains("cublasLtMatmulAlgo"));
  CHECK_THAT(
      backend
          ->RunAndCompare(*workload, Execution{"no.such.kernel", {}, 0}, 1, 0)
          .status()
          .message(),
      Catch::Contains("unknown kernel"));
}

}  // namespace
}  // namespace gputune::kernels

namespace gputune::kernels {
namespace {

// run.sh runs this one under compute-sanitizer --tool memcheck: gputune's own
// kernels (input fills, reference, compare, every GEMV and mma_skinny
// candidate, split-K reduction) over the shape table, without cuBLASLt, whose
// internals are not ours to check.
TEST_CASE("gputune's own kernels over the shape table [memcheck]",
          "[memcheck]") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  // One input set a shape (no rotation: its hundreds of fills check no
  // kernel), decode shapes only (the own kernels' candidates), and one
  // timed sample for the delay and the L2 sweep.
  CudaBackendOptions options;
  options.rotate_inputs = false;
  auto backend = MakeBackend(options);
  bool timed = false;
  for (const DenseShape& shape : ShapeTable()) {
    std::vector<Execution> own;
    for (const auto& p : GemvSplitKCandidates(shape, backend->sm_count())) {
      own.push_back(ToExecution(p, shape));
    }
    for (const auto& p :
         MmaSkinnyCandidates(shape, backend->sm_count(), backend->cc_major())) {
      own.push_back(ToExecution(p, shape));
    }
    if (own.empty()) continue;
    INFO(ShapeName(shape));
    auto workload = Must(backend->Prepare(shape, 0x5eed));
    for (const Execution& exec : own) {
      INFO(exec.ToString());
      const Tolerance tol = ToleranceFor(shape.k);
      CHECK(Must(backend->RunAndCompare(*workload, exec, tol.atol, tol.rtol))
                .mismatches == 0);
      CHECK(Must(backend->RunAndCompareExact(*workload, exec)).mismatches == 0);
      if (!timed) CHECK(Must(backend->TimeSample(*workload, exec, 2)) > 0);
      timed = true;
    }
  }
  CHECK(timed);
}

}  // namespace
}  // namespace gputune::kernels
