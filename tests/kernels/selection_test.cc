// The engine's timing and selection on synthetic timings: interleaved
// rounds, the noise rule, drift, and samples sized to the kernel's length.
// SyntheticBackend reports times from a formula (base time, noise, device-wide
// drift) and logs every TimeSample call, so each rule is checked exactly.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/engine.h"
#include "kernels/host/host_backend.h"
#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

struct Synthetic {
  double us = 100;      // true time of one run
  double noise = 0;     // each sample is off by up to +-noise, relative
  double run_wall = 0;  // wall seconds the validation run lasts
};

// Candidates "syn(id=i)". Validation runs host.naive (correct); TimeSample
// returns us * (1 + drift * n) * (1 + noise * u), n counting every sample
// of the job (the device's drift) and u uniform in [-1, 1] from a fixed
// seed, without spending the time.
class SyntheticBackend final : public Backend {
 public:
  explicit SyntheticBackend(std::vector<Synthetic> specs, double drift = 0,
                            uint64_t seed = 1)
      : specs_(std::move(specs)), drift_(drift), state_(seed) {}

  struct Call {
    int64_t id;
    int reps;
  };
  const std::vector<Call>& calls() const { return calls_; }
  std::vector<Call> CallsOf(int64_t id) const {
    std::vector<Call> out;
    for (const Call& c : calls_) {
      if (c.id == id) out.push_back(c);
    }
    return out;
  }

  std::string Name() const override { return "synthetic"; }
  Fingerprint GetFingerprint() const override { return {}; }
  StatusOr<std::vector<Execution>> Candidates(const DenseShape&, int) override {
    std::vector<Execution> out;
    for (size_t i = 0; i < specs_.size(); ++i) {
      out.push_back({"syn", {{"id", static_cast<int64_t>(i)}}});
    }
    return out;
  }
  StatusOr<std::unique_ptr<Workload>> Prepare(const DenseShape& shape,
                                              uint64_t seed) override {
    return host_.Prepare(shape, seed);
  }
  StatusOr<Comparison> RunAndCompare(Workload& workload, const Execution& exec,
                                     double atol, double rtol) override {
    const double wall = specs_[exec.params.at("id")].run_wall;
    if (wall > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(wall));
    return host_.RunAndCompare(workload, {"host.naive", {}}, atol, rtol);
  }
  StatusOr<Comparison> RunAndCompareExact(Workload& workload,
                                          const Execution&) override {
    return host_.RunAndCompareExact(workload, {"host.naive", {}});
  }
  StatusOr<double> TimeSample(Workload&, const Execution& exec,
                              int reps) override {
    const int64_t id = exec.params.at("id");
    calls_.push_back({id, reps});
    const Synthetic& spec = specs_[id];
    const double drift = 1 + drift_ * static_cast<double>(calls_.size() - 1);
    return spec.us * 1e-6 * drift * (1 + spec.noise * Uniform());
  }

 private:
  // Uniform in [-1, 1] (SplitMix64).
  double Uniform() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1p-53 * 2 - 1;
  }

  HostBackend host_;
  const std::vector<Synthetic> specs_;
  const double drift_;
  uint64_t state_;
  std::vector<Call> calls_;
};

const DenseShape kShape{.m = 1, .n = 8, .k = 16};

TuneOptions Options(int max_samples) {
  TuneOptions options;
  options.budget_seconds = 1;
  options.min_samples = 5;
  options.max_samples = max_samples;
  // Far above a validation run of the tiny shape, even on a loaded machine,
  // so "short" and "long" candidates are what each test says they are.
  options.min_sample_seconds = 0.005;
  options.log = AutotuneLog::kDisabled;
  return options;
}

Execution Syn(int64_t id) { return {"syn", {{"id", id}}}; }

TEST_CASE("a truly faster candidate is chosen beyond noise") {
  // 30 % faster with +-15 % noise: its p80 (~76 us) is far below the
  // default's p20 (~91 us).
  SyntheticBackend backend(
      {{.us = 100, .noise = 0.15}, {.us = 70, .noise = 0.15}});
  const TuneReport report = TuneDense(backend, kShape, Options(60));
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Syn(1));
  const CandidateReport& d = report.candidates[0];
  const CandidateReport& c = report.candidates[1];
  CHECK(c.p80_seconds < d.p20_seconds);
  CHECK(d.p20_seconds < d.median_seconds);
  CHECK(d.median_seconds < d.p80_seconds);
  CHECK(d.dispersion ==
        Approx((d.p80_seconds - d.p20_seconds) / d.median_seconds));
  // Uniform +-15 %: p20 and p80 near -9 % and +9 %.
  CHECK(d.dispersion == Approx(0.18).margin(0.06));
  CHECK_THAT(report.reason, Catch::Contains("syn(id=1) is") &&
                                Catch::Contains("faster than the default") &&
                                Catch::Contains("beyond noise"));
}

TEST_CASE("a median win inside the noise keeps the default") {
  // 10 % faster by median, well over the 2 % threshold, but the noise
  // (+-15 %) makes its p80 (~98 us) no better than the default's p20 (~91).
  SyntheticBackend backend(
      {{.us = 100, .noise = 0.15}, {.us = 90, .noise = 0.15}});
  const TuneReport report = TuneDense(backend, kShape, Options(60));
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Syn(0));
  CHECK(report.candidates[0].chosen);
  CHECK(report.candidates[1].median_seconds <
        0.98 * report.candidates[0].median_seconds);
  CHECK_THAT(report.reason, Catch::StartsWith("default kept: syn(id=1)") &&
                                Catch::Contains("within noise"));
}

TEST_CASE("a noiseless win below min_improvement_bps keeps the default") {
  SyntheticBackend backend({{.us = 100}, {.us = 99}});
  const TuneReport report = TuneDense(backend, kShape, Options(10));
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Syn(0));
  CHECK_THAT(report.reason, Catch::Contains("only 1 % faster") &&
                                Catch::Contains("min_improvement_bps=200"));
}

TEST_CASE("drift during the job does not make a copy of the default win") {
  // Two identical kernels on a device that gets 1 % faster every sample (a
  // clock ramping up). Timed one after the other, the second would look
  // ~10 % faster, beyond any noise; interleaved, both see the same drift.
  SyntheticBackend backend({{.us = 100}, {.us = 100}}, /*drift=*/-0.01);
  const TuneReport report = TuneDense(backend, kShape, Options(10));
  REQUIRE(report.status.ok());
  CHECK(report.chosen == Syn(0));
  const double d = report.candidates[0].median_seconds;
  const double c = report.candidates[1].median_seconds;
  CHECK(std::abs(d - c) / d < 0.02);
}

TEST_CASE("candidates are sampled in interleaved rounds in rotating order") {
  SyntheticBackend backend({{.us = 100}, {.us = 100}, {.us = 100}});
  const TuneReport report = TuneDense(backend, kShape, Options(6));
  REQUIRE(report.status.ok());
  // Each candidate first warms up and calibrates alone (2 runs + 1 sample:
  // reps sized from the warm-up reach min_sample_seconds), then 6 rounds.
  std::vector<int64_t> ids;
  for (const auto& call : backend.calls()) ids.push_back(call.id);
  REQUIRE(ids.size() == 9 + 18);
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + 9) ==
        std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2});
  CHECK(std::vector<int64_t>(ids.begin() + 9, ids.end()) ==
        std::vector<int64_t>{0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2, 1, 2, 0, 2, 0,
                             1});
  for (const CandidateReport& c : report.candidates) CHECK(c.samples == 6);
}

TEST_CASE("a kernel whose one timed run lasts a sample takes one warm-up") {
  // Candidate 1 runs 60 ms (> min_sample_seconds): one timed warm-up run,
  // then one run per sample. Candidate 0 is short: warmup_runs runs, then
  // calibration.
  SyntheticBackend backend({{.us = 10}, {.us = 60000}});
  TuneOptions options = Options(8);
  options.warmup_runs = 2;
  const TuneReport report = TuneDense(backend, kShape, options);
  REQUIRE(report.status.ok());
  const auto long_calls = backend.CallsOf(1);
  CHECK(long_calls.size() == report.candidates[1].samples + 1);
  for (const auto& call : long_calls) CHECK(call.reps == 1);
  const auto short_calls = backend.CallsOf(0);
  REQUIRE(short_calls.size() > report.candidates[0].samples);
  CHECK(short_calls[0].reps == 1);  // warm-up
  CHECK(short_calls[1].reps == 1);
  // A 10 us kernel needs hundreds of runs a sample to reach 5 ms.
  CHECK(short_calls.back().reps >= 500);
}

TEST_CASE("reps come from the kernel's timed run, not the validation's wall") {
  // Validation lasts 20 ms (fills, compare, copies: longer than a sample),
  // the kernel 10 us. Sized from the validation, each sample would be one
  // run, warm-up skipped; sized from a timed run, a sample is >= 500 runs
  // (5 ms of kernel time) after warmup_runs single runs.
  SyntheticBackend backend(
      {{.us = 10, .run_wall = 0.02}, {.us = 10, .run_wall = 0.02}});
  TuneOptions options = Options(6);
  options.warmup_runs = 1;
  const TuneReport report = TuneDense(backend, kShape, options);
  REQUIRE(report.status.ok());
  for (int64_t id : {0, 1}) {
    const auto calls = backend.CallsOf(id);
    REQUIRE(calls.size() > report.candidates[id].samples);
    CHECK(calls.front().reps == 1);  // the warm-up
    for (size_t i = calls.size() - report.candidates[id].samples;
         i < calls.size(); ++i) {
      CHECK(calls[i].reps * 10e-6 >= options.min_sample_seconds);
    }
  }
}

TEST_CASE("the plan cuts candidates whose samples do not fit, slowest first") {
  // Budget 1 s, 5 samples each: the default (tiny) and 100 ms candidates
  // fit (0.5 s), a 150 ms one does not on top of them. The synthetic times
  // cost no wall time: the plan goes by the reported ones.
  SyntheticBackend backend({{.us = 10}, {.us = 100000}, {.us = 150000}});
  TuneOptions options = Options(5);
  const TuneReport report = TuneDense(backend, kShape, options);
  REQUIRE(report.status.ok());
  CHECK(report.candidates[1].samples == 5);
  CHECK(report.candidates[2].samples == 0);
  CHECK_THAT(report.candidates[2].error, Catch::StartsWith("cut by budget"));
  CHECK(backend.CallsOf(2).size() == 1);  // its warm-up only
}

}  // namespace
}  // namespace gputune::kernels
