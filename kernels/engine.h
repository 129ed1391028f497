// The benchmark engine: DESIGN.md's per-key procedure over any Backend.
//
//   kernels::TuneOptions opts;                 // budget, min improvement, ...
//   kernels::TuneReport r = kernels::TuneDense(backend, shape, opts, hooks);
//   if (!r.ok) { /* r.error says why; abandon the key */ }
//   use(r.chosen);                             // r.candidates explains why
//
// Procedure: enumerate candidates (first = default), prepare inputs with a
// fixed seed, validate each against the fp32 reference with a tolerance that
// scales with K (drop failures and exceptions, with the reason), warm up, take
// timed samples sized to the kernel's length within the per-key budget, score
// by median, and choose the fastest only if it beats the default by at least
// min_improvement_bps. A single valid candidate is chosen without timing.
//
// Budget: budget_seconds bounds the timing phase (warm-up and samples), not
// validation. Each valid candidate gets an equal share of what is left when
// its turn comes (so time a fast candidate leaves goes to the next), and never
// less than budget_seconds / valid candidates (so one that overran, by at most
// one run or sample, cannot starve the rest). A candidate whose warm-up or
// first sample alone overruns its share is cut ("cut by budget", never
// chosen); one that runs out of share before min_samples is scored on what it
// has, noted "cut short by budget". When the default is invalid or cut, the
// fastest timed candidate wins outright; when no candidate could be timed, a
// valid default is kept.
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

namespace gputune::kernels {

// How much the engine logs about each tuning job.
enum class AutotuneLog {
  kDisabled,  // nothing
  kMinimal,   // the winner and the top-3 times
  kFull,      // every candidate: validation, samples, median, spread
};

// "disabled", "minimal", "full": the names configuration files and flags use.
std::string_view AutotuneLogName(AutotuneLog log);
// The inverse of AutotuneLogName. On an unknown name sets *ok to false (when
// ok is not null) and returns kMinimal; otherwise sets *ok to true.
AutotuneLog ParseAutotuneLog(std::string_view name, bool* ok);

struct TuneOptions {
  int max_candidates = 16;            // passed to Backend::Candidates
  double budget_seconds = 2.0;        // total timing budget for the key
  int min_improvement_bps = 200;      // winner must beat the default by 2 %
  int warmup_runs = 2;                // untimed runs per candidate
  int min_samples = 5;                // per candidate, when the budget allows
  int max_samples = 100;              // per candidate
  double min_sample_seconds = 50e-6;  // reps per sample grow to reach this
  uint64_t seed = 0x5eed;             // input generator seed
  AutotuneLog log = AutotuneLog::kMinimal;
};

// Empty when the options are usable, else what is wrong with which field
// (e.g. "max_samples (3) is below min_samples (5)"). TuneDense fails with this
// message; the daemon can check its configuration with it at startup.
std::string TuneOptionsError(const TuneOptions& options);

enum class CandidateValidation { kNotRun, kPassed, kFailed, kError };

struct CandidateReport {
  Execution execution;
  CandidateValidation validation = CandidateValidation::kNotRun;
  double max_abs_error = 0;
  std::string error;          // why it was dropped or cut short
  double median_seconds = 0;  // 0 when not timed
  double spread_seconds = 0;  // max - min of the samples
  uint32_t samples = 0;
  bool is_default = false;
  bool chosen = false;
};

struct TuneReport {
  bool ok = false;
  std::string error;  // when !ok: why no candidate could be chosen
  Execution chosen;
  std::vector<CandidateReport> candidates;  // in enumeration order
  double default_seconds = 0;               // 0 when the default was not timed
  double chosen_seconds = 0;                // 0 when not timed
};

// Callbacks into the caller; all optional. Called on the calling thread.
struct TuneHooks {
  // After each candidate is finished (dropped by validation, timed, or
  // chosen as the only valid one): (done, total), done rising by one a call.
  std::function<void(int, int)> progress;
  // Log lines at the level TuneOptions::log asks for. severity: 0 debug,
  // 1 info, 2 warning. Candidates that fail validation are logged as warnings
  // at every level but kDisabled: an operator wants to know about a kernel
  // that computes wrong results.
  std::function<void(int, const std::string&)> log;
  // When set and true, the engine stops at the next sample (or validation)
  // and fails with error "cancelled"; report.candidates keeps what was done.
  const std::atomic<bool>* cancel = nullptr;
};

// Validation tolerance for a reduction of length k in bf16: absolute part grows
// with sqrt(k) (random-walk rounding), relative part is bf16's epsilon.
// Derived for inputs from FillUniformBf16 (bf16.h), |x|, |w| <= 1; the
// derivation is in engine.cc. k >= 1.
struct Tolerance {
  double atol;
  double rtol;
};
Tolerance ToleranceFor(int64_t k);

// Runs the procedure above. Never throws: backend exceptions become a
// candidate's error, or the report's error when Candidates or Prepare fails;
// an invalid shape or options fail the report with a message naming the field.
TuneReport TuneDense(Backend& backend, const DenseShape& shape,
                     const TuneOptions& options, const TuneHooks& hooks = {});

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_ENGINE_H_
