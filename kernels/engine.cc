#include "kernels/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/status.h"

namespace gputune::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// However short a kernel claims to be, a sample runs at most this many reps,
// so a bogus (near-zero) time cannot turn into an endless sample.
constexpr int kMaxRepsPerSample = 1 << 20;

// "By at least min_improvement_bps" is inclusive; this relative slack keeps
// a winner exactly on the threshold from losing to floating-point rounding.
constexpr double kThresholdSlack = 1e-12;

// TuneReport::status of a job stopped through TuneHooks::cancel, or by a
// backend that saw the flag (Backend::SetCancel).
Status Cancelled() { return CancelledStatus(); }

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What one sample costs the budget: its wall time, or the device time it
// reported when that is longer (a backend whose timing source is not the
// wall clock, like the tests' synthetic one, still plans by its times).
double SampleLength(double wall, double seconds_per_run, int reps) {
  return std::max(wall, seconds_per_run * reps);
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

std::string ShapeString(const DenseShape& shape) {
  return "m=" + std::to_string(shape.m) + " n=" + std::to_string(shape.n) +
         " k=" + std::to_string(shape.k);
}

Status ValidateShape(const DenseShape& shape) {
  for (const auto& [name, value] :
       {std::pair{"m", shape.m}, {"n", shape.n}, {"k", shape.k}}) {
    if (value < 1) {
      return InvalidArgumentError(std::string("invalid shape: ") + name +
                                  " must be >= 1, got " +
                                  std::to_string(value));
    }
  }
  return OkStatus();
}

// Percent by which `faster` is below `slower`, for reasons and logs.
std::string PercentBelow(double faster, double slower) {
  return FormatNumber(100.0 * (1.0 - faster / slower)) + " %";
}

// One TuneDense call: the procedure of engine.h, step by step.
class TuneJob {
 public:
  TuneJob(Backend& backend, const DenseShape& shape, const TuneOptions& options,
          const TuneHooks& hooks)
      : backend_(backend), shape_(shape), options_(options), hooks_(hooks) {}

  TuneReport Run();

 private:
  // A valid candidate's timing state.
  struct Timed {
    CandidateReport* report;
    // Wall time of the validation run: an upper bound on one run, used only
    // to skip warming a candidate that cannot fit in the budget.
    double validation_wall = 0;
    int reps = 1;            // runs per sample
    double sample_wall = 0;  // wall time of the latest sample
    std::vector<double> samples{};
    bool dropped = false;  // failed while being timed
  };

  bool CancelRequested() const {
    return hooks_.cancel != nullptr &&
           hooks_.cancel->load(std::memory_order_relaxed);
  }
  void Log(AutotuneLog level, int severity, const std::string& line) const;
  void CandidateDone();
  TuneReport Fail(Status status);
  // Fails the job for a failed Candidates or Prepare: cancelled as such,
  // anything else as "preparing the <backend> backend failed: ...".
  TuneReport FailPreparing(const Status& status);

  // Validates the candidate, recording a failure or error against it;
  // returns the wall time of its validation run, an upper bound on one run
  // (it also holds fills, compares and copies), never the estimate samples
  // are sized from. Fails only when the job was cancelled.
  StatusOr<double> Validate(Workload& workload, CandidateReport& candidate);
  StatusOr<double> Sample(Workload& workload, const Execution& exec, int reps);
  int RepsFor(double seconds_per_run, int at_least) const;
  // Warm-up and calibration of one candidate (step 3).
  Status Calibrate(Workload& workload, Timed& t);
  // Steps 4 and 5; an error for Fail (cancelled, or what budget is needed).
  Status TimeAll(Workload& workload, std::vector<Timed>& timed);
  void DropWhileTimed(Timed& t, const std::string& why);
  void Summarize(Timed& t);
  // The chosen candidate (step 6), its reason in *reason; or why none could
  // be chosen.
  StatusOr<CandidateReport*> Select(std::string* reason);
  std::string Reasons() const;
  void LogOutcome(const CandidateReport& chosen, int valid) const;

  Backend& backend_;
  const DenseShape shape_;
  const TuneOptions& options_;
  const TuneHooks& hooks_;
  TuneReport report_;
  int done_ = 0;
};

// Clears the backend's cancel flag however the job ends.
class CancelScope {
 public:
  CancelScope(Backend& backend, const std::atomic<bool>* cancel)
      : backend_(backend) {
    backend_.SetCancel(cancel);
  }
  ~CancelScope() { backend_.SetCancel(nullptr); }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  Backend& backend_;
};

TuneReport TuneJob::Run() {
  if (Status s = ValidateShape(shape_); !s.ok()) return Fail(std::move(s));
  if (Status s = ValidateTuneOptions(options_); !s.ok()) {
    return Fail(InvalidArgumentError("invalid TuneOptions: " + s.message()));
  }
  const CancelScope cancel_scope(backend_, hooks_.cancel);
  StatusOr<std::vector<Execution>> candidates =
      backend_.Candidates(shape_, options_.max_candidates);
  if (!candidates.ok()) return FailPreparing(candidates.status());
  std::vector<Execution>& executions = *candidates;
  if (executions.empty()) {
    return Fail(FailedPreconditionError("the " + backend_.Name() +
                                        " backend offers no candidate"));
  }
  report_.notes = backend_.CandidateNotes();
  for (const std::string& note : report_.notes) {
    Log(AutotuneLog::kMinimal, 2,
        "dense " + ShapeString(shape_) + " on " + backend_.Name() + ": " +
            note);
  }
  if (CancelRequested()) return Fail(Cancelled());
  StatusOr<std::unique_ptr<Workload>> prepared =
      backend_.Prepare(shape_, options_.seed);
  if (!prepared.ok()) return FailPreparing(prepared.status());
  std::unique_ptr<Workload> workload = std::move(*prepared);
  if (workload == nullptr) {
    return FailPreparing(InternalError("no workload"));
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

  std::vector<Timed> timed;
  for (CandidateReport& candidate : report_.candidates) {
    if (CancelRequested()) return Fail(Cancelled());
    StatusOr<double> wall = Validate(*workload, candidate);
    if (!wall.ok()) return Fail(wall.status());
    if (candidate.validation == CandidateValidation::kPassed) {
      timed.push_back({.report = &candidate, .validation_wall = *wall});
    } else {
      CandidateDone();
    }
  }
  const int valid = static_cast<int>(timed.size());
  if (valid == 0) {
    return Fail(FailedPreconditionError(
        "no valid candidate among " +
        std::to_string(report_.candidates.size()) + ": " + Reasons()));
  }

  if (valid > 1) {
    if (Status s = TimeAll(*workload, timed); !s.ok()) {
      return Fail(std::move(s));
    }
    for (Timed& t : timed) {
      if (!t.dropped) Summarize(t);
    }
  }

  std::string reason;
  StatusOr<CandidateReport*> selected = Select(&reason);
  if (!selected.ok()) return Fail(selected.status());
  CandidateReport* chosen = *selected;
  if (valid == 1) CandidateDone();
  chosen->chosen = true;
  report_.status = OkStatus();
  report_.chosen = chosen->execution;
  report_.chosen_seconds = chosen->median_seconds;
  report_.default_seconds = report_.candidates.front().median_seconds;
  report_.reason = std::move(reason);
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

TuneReport TuneJob::Fail(Status status) {
  // A cancellation is the caller's doing, not a problem worth a warning.
  Log(AutotuneLog::kMinimal, IsCancelled(status) ? 1 : 2,
      "dense " + ShapeString(shape_) + " on " + backend_.Name() +
          ": tuning failed: " + status.message());
  report_.status = std::move(status);
  return std::move(report_);
}

TuneReport TuneJob::FailPreparing(const Status& status) {
  if (IsCancelled(status)) return Fail(Cancelled());
  return Fail(
      Status(status.code(), "preparing the " + backend_.Name() +
                                " backend failed: " + status.message()));
}

StatusOr<double> TuneJob::Validate(Workload& workload,
                                   CandidateReport& candidate) {
  const Execution& exec = candidate.execution;
  // The candidate's error: anything but a cancellation, which ends the job.
  const auto failed = [&](const Status& s) {
    candidate.validation = CandidateValidation::kError;
    candidate.error = s.message();
  };
  const Tolerance tol = ToleranceFor(shape_.k, backend_.Bf16Partials(exec));
  const Clock::time_point start = Clock::now();
  const StatusOr<Comparison> compared =
      backend_.RunAndCompare(workload, exec, tol.atol, tol.rtol);
  const double wall = SecondsSince(start);
  if (IsCancelled(compared.status())) return Cancelled();
  if (!compared.ok()) {
    failed(compared.status());
  } else {
    const Comparison& cmp = *compared;
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
    StatusOr<Comparison> exact = Comparison{};
    if (wrong.empty()) {
      exact = backend_.RunAndCompareExact(workload, exec);
      if (IsCancelled(exact.status())) return Cancelled();
      if (exact.ok() && (exact->non_finite > 0 || exact->mismatches > 0)) {
        wrong = std::to_string(exact->mismatches + exact->non_finite) + of +
                " outputs are wrong on the exact check (integer inputs: a "
                "missing or repeated K term; max abs error " +
                FormatNumber(exact->max_abs_error) + ")";
      }
    }
    if (!exact.ok()) {
      failed(exact.status());
    } else if (wrong.empty()) {
      candidate.validation = CandidateValidation::kPassed;
    } else {
      candidate.validation = CandidateValidation::kFailed;
      candidate.error = "wrong results: " + wrong;
    }
  }
  if (candidate.validation == CandidateValidation::kPassed) {
    Log(AutotuneLog::kFull, 1,
        "candidate " + exec.ToString() + ": valid (max abs error " +
            FormatNumber(candidate.max_abs_error) + ", run " +
            FormatSeconds(wall) + ")");
  } else {
    Log(AutotuneLog::kMinimal, 2,
        "dense " + ShapeString(shape_) + ": dropped candidate " +
            exec.ToString() + ": " + candidate.error);
  }
  return wall;
}

StatusOr<double> TuneJob::Sample(Workload& workload, const Execution& exec,
                                 int reps) {
  StatusOr<double> seconds = backend_.TimeSample(workload, exec, reps);
  if (seconds.ok() && (!std::isfinite(*seconds) || *seconds < 0)) {
    return InternalError("the backend reported a time of " +
                         FormatNumber(*seconds) + " s");
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

Status TuneJob::Calibrate(Workload& workload, Timed& t) {
  const Execution& exec = t.report->execution;
  // Reps come from the backend's timing of the kernel alone, after a warm-up
  // run: the validation run's wall time also holds the output poisoning, the
  // comparison, copies and a first launch's lazy loading, and would size a
  // short kernel's samples at one run (whose fixed costs would then be most
  // of the sample). The first timed run is the warm-up; a kernel whose one
  // run lasts min_sample_seconds is sampled one run at a time from there.
  const int warmups = std::max(options_.warmup_runs, 1);
  double per_run = 0;
  for (int i = 0; i < warmups; ++i) {
    if (CancelRequested()) return Cancelled();
    const Clock::time_point start = Clock::now();
    StatusOr<double> sample = Sample(workload, exec, 1);
    if (!sample.ok()) return sample.status();
    per_run = *sample;
    t.sample_wall = SampleLength(SecondsSince(start), per_run, 1);
    if (per_run >= options_.min_sample_seconds) {
      t.reps = 1;
      return OkStatus();
    }
  }
  t.reps = per_run > 0 ? RepsFor(per_run, 1) : 1;
  // Grow reps until one sample lasts min_sample_seconds (discarded: it is
  // warm-up too). Bounded: reps at least double each time.
  for (;;) {
    if (CancelRequested()) return Cancelled();
    const Clock::time_point start = Clock::now();
    StatusOr<double> sample = Sample(workload, exec, t.reps);
    if (!sample.ok()) return sample.status();
    const double seconds = *sample;
    t.sample_wall = SampleLength(SecondsSince(start), seconds, t.reps);
    if (seconds * t.reps >= options_.min_sample_seconds ||
        t.reps >= kMaxRepsPerSample) {
      return OkStatus();
    }
    t.reps = RepsFor(seconds, 2 * t.reps);
  }
}

void TuneJob::DropWhileTimed(Timed& t, const std::string& why) {
  t.dropped = true;
  t.samples.clear();
  t.report->validation = CandidateValidation::kError;
  t.report->error = "timing failed: " + why;
  Log(AutotuneLog::kMinimal, 2,
      "dense " + ShapeString(shape_) + ": dropped candidate " +
          t.report->execution.ToString() + ": " + t.report->error);
}

Status TuneJob::TimeAll(Workload& workload, std::vector<Timed>& timed) {
  const Clock::time_point start = Clock::now();
  const double budget = options_.budget_seconds;
  const int min_samples = options_.min_samples;
  for (Timed& t : timed) {
    // The validation run holds one run of the kernel: when it alone outlasts
    // what is left of the budget, so would a warm-up, and the candidate
    // could not be sampled anyway. It goes to the plan with that length
    // (which cuts it) instead of being warmed. Never the default.
    if (!t.report->is_default &&
        t.validation_wall > budget - SecondsSince(start)) {
      t.sample_wall = t.validation_wall;
      CandidateDone();
      continue;
    }
    if (Status s = Calibrate(workload, t); IsCancelled(s)) {
      return s;
    } else if (!s.ok()) {
      DropWhileTimed(t, s.message());
    }
    CandidateDone();  // its samples come in the rounds
  }
  const auto still_valid = std::count_if(
      timed.begin(), timed.end(), [](const Timed& t) { return !t.dropped; });
  if (still_valid <= 1) return OkStatus();  // Select takes the only one left

  // Plan: the default first (when valid), then the shortest samples first,
  // while min_samples rounds of everyone planned fit in what is left.
  const double left = budget - SecondsSince(start);
  Timed* dflt = timed.front().report->is_default && !timed.front().dropped
                    ? &timed.front()
                    : nullptr;
  std::vector<Timed*> order;
  for (Timed& t : timed) {
    if (!t.dropped && &t != dflt) order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](Timed* a, Timed* b) {
    return a->sample_wall < b->sample_wall;
  });
  if (dflt != nullptr) order.insert(order.begin(), dflt);
  std::vector<Timed*> planned;
  double round_wall = 0;
  for (Timed* t : order) {
    if ((round_wall + t->sample_wall) * min_samples <= left) {
      planned.push_back(t);
      round_wall += t->sample_wall;
    } else {
      t->report->error =
          "cut by budget: a sample takes " + FormatSeconds(t->sample_wall) +
          "; " + std::to_string(min_samples) +
          " of it next to the others do not fit in the " +
          FormatSeconds(std::max(left, 0.0)) + " of budget left for timing";
      Log(AutotuneLog::kFull, 1,
          "candidate " + t->report->execution.ToString() + ": " +
              t->report->error);
    }
  }
  // Nothing to compare: say what budget a comparison needs. The default (or,
  // when it is invalid, the shortest candidate) and the shortest other one,
  // min_samples rounds of both after the calibration already spent, with
  // half as much again for noise and drift.
  const bool default_planned =
      dflt != nullptr && !planned.empty() && planned.front() == dflt;
  const bool comparable = dflt != nullptr
                              ? default_planned && planned.size() >= 2
                              : !planned.empty();
  if (!comparable) {
    const Timed* first = dflt;
    const Timed* second = nullptr;
    for (Timed* t : order) {
      if (t == dflt) continue;
      if (first == nullptr) {
        first = t;
      } else if (second == nullptr) {
        second = t;
      }
    }
    std::string what;
    double needed = SecondsSince(start);
    if (first != nullptr) {
      what = (dflt != nullptr ? "the default " : "") +
             first->report->execution.ToString() + " takes " +
             FormatSeconds(first->sample_wall) + " a sample";
      needed += min_samples * first->sample_wall;
    }
    if (second != nullptr && dflt != nullptr) {
      what += ", the fastest other, " + second->report->execution.ToString() +
              ", " + FormatSeconds(second->sample_wall);
      needed += min_samples * second->sample_wall;
    }
    if (first == nullptr) {
      return FailedPreconditionError("no candidate could be timed: " +
                                     Reasons());
    }
    return FailedPreconditionError(
        "no candidate could be compared with " +
        std::string(dflt != nullptr ? "the default" : "another") +
        " within budget_seconds=" + FormatNumber(budget) + " (" + what +
        "; min_samples=" + std::to_string(min_samples) +
        "): raise the tuning budget (gputuned --tune_budget) to at "
        "least " +
        FormatNumber(std::ceil(needed * 1.5 * 10) / 10) + " s");
  }

  // Interleaved rounds, the order rotating by one each round.
  const size_t count = planned.size();
  for (int round = 0; round < options_.max_samples; ++round) {
    const double elapsed = SecondsSince(start);
    if (round >= min_samples && elapsed + round_wall > budget) break;
    if (round > 0 && elapsed > 2 * budget) break;  // estimates were wrong
    double this_round = 0;
    for (size_t i = 0; i < count; ++i) {
      Timed& t = *planned[(i + static_cast<size_t>(round)) % count];
      if (t.dropped) continue;
      if (CancelRequested()) return Cancelled();
      const Clock::time_point sample_start = Clock::now();
      StatusOr<double> sample = Sample(workload, t.report->execution, t.reps);
      if (IsCancelled(sample.status())) return sample.status();
      if (!sample.ok()) {
        DropWhileTimed(t, sample.status().message());
        continue;
      }
      t.samples.push_back(*sample);
      t.sample_wall =
          SampleLength(SecondsSince(sample_start), t.samples.back(), t.reps);
      this_round += t.sample_wall;
    }
    round_wall = this_round;
  }
  for (Timed* t : planned) {
    if (!t->dropped && t->samples.size() < static_cast<size_t>(min_samples)) {
      t->report->error =
          "cut short by budget: " + std::to_string(t->samples.size()) + " of " +
          std::to_string(min_samples) + " samples";
    }
  }
  return OkStatus();
}

void TuneJob::Summarize(Timed& t) {
  CandidateReport& c = *t.report;
  if (t.samples.empty()) return;
  std::vector<double> sorted = t.samples;
  std::sort(sorted.begin(), sorted.end());
  c.samples = static_cast<uint32_t>(sorted.size());
  c.median_seconds = Quantile(sorted, 0.5);
  c.p20_seconds = Quantile(sorted, 0.2);
  c.p80_seconds = Quantile(sorted, 0.8);
  c.spread_seconds = sorted.back() - sorted.front();
  c.dispersion = c.median_seconds > 0
                     ? (c.p80_seconds - c.p20_seconds) / c.median_seconds
                     : 0;
  Log(AutotuneLog::kFull, 1,
      "candidate " + c.execution.ToString() + ": " + std::to_string(c.samples) +
          " samples x " + std::to_string(t.reps) + " runs, p20/p50/p80 " +
          FormatSeconds(c.p20_seconds) + " / " +
          FormatSeconds(c.median_seconds) + " / " +
          FormatSeconds(c.p80_seconds) + ", spread " +
          FormatSeconds(c.spread_seconds) +
          (c.error.empty() ? "" : " (" + c.error + ")"));
}

StatusOr<CandidateReport*> TuneJob::Select(std::string* reason) {
  CandidateReport& dflt = report_.candidates.front();
  std::vector<CandidateReport*> valid;
  for (CandidateReport& c : report_.candidates) {
    if (c.validation == CandidateValidation::kPassed) valid.push_back(&c);
  }
  if (valid.size() == 1) {  // the others failed validation or timing
    *reason = "the only valid candidate of " +
              std::to_string(report_.candidates.size()) +
              (valid.front()->samples == 0 ? " (not timed)" : "");
    return valid.front();
  }
  const auto enough = [&](const CandidateReport* c) {
    return c->samples >= static_cast<uint32_t>(options_.min_samples);
  };
  CandidateReport* fastest = nullptr;  // the fastest non-default, timed
  for (CandidateReport* c : valid) {
    if (c == &dflt || !enough(c)) continue;
    if (fastest == nullptr || c->median_seconds < fastest->median_seconds) {
      fastest = c;
    }
  }
  if (dflt.validation != CandidateValidation::kPassed) {
    if (fastest == nullptr) {
      return FailedPreconditionError("no candidate could be timed " +
                                     std::to_string(options_.min_samples) +
                                     " times within budget_seconds=" +
                                     FormatNumber(options_.budget_seconds) +
                                     ": " + Reasons());
    }
    *reason = "the default was dropped (" + dflt.error + "); " +
              fastest->execution.ToString() +
              " has the lowest median of the timed candidates";
    return fastest;
  }
  if (!enough(&dflt) || fastest == nullptr) {
    return FailedPreconditionError(
        "the default and another candidate could not both be timed " +
        std::to_string(options_.min_samples) + " times within budget_seconds=" +
        FormatNumber(options_.budget_seconds) +
        ": raise the tuning budget (gputuned --tune_budget); " + Reasons());
  }
  const double threshold = dflt.median_seconds *
                           (1.0 - options_.min_improvement_bps / 10000.0) *
                           (1.0 + kThresholdSlack);
  CandidateReport* best = nullptr;  // beats the threshold and the noise
  for (CandidateReport* c : valid) {
    if (c == &dflt || !enough(c)) continue;
    if (c->median_seconds <= threshold && c->p80_seconds < dflt.p20_seconds &&
        (best == nullptr || c->median_seconds < best->median_seconds)) {
      best = c;
    }
  }
  if (best != nullptr) {
    *reason = best->execution.ToString() + " is " +
              FormatNumber(dflt.median_seconds / best->median_seconds) +
              "x faster than the default by median (" +
              FormatSeconds(best->median_seconds) + " vs " +
              FormatSeconds(dflt.median_seconds) +
              ") and beyond noise (its p80 " +
              FormatSeconds(best->p80_seconds) + " < the default's p20 " +
              FormatSeconds(dflt.p20_seconds) + ")";
    return best;
  }
  const std::string name = fastest->execution.ToString();
  if (fastest->median_seconds <= threshold) {
    *reason = "default kept: " + name + " is " +
              PercentBelow(fastest->median_seconds, dflt.median_seconds) +
              " faster by median but within noise (its p80 " +
              FormatSeconds(fastest->p80_seconds) +
              " is not below the default's p20 " +
              FormatSeconds(dflt.p20_seconds) + ")";
  } else if (fastest->median_seconds < dflt.median_seconds) {
    *reason = "default kept: the fastest other, " + name + ", is only " +
              PercentBelow(fastest->median_seconds, dflt.median_seconds) +
              " faster by median (below min_improvement_bps=" +
              std::to_string(options_.min_improvement_bps) + ")";
  } else {
    *reason = "default kept: it has the lowest median of the timed candidates";
  }
  return &dflt;
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
  if (valid == 1 || chosen.samples == 0) {
    line += ", the only valid candidate of " +
            std::to_string(report_.candidates.size()) + " (not timed)";
  } else {
    line += " at " + FormatSeconds(chosen.median_seconds);
    if (&chosen != &dflt && dflt.samples > 0) {
      line += ", " + FormatNumber(dflt.median_seconds / chosen.median_seconds) +
              "x the default's " + FormatSeconds(dflt.median_seconds);
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
    line += "; fastest:";
    for (size_t i = 0; i < timed.size() && i < 3; ++i) {
      line += (i == 0 ? " " : ", ") + timed[i]->execution.ToString() + " " +
              FormatSeconds(timed[i]->median_seconds);
    }
  }
  Log(AutotuneLog::kMinimal, 1, line + "; " + report_.reason);
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

StatusOr<AutotuneLog> ParseAutotuneLog(std::string_view name) {
  for (AutotuneLog log :
       {AutotuneLog::kDisabled, AutotuneLog::kMinimal, AutotuneLog::kFull}) {
    if (name == AutotuneLogName(log)) return log;
  }
  return InvalidArgumentError("unknown autotune log level \"" +
                              std::string(name) +
                              "\": must be disabled, minimal or full");
}

Status ValidateTuneOptions(const TuneOptions& o) {
  auto bad = [](const char* field, const std::string& value,
                const std::string& rule) {
    return InvalidArgumentError(std::string(field) + " (" + value + ") " +
                                rule);
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
  return OkStatus();
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
//
// A kernel that reduces s partial sums in bf16 (in place in the output, or
// in an output-type workspace) rounds a running sum of up to ~sqrt(k)*sigma_t
// s times: each error is uniform within half an ulp, standard deviation
// eps * |sum| / sqrt(12), and with |sum| growing like sqrt(j/s) over the
// steps the total is eps * sqrt(k) * sigma_t * sqrt((s + 1) / 24). atol is
// at least 6 of those standard deviations (1e-9 per output to trip by
// chance), so a correct split-K of any depth passes; a missing or repeated
// K term, which this tolerance can no longer see at large K, is the exact
// check's to catch (bf16.h).
Tolerance ToleranceFor(int64_t k, int bf16_partials) {
  constexpr double kTermSigma = 1.0 / 3.0;
  const double kk = static_cast<double>(std::max<int64_t>(k, 1));
  const double s = static_cast<double>(std::max(bf16_partials, 1));
  const double walk = std::sqrt(kk) * kBf16Epsilon * kTermSigma;
  const double partials = bf16_partials > 1 ? 6.0 * std::sqrt((s + 1) / 24) : 0;
  return Tolerance{.atol = std::max(4.0, partials) * walk,
                   .rtol = kBf16Epsilon};
}

double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double h = std::clamp(q, 0.0, 1.0) * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

TuneReport TuneDense(Backend& backend, const DenseShape& shape,
                     const TuneOptions& options, const TuneHooks& hooks) {
  try {
    return TuneJob(backend, shape, options, hooks).Run();
  } catch (...) {
    // Only allocation failures or a throwing hook can get here.
    TuneReport report;
    report.status =
        InternalError("tuning failed: " + CurrentExceptionMessage());
    return report;
  }
}

}  // namespace gputune::kernels
