// The benchmark engine: the per-key procedure of docs/design.md ("How a key
// is benchmarked") over any Backend.
//
//   kernels::TuneOptions opts;                 // budget, min improvement, ...
//   kernels::TuneReport r = kernels::TuneDense(backend, shape, opts, hooks);
//   if (!r.status.ok()) { /* r.status.message() says why; abandon the key */ }
//   use(r.chosen);                             // r.candidates explains why
//
// Procedure (docs/architecture.md, "TuneDense", states the same rules):
//  1. Enumerate candidates (first = the stable default) and prepare inputs
//     with a fixed seed.
//  2. Validate each: against the fp32 reference on uniform inputs with a
//     tolerance that scales with K (and with the partial sums a candidate
//     rounds to bf16), then exactly on the integer inputs of the exact check
//     (bf16.h), which catch a missing or repeated K term. Failures and
//     errors are dropped with the reason.
//  3. Warm up and size samples from the backend's timing of the kernel
//     alone (TimeSample of one run), never from the validation's wall time,
//     which holds fills, compares and copies: a candidate whose first timed
//     run lasts min_sample_seconds is sampled one run at a time; a shorter
//     one takes warmup_runs runs (at least one) and calibration samples
//     (discarded) until reps runs last min_sample_seconds of kernel time.
//  4. Plan: the default (when valid), then the others from the shortest
//     sample up (a sample's cost: its wall time, or its reported time when
//     longer), as long as min_samples samples of everyone planned fit in
//     what is left of budget_seconds. The rest are "cut by budget".
//  5. Interleaved rounds: every planned candidate takes one sample per
//     round, the order rotating by one each round, so clock or thermal drift
//     falls on all of them alike. Rounds go on to max_samples while the next
//     round fits in the budget; a round never starts past twice the budget.
//  6. Score each by its p20 / p50 (median) / p80 and dispersion, and select
//     (the rule below).
//
// Selection. A non-default candidate is chosen only when it beats the
// default by min_improvement_bps on the median AND beyond the measured noise:
// its p80 is below the default's p20 (at least 80 % of its samples are
// faster than 80 % of the default's). Of those, the lowest median wins;
// otherwise the default is kept and the reason says why ("within noise",
// "below min_improvement_bps", "the fastest"). When the default failed
// validation the fastest timed candidate (lowest median) wins outright. A
// single valid candidate is chosen without timing.
//
// Never an unmeasured choice: when more than one candidate is valid but the
// default (when valid) or, with an invalid default, every candidate could not
// be timed min_samples times within the budget, or no second candidate could
// be compared with it, the report fails (nothing is recorded) with a reason
// that says what to change: the budget a comparison needs.
#ifndef GPUTUNE_KERNELS_ENGINE_H_
#define GPUTUNE_KERNELS_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// How much the engine logs about each tuning job.
enum class AutotuneLog {
  kDisabled,  // nothing
  kMinimal,   // the winner and the top-3 times
  kFull,      // every candidate: validation, samples, median, spread
};

// "disabled", "minimal", "full": the names configuration files and flags use.
std::string_view AutotuneLogName(AutotuneLog log);
// The inverse of AutotuneLogName; kInvalidArgument for an unknown name.
StatusOr<AutotuneLog> ParseAutotuneLog(std::string_view name);

struct TuneOptions {
  int max_candidates = 16;        // passed to Backend::Candidates
  double budget_seconds = 2.0;    // total timing budget for the key
  int min_improvement_bps = 200;  // winner must beat the default by 2 %
  int warmup_runs = 2;            // untimed runs per candidate
  int min_samples = 5;            // per candidate, when the budget allows
  int max_samples = 100;          // per candidate
  // Kernel time a sample lasts at least (reps per sample grow to reach it):
  // 100 us, so that per-sample fixed costs (a launch gap, the event pair,
  // ~1-5 us) stay a few percent of a decode kernel of 8-60 us.
  double min_sample_seconds = 100e-6;
  uint64_t seed = 0x5eed;  // input generator seed
  AutotuneLog log = AutotuneLog::kMinimal;
};

// OK when the options are usable, else kInvalidArgument saying what is wrong
// with which field (e.g. "max_samples (3) is below min_samples (5)").
// TuneDense fails with this message; the daemon can check its configuration
// with it at startup.
Status ValidateTuneOptions(const TuneOptions& options);

enum class CandidateValidation { kNotRun, kPassed, kFailed, kError };

struct CandidateReport {
  Execution execution;
  CandidateValidation validation = CandidateValidation::kNotRun;
  double max_abs_error = 0;
  std::string error;          // why it was dropped or cut short
  double median_seconds = 0;  // p50; 0 when not timed
  double spread_seconds = 0;  // max - min of the samples
  double p20_seconds = 0;     // 20th percentile (linear interpolation)
  double p80_seconds = 0;     // 80th percentile
  double dispersion = 0;      // (p80 - p20) / p50: the noise, relative
  uint32_t samples = 0;
  bool is_default = false;
  bool chosen = false;
};

struct TuneReport {
  // OK when a candidate was chosen; otherwise why none could be: code
  // kCancelled (message "cancelled") for a cancelled job, kInvalidArgument
  // for a bad shape or options, kFailedPrecondition when no candidate is
  // valid or the budget allowed no measured choice, the backend's own code
  // when Candidates or Prepare failed.
  Status status = UnknownError("not tuned");
  Execution chosen;
  std::vector<CandidateReport> candidates;  // in enumeration order
  double default_seconds = 0;               // 0 when the default was not timed
  double chosen_seconds = 0;                // 0 when not timed
  // Why the chosen candidate was chosen, one line (e.g. "default kept: X is
  // 1.5 % faster by median but within noise (...)"); empty unless
  // status.ok().
  std::string reason;
  // The backend's CandidateNotes(): what it left out or changed, and why.
  std::vector<std::string> notes;
};

// Callbacks into the caller; all optional. Called on the calling thread.
struct TuneHooks {
  // After each candidate is finished with alone (dropped by validation,
  // warmed up and calibrated for timing, or chosen as the only valid one):
  // (done, total), done rising by one a call. The interleaved rounds that
  // follow the last call take at most the rest of the budget.
  std::function<void(int, int)> progress;
  // Log lines at the level TuneOptions::log asks for. severity: 0 debug,
  // 1 info, 2 warning. Candidates that fail validation are logged as warnings
  // at every level but kDisabled: an operator wants to know about a kernel
  // that computes wrong results.
  std::function<void(int, const std::string&)> log;
  // When set and true, the engine stops at the next sample (or validation)
  // and fails with CancelledStatus(); report.candidates keeps what was done.
  // Also handed to the backend (Backend::SetCancel) so that one long run or
  // the reference stops too: a job ends within a bounded time of the flag.
  const std::atomic<bool>* cancel = nullptr;
};

// Validation tolerance for a reduction of length k in bf16: absolute part grows
// with sqrt(k) (random-walk rounding) and with the number of partial sums the
// kernel rounds to bf16 (Backend::Bf16Partials), relative part is bf16's
// epsilon. Derived for inputs from FillUniformBf16 (bf16.h), |x|, |w| <= 1;
// the derivation is in engine.cc. k >= 1, bf16_partials >= 1.
struct Tolerance {
  double atol;
  double rtol;
};
Tolerance ToleranceFor(int64_t k, int bf16_partials = 1);

// Quantile q in [0, 1] of sorted, non-empty samples, interpolating linearly
// between order statistics (R's type 7): q = 0.5 is the median.
double Quantile(const std::vector<double>& sorted, double q);

// Runs the procedure above. Never throws: a backend's failed status becomes a
// candidate's error, or the report's status when Candidates or Prepare fails;
// an invalid shape or options fail the report with a message naming the field.
TuneReport TuneDense(Backend& backend, const DenseShape& shape,
                     const TuneOptions& options, const TuneHooks& hooks = {});

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_ENGINE_H_
