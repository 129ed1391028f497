// The benchmark engine (docs/design.md, "How a key is benchmarked"), driven
// through FaultBackend's misbehaving and fixed-time candidates and the real
// host backend.
#include "kernels/engine.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/host/fault_backend.h"
#include "kernels/host/host_backend.h"
#include "kernels/reference.h"
#include "tests/support/catch.h"
#include "tests/support/sanitized.h"

namespace gputune::kernels {
namespace {

const DenseShape kSmall{.m = 2, .n = 16, .k = 64};

Execution Fixed(int64_t time_us) {
  return {"fault.fixed", {{"time_us", time_us}}};
}

// Small budget: the suite has to stay fast.
TuneOptions FastOptions() {
  TuneOptions options;
  options.budget_seconds = 0.1;
  options.log = AutotuneLog::kDisabled;
  return options;
}

TuneReport Tune(std::vector<Execution> candidates,
                const TuneOptions& options = FastOptions(),
                const TuneHooks& hooks = {}) {
  FaultBackend backend(std::move(candidates));
  return TuneDense(backend, kSmall, options, hooks);
}

const CandidateReport& Find(const TuneReport& report, const Execution& exec) {
  for (const CandidateReport& c : report.candidates) {
    if (c.execution == exec) return c;
  }
  throw std::logic_error("no candidate " + exec.ToString());
}

int ChosenCount(const TuneReport& report) {
  int n = 0;
  for (const CandidateReport& c : report.candidates) n += c.chosen ? 1 : 0;
  return n;
}

TEST_CASE("tolerance scales with K") {
  const Tolerance t64 = ToleranceFor(64);
  const Tolerance t4096 = ToleranceFor(4096);
  // atol grows with sqrt(k): 64 times the terms, 8 times the tolerance.
  CHECK(t4096.atol == Approx(8 * t64.atol));
  CHECK(ToleranceFor(1).atol < t64.atol);
  // rtol is bf16's epsilon whatever k.
  CHECK(t64.rtol == kBf16Epsilon);
  CHECK(t4096.rtol == kBf16Epsilon);
  // Far below the size of the result itself (|y| ~ sqrt(k)/3).
  CHECK(t4096.atol < 0.05 * std::sqrt(4096.0) / 3);
}

TEST_CASE("the tolerance catches a single dropped term") {
  const DenseShape shape{.m = 8, .n = 64, .k = 1000};
  std::vector<Bf16> x(shape.m * shape.k), w(shape.n * shape.k);
  FillUniformBf16(1, kStreamX, x.data(), x.size());
  FillUniformBf16(1, kStreamW, w.data(), w.size());
  const std::vector<float> ref =
      ReferenceDense(shape, x.data(), w.data()).value();
  // What a kernel that forgets the last k would produce.
  std::vector<Bf16> dropped(ref.size()), correct(ref.size());
  for (int64_t m = 0; m < shape.m; ++m) {
    for (int64_t n = 0; n < shape.n; ++n) {
      const int64_t last = shape.k - 1;
      const float term = Bf16ToFloat(x[m * shape.k + last]) *
                         Bf16ToFloat(w[n * shape.k + last]);
      correct[m * shape.n + n] = FloatToBf16(ref[m * shape.n + n]);
      dropped[m * shape.n + n] = FloatToBf16(ref[m * shape.n + n] - term);
    }
  }
  const Tolerance tol = ToleranceFor(shape.k);
  CHECK(CompareWithReference(correct.data(), ref.data(), ref.size(), tol.atol,
                             tol.rtol)
            .mismatches == 0);
  CHECK(CompareWithReference(dropped.data(), ref.data(), ref.size(), tol.atol,
                             tol.rtol)
            .mismatches > 0);
}

TEST_CASE(
    "the wrong-result candidate is never chosen and its failure is visible") {
  const Execution wrong{"fault.wrong", {}};
  // Even as the fastest-looking option it must lose: it is dropped before
  // timing.
  const TuneReport report = Tune({Fixed(100), wrong, Fixed(90)});
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Fixed(90));
  const CandidateReport& c = Find(report, wrong);
  CHECK(c.validation == CandidateValidation::kFailed);
  CHECK_FALSE(c.chosen);
  CHECK(c.samples == 0);
  CHECK(c.max_abs_error >= 15);
  CHECK_THAT(c.error, Catch::Contains("wrong results") &&
                          Catch::Contains("differ from the reference"));
}

TEST_CASE("a throwing candidate is recorded with its message") {
  const Execution throws{"fault.throws", {}};
  const TuneReport report = Tune({Fixed(100), throws, Fixed(90)});
  REQUIRE(report.status.ok());
  const CandidateReport& c = Find(report, throws);
  CHECK(c.validation == CandidateValidation::kError);
  CHECK(c.error == "injected failure");
  CHECK_FALSE(c.chosen);
}

TEST_CASE("a candidate that throws while being timed is dropped") {
  const Execution throws{"fault.throws", {{"on_timing", 1}}};
  const TuneReport report = Tune({Fixed(100), throws});
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Fixed(100));
  const CandidateReport& c = Find(report, throws);
  CHECK(c.validation == CandidateValidation::kError);
  CHECK(c.error == "timing failed: injected failure");
  CHECK_FALSE(c.chosen);
}

TEST_CASE("the slow candidate is cut by the budget") {
  const Execution slow{"fault.slow", {{"sleep_ms", 50}}};
  TuneOptions options = FastOptions();
  options.budget_seconds = 0.03;
  const auto start = std::chrono::steady_clock::now();
  FaultBackend backend(
      {{"host.naive", {}}, {"host.unrolled", {{"unroll", 8}}}, slow});
  const TuneReport report = TuneDense(backend, kSmall, options);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  REQUIRE(report.status.ok());
  const CandidateReport& c = Find(report, slow);
  CHECK(c.validation == CandidateValidation::kPassed);
  CHECK_THAT(c.error, Catch::StartsWith("cut by budget"));
  CHECK(c.samples == 0);
  CHECK(c.median_seconds == 0);
  CHECK_FALSE(c.chosen);
  CHECK_FALSE(report.chosen == slow);
  // Validation (one run) and one warm-up run (0.1 s of sleeping), not the
  // 100 samples (5 s) it would need uncut: bounded loosely, for a loaded
  // machine, yet well below those.
  CHECK(elapsed < 2.5);
}

TEST_CASE(
    "min-improvement keeps the default when the winner is within the "
    "threshold") {
  // 99 us against 100 us is 1 %, below the default 2 % threshold.
  const TuneReport report = Tune({Fixed(100), Fixed(99)});
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Fixed(100));
  CHECK(report.candidates[0].is_default);
  CHECK(report.candidates[0].chosen);
  CHECK_FALSE(report.candidates[1].chosen);
  CHECK(report.default_seconds == Approx(100e-6));
  CHECK(report.chosen_seconds == Approx(100e-6));
  CHECK(report.candidates[1].median_seconds == Approx(99e-6));
}

TEST_CASE("min-improvement picks the winner when it beats the threshold") {
  SECTION("clearly faster") {
    const TuneReport report = Tune({Fixed(100), Fixed(97), Fixed(99)});
    REQUIRE(report.status.ok());
    CHECK(report.chosen == Fixed(97));
    CHECK(report.candidates[1].chosen);
    CHECK(report.default_seconds == Approx(100e-6));
    CHECK(report.chosen_seconds == Approx(97e-6));
  }
  SECTION("exactly on the threshold (at least 2 % is inclusive)") {
    CHECK(Tune({Fixed(100), Fixed(98)}).chosen == Fixed(98));
  }
  SECTION("a threshold of zero takes any improvement") {
    TuneOptions options = FastOptions();
    options.min_improvement_bps = 0;
    CHECK(Tune({Fixed(100), Fixed(99)}, options).chosen == Fixed(99));
  }
  SECTION("a higher threshold keeps the default") {
    TuneOptions options = FastOptions();
    options.min_improvement_bps = 500;
    CHECK(Tune({Fixed(100), Fixed(97)}, options).chosen == Fixed(100));
  }
}

TEST_CASE(
    "when the default fails validation the fastest valid candidate wins") {
  // 99 against 100 would not beat a valid default; with the default dropped
  // there is nothing to keep.
  const TuneReport report = Tune({{"fault.wrong", {}}, Fixed(100), Fixed(99)});
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Fixed(99));
  CHECK(report.default_seconds == 0);
  CHECK(report.candidates[0].is_default);
  CHECK_FALSE(report.candidates[0].chosen);
}

TEST_CASE(
    "a default that cannot be timed within the budget fails the job with the "
    "budget a comparison needs") {
  const Execution slow{"fault.slow", {{"sleep_ms", 30}}};
  TuneOptions options = FastOptions();
  options.budget_seconds = 0.03;  // 5 samples of 30 ms do not fit
  const TuneReport report = Tune({slow, Fixed(100), Fixed(99)}, options);
  CHECK_FALSE(report.status.ok());
  CHECK_THAT(report.candidates[0].error, Catch::StartsWith("cut by budget"));
  CHECK_THAT(report.status.message(),
             Catch::Contains("could be compared with the default") &&
                 Catch::Contains("raise the tuning budget"));
  CHECK(ChosenCount(report) == 0);
}

TEST_CASE("an untimeable tune never yields a final HIT") {
  SECTION("every candidate is longer than the budget allows") {
    const Execution slow{"fault.slow", {{"sleep_ms", 30}}};
    TuneOptions options = FastOptions();
    options.budget_seconds = 0.01;
    const TuneReport report =
        Tune({slow, {"fault.slow", {{"sleep_ms", 31}}}}, options);
    CHECK_FALSE(report.status.ok());
    CHECK(ChosenCount(report) == 0);
    CHECK(report.chosen_seconds == 0);
    for (const CandidateReport& c : report.candidates) {
      CHECK_THAT(c.error, Catch::StartsWith("cut by budget"));
    }
    // Says what to change, with a number: 5 samples of both, and more.
    CHECK_THAT(report.status.message(),
               Catch::Contains("the default fault.slow") &&
                   Catch::Contains("--tune_budget) to at least"));
  }
  SECTION("the host backend's slow default on a shape too big for the budget") {
    // The case, scaled down: host.naive runs for tens of ms here, so
    // five samples of it cannot fit in 10 ms.
    HostBackend backend;
    TuneOptions options = FastOptions();
    options.budget_seconds = 0.01;
    const TuneReport report =
        TuneDense(backend, {.m = 16, .n = 256, .k = 4096}, options);
    INFO(report.status.message());
    CHECK_FALSE(report.status.ok());
    CHECK(ChosenCount(report) == 0);
    CHECK_THAT(report.status.message(),
               Catch::Contains("raise the tuning budget"));
  }
}

TEST_CASE("timed candidates report median, spread and sample count") {
  TuneOptions options = FastOptions();
  options.max_samples = 7;
  const TuneReport report = Tune({Fixed(100), Fixed(50)}, options);
  REQUIRE(report.status.ok());
  for (const CandidateReport& c : report.candidates) {
    CHECK(c.validation == CandidateValidation::kPassed);
    CHECK(c.samples == 7);
    CHECK(c.spread_seconds == 0);
    CHECK(c.p20_seconds == c.median_seconds);
    CHECK(c.p80_seconds == c.median_seconds);
    CHECK(c.dispersion == 0);
    CHECK(c.error.empty());
  }
  CHECK(ChosenCount(report) == 1);
  CHECK_THAT(report.reason, Catch::Contains("2x faster than the default") &&
                                Catch::Contains("beyond noise"));
}

TEST_CASE("quantiles interpolate between order statistics") {
  const std::vector<double> sorted = {1, 2, 3, 4, 5};
  CHECK(Quantile(sorted, 0.5) == 3);
  CHECK(Quantile(sorted, 0.2) == Approx(1.8));
  CHECK(Quantile(sorted, 0.8) == Approx(4.2));
  CHECK(Quantile(sorted, 0) == 1);
  CHECK(Quantile(sorted, 1) == 5);
  CHECK(Quantile({7}, 0.2) == 7);
  CHECK(Quantile({2, 4}, 0.5) == 3);
}

TEST_CASE("a single valid candidate is chosen without timing") {
  std::vector<std::pair<int, int>> progress;
  TuneHooks hooks;
  hooks.progress = [&](int done, int total) {
    progress.emplace_back(done, total);
  };
  const TuneReport report =
      Tune({{"fault.wrong", {}}, {"host.naive", {}}, {"fault.throws", {}}},
           FastOptions(), hooks);
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Execution{"host.naive", {}});
  const CandidateReport& c = report.candidates[1];
  CHECK(c.chosen);
  CHECK(c.samples == 0);
  CHECK(c.median_seconds == 0);
  CHECK(report.chosen_seconds == 0);
  CHECK(report.default_seconds == 0);
  CHECK(progress == std::vector<std::pair<int, int>>{{1, 3}, {2, 3}, {3, 3}});
}

TEST_CASE("no valid candidate fails the report with a reason") {
  const TuneReport report = Tune({{"fault.wrong", {}}, {"fault.throws", {}}});
  CHECK_FALSE(report.status.ok());
  CHECK(ChosenCount(report) == 0);
  CHECK_THAT(report.status.message(),
             Catch::StartsWith("no valid candidate among 2") &&
                 Catch::Contains("fault.wrong(): wrong results") &&
                 Catch::Contains("fault.throws(): injected failure"));
  REQUIRE(report.candidates.size() == 2);
}

TEST_CASE("cancel stops the job") {
  std::atomic<bool> cancel{false};
  TuneHooks hooks;
  hooks.cancel = &cancel;

  SECTION("before it starts") {
    cancel = true;
    const TuneReport report =
        Tune({Fixed(100), Fixed(50)}, FastOptions(), hooks);
    CHECK_FALSE(report.status.ok());
    CHECK(report.status == CancelledError("cancelled"));
  }
  SECTION("between candidates") {
    int calls = 0;
    hooks.progress = [&](int, int) {
      ++calls;
      cancel = true;
    };
    const TuneReport report =
        Tune({Fixed(100), Fixed(50), Fixed(20)}, FastOptions(), hooks);
    CHECK_FALSE(report.status.ok());
    CHECK(report.status == CancelledError("cancelled"));
    CHECK(calls == 1);
    CHECK(ChosenCount(report) == 0);
  }
  SECTION("between samples of a long measurement") {
    TuneOptions options = FastOptions();
    options.budget_seconds = 30;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      cancel = true;
    });
    const auto start = std::chrono::steady_clock::now();
    const TuneReport report = Tune({{"fault.slow", {{"sleep_ms", 10}}},
                                    {"fault.slow", {{"sleep_ms", 20}}}},
                                   options, hooks);
    canceller.join();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    CHECK_FALSE(report.status.ok());
    CHECK(report.status == CancelledError("cancelled"));
    // Uncancelled, 2 x 100 samples of 10-20 ms would take 3 s (more on a
    // loaded machine); cancelled at 0.1 s, it ends after at most one more
    // sample: bounded loosely, for a loaded machine, yet below those 3 s.
    CHECK(elapsed < 2.0);
  }
}

TEST_CASE("progress reports each candidate once, up to the total") {
  std::vector<std::pair<int, int>> progress;
  TuneHooks hooks;
  hooks.progress = [&](int done, int total) {
    progress.emplace_back(done, total);
  };
  const TuneReport report =
      Tune({Fixed(100), {"fault.wrong", {}}, Fixed(50)}, FastOptions(), hooks);
  REQUIRE(report.status.ok());
  CHECK(progress == std::vector<std::pair<int, int>>{{1, 3}, {2, 3}, {3, 3}});
}

TEST_CASE("the log level decides what is logged") {
  const std::vector<Execution> candidates = {
      Fixed(100), Fixed(50), Fixed(70), Fixed(60), {"fault.wrong", {}}};
  auto logged = [&](AutotuneLog level) {
    std::vector<std::pair<int, std::string>> lines;
    TuneHooks hooks;
    hooks.log = [&](int severity, const std::string& line) {
      lines.emplace_back(severity, line);
    };
    TuneOptions options = FastOptions();
    options.log = level;
    REQUIRE(Tune(candidates, options, hooks).status.ok());
    return lines;
  };

  SECTION("disabled: nothing") {
    CHECK(logged(AutotuneLog::kDisabled).empty());
  }
  SECTION("minimal: the winner and the top-3 times, and dropped candidates") {
    const auto lines = logged(AutotuneLog::kMinimal);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].first == 2);
    CHECK_THAT(lines[0].second, Catch::Contains("fault.wrong()"));
    CHECK(lines[1].first == 1);
    CHECK_THAT(lines[1].second,
               Catch::Contains("chose fault.fixed(time_us=50) at 50 us") &&
                   Catch::Contains("beyond noise") &&
                   Catch::Contains("2x the default's 100 us") &&
                   Catch::Contains("fastest: fault.fixed(time_us=50) 50 us, "
                                   "fault.fixed(time_us=60) 60 us, "
                                   "fault.fixed(time_us=70) 70 us"));
  }
  SECTION("full: every candidate") {
    const auto lines = logged(AutotuneLog::kFull);
    for (const Execution& exec : candidates) {
      const std::string name = exec.ToString();
      int mentions = 0;
      for (const auto& [severity, line] : lines) {
        mentions += line.find("candidate " + name) != std::string::npos;
      }
      INFO(name);
      CHECK(mentions >= 1);
    }
    CHECK(lines.size() > logged(AutotuneLog::kMinimal).size());
  }
}

TEST_CASE("autotune log levels have names that parse back") {
  for (AutotuneLog level :
       {AutotuneLog::kDisabled, AutotuneLog::kMinimal, AutotuneLog::kFull}) {
    const StatusOr<AutotuneLog> parsed =
        ParseAutotuneLog(AutotuneLogName(level));
    REQUIRE(parsed.ok());
    CHECK(*parsed == level);
  }
  CHECK(AutotuneLogName(AutotuneLog::kFull) == "full");
  const StatusOr<AutotuneLog> unknown = ParseAutotuneLog("verbose");
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unknown.status().message(),
             Catch::Contains("\"verbose\"") &&
                 Catch::Contains("disabled, minimal or full"));
}

TEST_CASE("invalid options and shapes fail the report naming the field") {
  SECTION("options") {
    TuneOptions options = FastOptions();
    options.min_samples = 5;
    options.max_samples = 3;
    CHECK(ValidateTuneOptions(options) ==
          InvalidArgumentError("max_samples (3) is below min_samples (5)"));
    const TuneReport report = Tune({Fixed(100)}, options);
    CHECK(report.status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(report.status.message(), Catch::Contains("max_samples"));
    CHECK(ValidateTuneOptions(FastOptions()).ok());
    CHECK(ValidateTuneOptions(TuneOptions{}).ok());
    options = FastOptions();
    options.budget_seconds = 0;
    CHECK_THAT(ValidateTuneOptions(options).message(),
               Catch::StartsWith("budget_seconds"));
  }
  SECTION("shape") {
    FaultBackend backend({Fixed(100)});
    const TuneReport report =
        TuneDense(backend, {.m = 1, .n = 0, .k = 8}, FastOptions());
    CHECK(report.status ==
          InvalidArgumentError("invalid shape: n must be >= 1, got 0"));
  }
}

// A backend whose device is gone: Candidates or Prepare fails with the
// status it is given.
class NoDeviceBackend final : public Backend {
 public:
  NoDeviceBackend(Status candidates, Status prepare)
      : candidates_(std::move(candidates)), prepare_(std::move(prepare)) {}
  std::string Name() const override { return "nodevice"; }
  Fingerprint GetFingerprint() const override { return {}; }
  StatusOr<std::vector<Execution>> Candidates(const DenseShape&, int) override {
    if (!candidates_.ok()) return candidates_;
    return std::vector<Execution>{{"x", {}}};
  }
  StatusOr<std::unique_ptr<Workload>> Prepare(const DenseShape&,
                                              uint64_t) override {
    return prepare_;
  }
  StatusOr<Comparison> RunAndCompare(Workload&, const Execution&, double,
                                     double) override {
    return Comparison{};
  }
  StatusOr<Comparison> RunAndCompareExact(Workload&,
                                          const Execution&) override {
    return Comparison{};
  }
  StatusOr<double> TimeSample(Workload&, const Execution&, int) override {
    return 1.0;
  }

 private:
  const Status candidates_;
  const Status prepare_;
};

TEST_CASE("a failing Prepare fails the report with the backend's message") {
  NoDeviceBackend backend(OkStatus(),
                          ResourceExhaustedError("out of device memory"));
  const TuneReport report = TuneDense(backend, kSmall, FastOptions());
  CHECK(report.status ==
        ResourceExhaustedError(
            "preparing the nodevice backend failed: out of device memory"));
}

TEST_CASE("a failing Candidates fails the report with the backend's status") {
  NoDeviceBackend backend(UnavailableError("cudaGetDevice: no device"),
                          OkStatus());
  const TuneReport report = TuneDense(backend, kSmall, FastOptions());
  CHECK(report.status ==
        UnavailableError(
            "preparing the nodevice backend failed: cudaGetDevice: no device"));
  CHECK(report.candidates.empty());
}

TEST_CASE("inputs that do not fit in memory fail the report, not the process") {
  // 2^56 weights (128 PiB): more than any address space, so the allocation
  // fails whatever the kernel's overcommit policy; x (8 elements) is
  // allocated before W, and nothing else.
#ifdef GPUTUNE_SANITIZED
  // AddressSanitizer aborts on an allocation this size instead of throwing.
  WARN("sanitizer build: skipped");
  return;
#endif
  HostBackend backend;
  const TuneReport report = TuneDense(
      backend, {.m = 1, .n = int64_t{1} << 53, .k = 8}, FastOptions());
  CHECK(report.status ==
        ResourceExhaustedError(
            "preparing the host backend failed: std::bad_alloc"));
}

TEST_CASE("a lost device is reported by DeviceStatus from then on") {
  FaultBackend backend({{"host.naive", {}}, {"fault.lose_device", {}}});
  CHECK(backend.DeviceStatus().ok());
  const TuneReport report = TuneDense(backend, kSmall, FastOptions());
  // The lost candidate is dropped with the device's error...
  CHECK(Find(report, {"fault.lose_device", {}}).error ==
        "injected device loss");
  // ...and the device stays lost: the daemon refuses further jobs on it.
  CHECK(backend.DeviceStatus() == UnavailableError("injected device loss"));
}

TEST_CASE("a backend's cancelled status in Prepare ends the job as cancelled") {
  NoDeviceBackend backend(OkStatus(), CancelledStatus());
  const TuneReport report = TuneDense(backend, kSmall, FastOptions());
  CHECK(report.status == CancelledError("cancelled"));
}

TEST_CASE(
    "the host backend tunes end to end without choosing a slower kernel") {
  HostBackend backend;
  TuneOptions options = FastOptions();
  options.budget_seconds = 0.3;
  const TuneReport report =
      TuneDense(backend, {.m = 4, .n = 128, .k = 512}, options);
  REQUIRE(report.status.ok());
  CHECK(ChosenCount(report) == 1);
  CHECK(report.candidates.front().is_default);
  CHECK(report.default_seconds > 0);
  CHECK(report.chosen_seconds > 0);
  CHECK(report.chosen_seconds <= report.default_seconds);
  for (const CandidateReport& c : report.candidates) {
    INFO(c.execution.ToString() << ": " << c.error);
    CHECK(c.validation == CandidateValidation::kPassed);
    if (c.chosen) CHECK(c.samples > 0);
  }
}

TEST_CASE("FaultBackend reads a candidate list and refuses unknown kernels") {
  const StatusOr<std::vector<Execution>> parsed = FaultBackend::ParseCandidates(
      "host.naive;fault.fixed(time_us=97);fault.slow(sleep_ms=5)");
  REQUIRE(parsed.ok());
  CHECK(*parsed == std::vector<Execution>{{"host.naive", {}},
                                          Fixed(97),
                                          {"fault.slow", {{"sleep_ms", 5}}}});
  const Status bogus =
      FaultBackend::ParseCandidates("host.naive;fault.bogus").status();
  CHECK(bogus.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bogus.message(), Catch::Contains("fault.bogus"));
  CHECK_THAT(FaultBackend::ParseCandidates("host.naive;(").status().message(),
             Catch::Contains("syntax error"));
  CHECK(FaultBackend::ParseCandidates("").status() ==
        InvalidArgumentError("no candidate given"));
  CHECK(FaultBackend().GetFingerprint().backend == "fault");
}

TEST_CASE("the default fault candidates exercise every failure in one job") {
  TuneOptions options = FastOptions();
  options.budget_seconds = 0.05;
  FaultBackend backend;
  const TuneReport report = TuneDense(backend, kSmall, options);
  REQUIRE(report.status.ok());
  CHECK(report.chosen.kernel.starts_with("host."));
  CHECK(Find(report, {"fault.wrong", {}}).validation ==
        CandidateValidation::kFailed);
  CHECK(Find(report, {"fault.throws", {}}).validation ==
        CandidateValidation::kError);
  CHECK_THAT(Find(report, {"fault.slow", {{"sleep_ms", 50}}}).error,
             Catch::StartsWith("cut by budget"));
}

}  // namespace
}  // namespace gputune::kernels

namespace gputune::kernels {
namespace {

TEST_CASE(
    "the exact check catches a dropped or repeated K term that the tolerance "
    "cannot see") {
  // From K of about 9,000 the absolute tolerance exceeds 1, the most one
  // term of uniform inputs can move an output.
  const DenseShape shape{.m = 2, .n = 64, .k = 12288};
  const Tolerance tol = ToleranceFor(shape.k);
  REQUIRE(tol.atol > 1);
  const std::vector<Execution> faulty = {
      {"fault.drop_term", {}},
      {"fault.repeat_term", {}},
      {"fault.drop_term", {{"at", 0}}},
      {"fault.repeat_term", {{"at", 5000}}},
  };
  FaultBackend backend;
  auto workload = backend.Prepare(shape, 7).value();
  for (const Execution& exec : faulty) {
    INFO(exec.ToString());
    // Invisible to the tolerance check...
    CHECK(backend.RunAndCompare(*workload, exec, tol.atol, tol.rtol)
              ->mismatches == 0);
    // ...but every output that has the term is off by exactly 1.
    const Comparison exact =
        backend.RunAndCompareExact(*workload, exec).value();
    CHECK(exact.mismatches > 0);
    CHECK(exact.max_abs_error == 1);
  }
  CHECK(backend.RunAndCompareExact(*workload, {"host.naive", {}})->mismatches ==
        0);

  std::vector<Execution> candidates = {{"host.naive", {}}};
  candidates.insert(candidates.end(), faulty.begin(), faulty.end());
  FaultBackend tuner(candidates);
  const TuneReport report = TuneDense(tuner, shape, FastOptions());
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Execution{"host.naive", {}});
  for (const Execution& exec : faulty) {
    const CandidateReport& c = Find(report, exec);
    CHECK(c.validation == CandidateValidation::kFailed);
    CHECK_THAT(c.error, Catch::Contains("exact check"));
  }
}

TEST_CASE("the exact check's inputs make every order and precision exact") {
  const DenseShape shape{.m = 3, .n = 40, .k = 3000};
  std::vector<Bf16> x(shape.m * shape.k), w(shape.n * shape.k);
  FillExactCheckBf16(5, kStreamExactX, x.data(), shape.m, shape.k);
  FillExactCheckBf16(5, kStreamExactW, w.data(), shape.n, shape.k);
  // The sparse reference is the plain one.
  CHECK(ReferenceExactCheck(shape, x.data(), w.data()).value() ==
        ReferenceDense(shape, x.data(), w.data()).value());
  const int64_t period = ExactCheckPeriod(shape.k);
  CHECK(period == 12);
  for (int64_t n = 0; n < shape.n; ++n) {
    int nonzero = 0;
    for (int64_t k = 0; k < shape.k; ++k) {
      const float v = Bf16ToFloat(w[n * shape.k + k]);
      CHECK((k % period == n % period ? std::abs(v) == 1 : v == 0));
      nonzero += v != 0;
    }
    CHECK(nonzero <= kExactCheckMaxTerms);
  }
  for (const Bf16 v : x) CHECK(std::abs(Bf16ToFloat(v)) == 1);
}

TEST_CASE("a correct split-K that reduces partial sums in bf16 passes") {
  // cuBLASLt may reduce split-K partials in the output type; the tolerance
  // widens with the partials (Backend::Bf16Partials), the exact check holds.
  const DenseShape shape{.m = 4, .n = 256, .k = 16384};
  CHECK(ToleranceFor(shape.k, 64).atol > ToleranceFor(shape.k).atol);
  CHECK(ToleranceFor(shape.k, 2).atol == ToleranceFor(shape.k).atol);
  const std::vector<Execution> splits = {
      {"fault.splitk_bf16", {{"split", 4}}},
      {"fault.splitk_bf16", {{"split", 16}}},
      {"fault.splitk_bf16", {{"split", 64}}},
  };
  FaultBackend backend;
  auto workload = backend.Prepare(shape, 3).value();
  for (const Execution& exec : splits) {
    INFO(exec.ToString());
    const Tolerance tol = ToleranceFor(shape.k, backend.Bf16Partials(exec));
    const Comparison c =
        backend.RunAndCompare(*workload, exec, tol.atol, tol.rtol).value();
    CHECK(c.mismatches == 0);
    CHECK(c.max_abs_error > 0);  // it really rounds differently
    CHECK(backend.RunAndCompareExact(*workload, exec)->mismatches == 0);
  }
  // And the engine asks the backend for the partials (a smaller shape, so
  // that the timing fits the test's budget).
  std::vector<Execution> candidates = {{"host.naive", {}}};
  candidates.insert(candidates.end(), splits.begin(), splits.end());
  FaultBackend tuner(candidates);
  // A budget that fits five samples of each also under the sanitizers
  // (about 20 ms a sample there): this case is about validation, not speed.
  TuneOptions options = FastOptions();
  options.budget_seconds = 2;
  const TuneReport report =
      TuneDense(tuner, {.m = 1, .n = 64, .k = 16384}, options);
  INFO(report.status.message());
  REQUIRE(report.status.ok());
  for (const Execution& exec : splits) {
    const CandidateReport& c = Find(report, exec);
    INFO(exec.ToString() << ": " << c.error);
    CHECK(c.validation == CandidateValidation::kPassed);
  }
}

// The CPU time this process has used, all threads: unlike wall time, a
// loaded machine does not stretch it.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

TEST_CASE("a cancel during long host work ends the job within 0.5 s of CPU") {
  // host.naive's reference and runs at this shape take seconds on this
  // machine; the flag is looked at every 64 outputs. What the job does after
  // the flag is measured in CPU time (the work it does, which the machine's
  // load does not change), not wall time.
  HostBackend backend;
  std::atomic<bool> cancel{false};
  TuneHooks hooks;
  hooks.cancel = &cancel;
  TuneOptions options = FastOptions();
  options.budget_seconds = 30;
  double cpu_at_cancel = 0;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cpu_at_cancel = ProcessCpuSeconds();
    cancel = true;
  });
  const TuneReport report =
      TuneDense(backend, {.m = 256, .n = 1024, .k = 4096}, options, hooks);
  const double cpu_at_return = ProcessCpuSeconds();
  canceller.join();
  CHECK_FALSE(report.status.ok());
  CHECK(report.status == CancelledError("cancelled"));
  INFO("CPU after the cancel: " << cpu_at_return - cpu_at_cancel << " s");
  CHECK(cpu_at_return - cpu_at_cancel < 0.5 * gputune::testing::kSlowdown);
}

}  // namespace
}  // namespace gputune::kernels
