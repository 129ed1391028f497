// Backend: what the benchmark engine needs from a device (CUDA or host CPU).
//
// A backend enumerates candidates for a shape, prepares inputs and the fp32
// reference, runs and times one candidate. The engine (engine.h) owns the
// procedure (validation tolerance, warm-up, sample count, budget, selection);
// a backend only does device work.
//
// Error contract: no method throws. A fallible one returns a Status (or a
// StatusOr, kernels/status.h) saying what failed: a device error or a
// candidate that cannot run. The engine records the message against the
// candidate (or fails the job when Candidates or Prepare fails). A status of
// code kCancelled is the exception: work stopped because the job was
// cancelled (SetCancel), and the engine ends the job. A backend converts what
// the C++ libraries it calls can throw (std::bad_alloc, std::system_error)
// into a status itself; for the CUDA backend, whose methods are called across
// the dlopen boundary of its module (kernels/cuda/module_api.h), that is what
// keeps every exception inside the module. Not thread-safe: the daemon's
// device worker is the only caller.
#ifndef GPUTUNE_KERNELS_BACKEND_H_
#define GPUTUNE_KERNELS_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// Inputs, output buffer and reference for one shape, owned by the backend
// that made it. Opaque to the engine.
class Workload {
 public:
  virtual ~Workload() = default;
};

// What a backend returns when it stopped long work (a host kernel run, the
// host reference) because the cancel flag given to SetCancel was set.
inline Status CancelledStatus() { return CancelledError("cancelled"); }

// How a candidate's output compares with the reference.
struct Comparison {
  double max_abs_error = 0;  // largest |out - ref|
  int64_t mismatches = 0;    // elements with |out - ref| > atol + rtol*|ref|
  int64_t non_finite = 0;    // NaN / Inf outputs
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "host" or "cuda".
  virtual std::string Name() const = 0;

  // The device and software this backend measures on.
  virtual Fingerprint GetFingerprint() const = 0;

  // The device's PCI bus id as nvidia-smi prints it ("00000000:65:00.0");
  // empty for a backend without one (host).
  virtual std::string PciBusId() const { return ""; }

  // Candidates for the shape, at most max_candidates of them (>= 1). The first
  // is the stable default: what the op runs untuned.
  virtual StatusOr<std::vector<Execution>> Candidates(const DenseShape& shape,
                                                      int max_candidates) = 0;

  // Why the last Candidates() call left out or changed what the device
  // offered (e.g. a cuBLASLt heuristic algo that cannot be rebuilt from its
  // stored config), one line each; empty when nothing was. The engine logs
  // them as warnings and keeps them in the report (TuneReport::notes).
  virtual std::vector<std::string> CandidateNotes() const { return {}; }

  // Allocates x, W (values from a deterministic generator seeded with seed,
  // in a realistic bf16 range), the output and the fp32-accumulated reference.
  // Use FillUniformBf16 (bf16.h) with kStreamX / kStreamW: ToleranceFor is
  // derived for its range, and every backend then sees the same inputs.
  // Also allocates the exact-check inputs (FillExactCheckBf16, bf16.h) and
  // their reference, for RunAndCompareExact.
  virtual StatusOr<std::unique_ptr<Workload>> Prepare(const DenseShape& shape,
                                                      uint64_t seed) = 0;

  // Runs the candidate once into the workload's output (clearing it first)
  // and compares with the reference using the given tolerance.
  virtual StatusOr<Comparison> RunAndCompare(Workload& workload,
                                             const Execution& exec, double atol,
                                             double rtol) = 0;

  // Runs the candidate once on the exact-check inputs (integers whose every
  // partial sum is exact in bf16, bf16.h) and compares with their reference
  // exactly (atol = rtol = 0): a correct kernel, whatever its order of
  // summation, split or reduction type, matches bit for bit, and one that
  // drops or repeats a K term does not.
  virtual StatusOr<Comparison> RunAndCompareExact(Workload& workload,
                                                  const Execution& exec) = 0;

  // How many partial sums of one output the candidate rounds to bf16 before
  // adding them (a cuBLASLt split-K that reduces in the output type); 1 when
  // it accumulates in fp32 throughout. Widens ToleranceFor for it.
  virtual int Bf16Partials(const Execution& exec) const {
    (void)exec;
    return 1;
  }

  // The job's cancel flag (null: none), set by the engine for the duration
  // of one TuneDense. Work that can last long (a host kernel run, the host
  // reference in Prepare) checks it and returns CancelledStatus(). Backends
  // whose every call is short (the engine caps a sample's length) may ignore
  // it.
  virtual void SetCancel(const std::atomic<bool>* cancel) { (void)cancel; }

  // OK while the device can still run work; otherwise why it cannot (a
  // sticky CUDA error such as an illegal address leaves the context unusable
  // for the rest of the process), code kUnavailable. The daemon asks after
  // every job and stops benchmarking on a lost device instead of blaming
  // every candidate.
  virtual Status DeviceStatus() { return OkStatus(); }

  // Times `reps` back-to-back runs of the candidate after evicting caches (or
  // rotating inputs) and returns the mean seconds per run: the kernel's time
  // alone (device events on a GPU), without the backend's own set-up. The
  // engine sizes reps from a warmed one-run sample, so a sample lasts about
  // max(TuneOptions::min_sample_seconds, one run).
  virtual StatusOr<double> TimeSample(Workload& workload, const Execution& exec,
                                      int reps) = 0;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_BACKEND_H_
