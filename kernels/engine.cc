#include "kernels/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"

namespace gputune::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// However short a kernel claims to be, a sample runs at most this many reps,
// so a bogus (near-zero) time cannot turn into an endless sample.
constexpr int kMaxRepsPerSample = 1 << 20;

// "By at least min_improvement_bps" is inclusive; this relative slack keeps
// a winner exactly on the threshold from losing to floating-point rounding.
constexpr double kThresholdSlack = 1e-12;

// TuneReport::error of a job stopped through TuneHooks::cancel.
constexpr char kCancelled[] = "cancelled";

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "12.3 us", "4.56 ms", "1.2 s": three significant digits are all that timing
// noise leaves meaningful.
std::string FormatSeconds(double seconds) {
  char buf[32];
  if (seconds < 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.3g us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof(buf), "%.3g ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g s", seconds);
  }
  return buf;
}

std::string FormatNumber(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", value);
  return buf;
}

// The message of the exception being handled; call only inside a catch.
std::string CurrentExceptionMessage() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception (not derived from std::exception)";
  }
}

std::string ShapeString(const DenseShape& shape) {
  return "m=" + std::to_string(shape.m) + " n=" + std::to_string(shape.n) +
         " k=" + std::to_string(shape.k);
}

std::string ShapeError(const DenseShape& shape) {
  for (const auto& [name, value] :
       {std::pair{"m", shape.m}, {"n", shape.n}, {"k", shape.k}}) {
    if (value < 1) {
      return std::string("invalid shape: ") + name + " must be >= 1, got " +
             std::to_string(value);
    }
  }
  return "";
}

struct SampleStats {
  double median = 0;
  double spread = 0;
};

SampleStats Summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  const double median =
      n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  return {median, samples.back() - samples.front()};
}

// One TuneDense call: the procedure of engine.h, step by step.
class TuneJob {
 public:
  TuneJob(Backend& backend, const DenseShape& shape, const TuneOptions& options,
          const TuneHooks& hooks)
      : backend_(backend), shape_(shape), options_(options), hooks_(hooks) {}

  TuneReport Run();

 private:
  enum class Step { kContinue, kCancelled };

  bool Cancelled() const {
    return hooks_.cancel != nullptr &&
           hooks_.cancel->load(std::memory_order_relaxed);
  }
  void Log(AutotuneLog level, int severity, const std::string& line) const;
  void CandidateDone();
  TuneReport Fail(std::string error);

  void Validate(Workload& workload, CandidateReport& candidate);
  Step Time(Workload& workload, CandidateReport& candidate, double share);
  double Sample(Workload& workload, const Execution& exec, int reps);
  int RepsFor(double seconds_per_run, int at_least) const;
  // The chosen candidate, or nullptr when none was timed and the default is
  // not valid.
  CandidateReport* Select();
  bool BeatsDefault(double winner, double default_seconds) const;
  std::string Reasons() const;
  void LogOutcome(const CandidateReport& chosen, int valid) const;

  Backend& backend_;
  const DenseShape shape_;
  const TuneOptions& options_;
  const TuneHooks& hooks_;
  TuneReport report_;
  int done_ = 0;
};

TuneReport TuneJob::Run() {
  if (std::string error = ShapeError(shape_); !error.empty()) {
    return Fail(std::move(error));
  }
  if (std::string error = TuneOptionsError(options_); !error.empty()) {
    return Fail("invalid TuneOptions: " + error);
  }
  std::vector<Execution> executions;
  std::unique_ptr<Workload> workload;
  try {
    executions = backend_.Candidates(shape_, options_.max_candidates);
    if (executions.empty()) {
      return Fail("the " + backend_.Name() + " backend offers no candidate");
    }
    workload = backend_.Prepare(shape_, options_.seed);
    if (workload == nullptr) throw std::runtime_error("no workload");
  } catch (...) {
    return Fail("preparing the " + backend_.Name() +
                " backend failed: " + CurrentExceptionMessage());
  }
  if (executions.size() > static_cast<size_t>(options_.max_candidates)) {
    executions.resize(static_cast<size_t>(options_.max_candidates));
  }
  for (Execution& exec : executions) {
    CandidateReport candidate;
    candidate.execution = std::move(exec);
    candidate.is_default = report_.candidates.empty();
    report_.candidates.push_back(std::move(candidate));
  }

  int valid = 0;
  for (CandidateReport& candidate : report_.candidates) {
    if (Cancelled()) return Fail(kCancelled);
    Validate(*workload, candidate);
    if (candidate.validation == CandidateValidation::kPassed) {
      ++valid;
    } else {
      CandidateDone();
    }
  }
  if (valid == 0) {
    return Fail("no valid candidate among " +
                std::to_string(report_.candidates.size()) + ": " + Reasons());
  }

  if (valid > 1) {
    const Clock::time_point start = Clock::now();
    int left = valid;
    for (CandidateReport& candidate : report_.candidates) {
      if (candidate.validation != CandidateValidation::kPassed) continue;
      // An equal part of what is left, but never less than an equal part of
      // the whole: a candidate that overran its share cannot starve the rest.
      const double share =
          std::max(options_.budget_seconds - SecondsSince(start),
                   options_.budget_seconds * left / valid) /
          left;
      --left;
      if (Time(*workload, candidate, share) == Step::kCancelled) {
        return Fail(kCancelled);
      }
      CandidateDone();
    }
  }

  CandidateReport* chosen = Select();
  if (chosen == nullptr) {
    return Fail("no candidate could be timed within budget_seconds=" +
                FormatNumber(options_.budget_seconds) + ": " + Reasons());
  }
  if (valid == 1) CandidateDone();
  chosen->chosen = true;
  report_.ok = true;
  report_.chosen = chosen->execution;
  report_.chosen_seconds = chosen->median_seconds;
  report_.default_seconds = report_.candidates.front().median_seconds;
  LogOutcome(*chosen, valid);
  return std::move(report_);
}

void TuneJob::Log(AutotuneLog level, int severity,
                  const std::string& line) const {
  if (hooks_.log && options_.log != AutotuneLog::kDisabled &&
      options_.log >= level) {
    hooks_.log(severity, line);
  }
}

void TuneJob::CandidateDone() {
  ++done_;
  if (hooks_.progress) {
    hooks_.progress(done_, static_cast<int>(report_.candidates.size()));
  }
}

TuneReport TuneJob::Fail(std::string error) {
  // A cancellation is the caller's doing, not a problem worth a warning.
  Log(AutotuneLog::kMinimal, error == kCancelled ? 1 : 2,
      "dense " + ShapeString(shape_) + " on " + backend_.Name() +
          ": tuning failed: " + error);
  report_.ok = false;
  report_.error = std::move(error);
  return std::move(report_);
}

void TuneJob::Validate(Workload& workload, CandidateReport& candidate) {
  const Tolerance tol = ToleranceFor(shape_.k);
  try {
    const Comparison cmp = backend_.RunAndCompare(workload, candidate.execution,
                                                  tol.atol, tol.rtol);
    candidate.max_abs_error = cmp.max_abs_error;
    const std::string of = " of " + std::to_string(shape_.m * shape_.n);
    std::string wrong;
    if (cmp.non_finite > 0) {
      wrong = std::to_string(cmp.non_finite) + of + " outputs are NaN or Inf";
    }
    if (cmp.mismatches > 0) {
      if (!wrong.empty()) wrong += "; ";
      wrong += std::to_string(cmp.mismatches) + of +
               " outputs differ from the reference by more than atol " +
               FormatNumber(tol.atol) + " + rtol " + FormatNumber(tol.rtol) +
               "*|ref| (max abs error " + FormatNumber(cmp.max_abs_error) + ")";
    }
    if (wrong.empty()) {
      candidate.validation = CandidateValidation::kPassed;
    } else {
      candidate.validation = CandidateValidation::kFailed;
      candidate.error = "wrong results: " + wrong;
    }
  } catch (...) {
    candidate.validation = CandidateValidation::kError;
    candidate.error = CurrentExceptionMessage();
  }
  if (candidate.validation == CandidateValidation::kPassed) {
    Log(AutotuneLog::kFull, 1,
        "candidate " + candidate.execution.ToString() +
            ": valid (max abs error " + FormatNumber(candidate.max_abs_error) +
            ")");
  } else {
    Log(AutotuneLog::kMinimal, 2,
        "dense " + ShapeString(shape_) + ": dropped candidate " +
            candidate.execution.ToString() + ": " + candidate.error);
  }
}

double TuneJob::Sample(Workload& workload, const Execution& exec, int reps) {
  const double seconds = backend_.TimeSample(workload, exec, reps);
  if (!std::isfinite(seconds) || seconds < 0) {
    throw std::runtime_error("the backend reported a time of " +
                             FormatNumber(seconds) + " s");
  }
  return seconds;
}

int TuneJob::RepsFor(double seconds_per_run, int at_least) const {
  // Aim 25 % over min_sample_seconds so that jitter rarely leaves a sample
  // short (which would cost another calibration round).
  const double wanted =
      1.25 * options_.min_sample_seconds / std::max(seconds_per_run, 1e-9);
  const double reps =
      std::clamp(std::ceil(wanted), static_cast<double>(at_least),
                 static_cast<double>(kMaxRepsPerSample));
  return static_cast<int>(reps);
}

TuneJob::Step TuneJob::Time(Workload& workload, CandidateReport& candidate,
                            double share) {
  const Execution& exec = candidate.execution;
  const Clock::time_point start = Clock::now();
  auto cut_by_budget = [&](const char* what) {
    candidate.error = std::string("cut by budget: ") + what + " took " +
                      FormatSeconds(SecondsSince(start)) + " of a " +
                      FormatSeconds(share) + " share";
    Log(AutotuneLog::kFull, 1,
        "candidate " + exec.ToString() + ": " + candidate.error);
    return Step::kContinue;
  };

  std::vector<double> samples;
  int reps = 1;
  try {
    double per_run = 0;
    for (int i = 0; i < options_.warmup_runs; ++i) {
      if (Cancelled()) return Step::kCancelled;
      per_run = Sample(workload, exec, 1);
      if (SecondsSince(start) > share) return cut_by_budget("warm-up");
    }
    if (per_run > 0) reps = RepsFor(per_run, 1);
    // Calibration: grow reps until one sample lasts min_sample_seconds; that
    // sample is the first one kept.
    double last_wall = 0;
    for (;;) {
      if (Cancelled()) return Step::kCancelled;
      const Clock::time_point sample_start = Clock::now();
      const double seconds = Sample(workload, exec, reps);
      last_wall = SecondsSince(sample_start);
      if (SecondsSince(start) > share) return cut_by_budget("the first sample");
      if (seconds * reps >= options_.min_sample_seconds ||
          reps >= kMaxRepsPerSample) {
        samples.push_back(seconds);
        break;
      }
      reps = RepsFor(seconds, 2 * reps);
    }
    // More samples while the next one, as long as the last, fits the share.
    while (samples.size() < static_cast<size_t>(options_.max_samples) &&
           SecondsSince(start) + last_wall <= share) {
      if (Cancelled()) return Step::kCancelled;
      const Clock::time_point sample_start = Clock::now();
      samples.push_back(Sample(workload, exec, reps));
      last_wall = SecondsSince(sample_start);
    }
  } catch (...) {
    candidate.validation = CandidateValidation::kError;
    candidate.error = "timing failed: " + CurrentExceptionMessage();
    Log(AutotuneLog::kMinimal, 2,
        "dense " + ShapeString(shape_) + ": dropped candidate " +
            exec.ToString() + ": " + candidate.error);
    return Step::kContinue;
  }

  const SampleStats stats = Summarize(samples);
  candidate.median_seconds = stats.median;
  candidate.spread_seconds = stats.spread;
  candidate.samples = static_cast<uint32_t>(samples.size());
  if (samples.size() < static_cast<size_t>(options_.min_samples)) {
    candidate.error = "cut short by budget: " + std::to_string(samples.size()) +
                      " of " + std::to_string(options_.min_samples) +
                      " samples";
  }
  Log(AutotuneLog::kFull, 1,
      "candidate " + exec.ToString() + ": " + std::to_string(samples.size()) +
          " samples x " + std::to_string(reps) + " runs, median " +
          FormatSeconds(stats.median) + ", spread " +
          FormatSeconds(stats.spread) +
          (candidate.error.empty() ? "" : " (" + candidate.error + ")"));
  return Step::kContinue;
}

bool TuneJob::BeatsDefault(double winner, double default_seconds) const {
  const double needed =
      default_seconds * (1.0 - options_.min_improvement_bps / 10000.0);
  return winner <= needed * (1.0 + kThresholdSlack);
}

CandidateReport* TuneJob::Select() {
  CandidateReport& dflt = report_.candidates.front();
  CandidateReport* fastest = nullptr;
  int valid = 0;
  for (CandidateReport& c : report_.candidates) {
    if (c.validation != CandidateValidation::kPassed) continue;
    ++valid;
    if (c.samples > 0 &&
        (fastest == nullptr || c.median_seconds < fastest->median_seconds)) {
      fastest = &c;
    }
  }
  const bool default_valid = dflt.validation == CandidateValidation::kPassed;
  if (valid == 1) {
    // Chosen without timing: the first (only) valid candidate.
    for (CandidateReport& c : report_.candidates) {
      if (c.validation == CandidateValidation::kPassed) return &c;
    }
  }
  if (fastest == nullptr) return default_valid ? &dflt : nullptr;
  if (dflt.samples > 0 &&
      !BeatsDefault(fastest->median_seconds, dflt.median_seconds)) {
    return &dflt;
  }
  return fastest;
}

std::string TuneJob::Reasons() const {
  std::string out;
  for (const CandidateReport& c : report_.candidates) {
    if (c.error.empty()) continue;
    if (!out.empty()) out += "; ";
    out += c.execution.ToString() + ": " + c.error;
  }
  return out;
}

void TuneJob::LogOutcome(const CandidateReport& chosen, int valid) const {
  const CandidateReport& dflt = report_.candidates.front();
  std::string line = "dense " + ShapeString(shape_) + " on " + backend_.Name() +
                     ": chose " + chosen.execution.ToString();
  if (valid == 1) {
    line += ", the only valid candidate of " +
            std::to_string(report_.candidates.size()) + " (not timed)";
  } else if (chosen.samples == 0) {
    line += ", the default: no candidate could be timed within the budget";
  } else {
    line += " at " + FormatSeconds(chosen.median_seconds);
    if (&chosen != &dflt && dflt.samples > 0) {
      line += ", " + FormatNumber(dflt.median_seconds / chosen.median_seconds) +
              "x the default's " + FormatSeconds(dflt.median_seconds);
    } else if (&chosen != &dflt) {
      line += " (the default was not timed: " + dflt.error + ")";
    }
    std::vector<const CandidateReport*> timed;
    for (const CandidateReport& c : report_.candidates) {
      if (c.validation == CandidateValidation::kPassed && c.samples > 0) {
        timed.push_back(&c);
      }
    }
    std::stable_sort(timed.begin(), timed.end(), [](auto* a, auto* b) {
      return a->median_seconds < b->median_seconds;
    });
    if (&chosen == &dflt && timed.front() != &dflt) {
      line += " (default kept: " + timed.front()->execution.ToString() +
              " is faster by less than min_improvement_bps=" +
              std::to_string(options_.min_improvement_bps) + ")";
    }
    line += "; fastest:";
    for (size_t i = 0; i < timed.size() && i < 3; ++i) {
      line += (i == 0 ? " " : ", ") + timed[i]->execution.ToString() + " " +
              FormatSeconds(timed[i]->median_seconds);
    }
  }
  Log(AutotuneLog::kMinimal, 1, line);
}

}  // namespace

std::string_view AutotuneLogName(AutotuneLog log) {
  switch (log) {
    case AutotuneLog::kDisabled:
      return "disabled";
    case AutotuneLog::kMinimal:
      return "minimal";
    case AutotuneLog::kFull:
      return "full";
  }
  return "unknown";
}

AutotuneLog ParseAutotuneLog(std::string_view name, bool* ok) {
  for (AutotuneLog log :
       {AutotuneLog::kDisabled, AutotuneLog::kMinimal, AutotuneLog::kFull}) {
    if (name == AutotuneLogName(log)) {
      if (ok != nullptr) *ok = true;
      return log;
    }
  }
  if (ok != nullptr) *ok = false;
  return AutotuneLog::kMinimal;
}

std::string TuneOptionsError(const TuneOptions& o) {
  auto bad = [](const char* field, const std::string& value,
                const std::string& rule) {
    return std::string(field) + " (" + value + ") " + rule;
  };
  if (o.max_candidates < 1) {
    return bad("max_candidates", std::to_string(o.max_candidates),
               "must be at least 1");
  }
  if (!(o.budget_seconds > 0) || !std::isfinite(o.budget_seconds)) {
    return bad("budget_seconds", FormatNumber(o.budget_seconds),
               "must be a positive number of seconds");
  }
  if (o.min_improvement_bps < 0 || o.min_improvement_bps >= 10000) {
    return bad("min_improvement_bps", std::to_string(o.min_improvement_bps),
               "must be in [0, 10000)");
  }
  if (o.warmup_runs < 0) {
    return bad("warmup_runs", std::to_string(o.warmup_runs),
               "must not be negative");
  }
  if (o.min_samples < 1) {
    return bad("min_samples", std::to_string(o.min_samples),
               "must be at least 1");
  }
  if (o.max_samples < o.min_samples) {
    return bad("max_samples", std::to_string(o.max_samples),
               "is below min_samples (" + std::to_string(o.min_samples) + ")");
  }
  if (!(o.min_sample_seconds > 0) || !std::isfinite(o.min_sample_seconds)) {
    return bad("min_sample_seconds", FormatNumber(o.min_sample_seconds),
               "must be a positive number of seconds");
  }
  return "";
}

// Derivation. Inputs are uniform in [-1, 1] (FillUniformBf16), so a term
// x*w has standard deviation sigma_t = 1/3 and y = sum of k terms has
// standard deviation sqrt(k)/3. A correct candidate differs from the exact
// sum (the reference is exact to ~1e-16 relative) by:
//  (1) the final rounding of y to bf16: at most half an ulp, eps/2 * |y|,
//      with eps = 2^-7 (bf16 keeps 8 significant bits);
//  (2) accumulation rounding. In fp32, k roundings of partial sums up to
//      ~sqrt(k)*sigma_t each: a random walk of about k * 2^-24 * sigma_t,
//      negligible next to (1). But a kernel that reduces split-K partial
//      sums in bf16 (cuBLASLt may, with an output-type reduction scheme)
//      rounds each partial sum to bf16; over s partials that walk is about
//      eps/2 * sqrt(s) * sqrt(k) * sigma_t / sqrt(3).
// rtol = eps (twice the bound of (1)) covers the output rounding with a 2x
// margin. atol = 4 * sqrt(k) * eps * sigma_t covers (2) for s up to ~16 at
// more than 3 standard deviations, so a correct kernel practically never
// trips it; a real bug is far larger: a dropped or duplicated term is off by
// up to 1 per output, a wrong row or column by ~sqrt(k)*sigma_t (atol is
// 4*eps = 3 % of that).
Tolerance ToleranceFor(int64_t k) {
  constexpr double kTermSigma = 1.0 / 3.0;
  const double kk = static_cast<double>(std::max<int64_t>(k, 1));
  return Tolerance{.atol = 4.0 * std::sqrt(kk) * kBf16Epsilon * kTermSigma,
                   .rtol = kBf16Epsilon};
}

TuneReport TuneDense(Backend& backend, const DenseShape& shape,
                     const TuneOptions& options, const TuneHooks& hooks) {
  try {
    return TuneJob(backend, shape, options, hooks).Run();
  } catch (...) {
    // Only allocation failures or a throwing hook can get here.
    TuneReport report;
    report.error = "tuning failed: " + CurrentExceptionMessage();
    return report;
  }
}

}  // namespace gputune::kernels
