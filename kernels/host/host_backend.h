// HostBackend: the Backend that benchmarks the CPU kernels of
// host_kernels.h. Serves where there is no GPU (development, CI, a daemon
// started with the host backend) and keeps the engine honest: its candidates
// really differ in speed.
//
//   kernels::HostBackend host;
//   kernels::TuneReport r = kernels::TuneDense(host, shape, options);
//   kernels::Status s =
//       kernels::RunHostExecution(r.chosen, shape, x, w, y);  // later,
//       anywhere
#ifndef GPUTUNE_KERNELS_HOST_HOST_BACKEND_H_
#define GPUTUNE_KERNELS_HOST_HOST_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/bf16.h"
#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// Inputs, output and reference of one shape on the host. Inputs are stored
// in `copies()` identical copies: timing rotates among them so that
// consecutive runs do not find the previous run's inputs in cache (as in
// inference, where other layers run in between). Shapes too large for
// several copies get one.
class HostWorkload final : public Workload {
 public:
  // Generates x and W from seed with FillUniformBf16 and computes the
  // reference (ReferenceDense), and the exact-check inputs and reference.
  // kInvalidArgument unless shape has m, n, k >= 1 and copies >= 1;
  // CancelledStatus() when cancel (if not null) is set while the inputs or
  // the reference are computed; kResourceExhausted when they do not fit in
  // memory.
  static StatusOr<std::unique_ptr<HostWorkload>> Make(
      const DenseShape& shape, uint64_t seed, int copies,
      const std::atomic<bool>* cancel = nullptr);

  const DenseShape& shape() const { return shape_; }
  int copies() const { return copies_; }
  // Copy `copy` of the inputs, 0 <= copy < copies(); copy 0 is the one
  // validation uses.
  const Bf16* x(int copy = 0) const;
  const Bf16* w(int copy = 0) const;
  Bf16* y() { return y_.data(); }
  const Bf16* y() const { return y_.data(); }
  const float* reference() const { return reference_.data(); }
  size_t outputs() const { return y_.size(); }
  // The exact-check inputs (FillExactCheckBf16) and their reference.
  const Bf16* exact_x() const { return exact_x_.data(); }
  const Bf16* exact_w() const { return exact_w_.data(); }
  const float* exact_reference() const { return exact_reference_.data(); }

  // The copy the next timed run should read; advances round-robin.
  int NextCopy();

 private:
  HostWorkload(const DenseShape& shape, int copies)
      : shape_(shape), copies_(copies) {}
  // Make's work, which may throw std::bad_alloc.
  Status Fill(uint64_t seed, const std::atomic<bool>* cancel);

  const DenseShape shape_;
  const int copies_;
  std::vector<Bf16> x_;  // copies_ * m * k
  std::vector<Bf16> w_;  // copies_ * n * k
  std::vector<Bf16> y_;  // m * n
  std::vector<float> reference_;
  std::vector<Bf16> exact_x_;
  std::vector<Bf16> exact_w_;
  std::vector<float> exact_reference_;
  int next_copy_ = 0;
};

class HostBackend final : public Backend {
 public:
  // Reads the CPU model and memory size once, for the fingerprint.
  HostBackend();

  std::string Name() const override;  // "host"
  // backend "host", device_name the CPU model, processor_count the hardware
  // threads, memory_bytes the physical memory, kernel_version, and build
  // (compiler, version, build type, architecture, kernel flags).
  Fingerprint GetFingerprint() const override;
  // host.naive (the default), host.unrolled, host.blocked, and host.threaded
  // when there is more than one hardware thread; the first max_candidates.
  StatusOr<std::vector<Execution>> Candidates(const DenseShape& shape,
                                              int max_candidates) override;
  // A HostWorkload (HostWorkload::Make, with its errors).
  StatusOr<std::unique_ptr<Workload>> Prepare(const DenseShape& shape,
                                              uint64_t seed) override;
  // Fills the output with NaN first, so an output a kernel forgets to write
  // shows up as non-finite.
  StatusOr<Comparison> RunAndCompare(Workload& workload, const Execution& exec,
                                     double atol, double rtol) override;
  StatusOr<Comparison> RunAndCompareExact(Workload& workload,
                                          const Execution& exec) override;
  // Kernel runs and Prepare's reference stop with CancelledStatus() once the
  // flag is set.
  void SetCancel(const std::atomic<bool>* cancel) override { cancel_ = cancel; }
  const std::atomic<bool>* cancel() const { return cancel_; }
  // Wall time (steady_clock) of reps runs over rotating input copies.
  StatusOr<double> TimeSample(Workload& workload, const Execution& exec,
                              int reps) override;

  // The HostWorkload behind a Workload from Prepare, or kInvalidArgument for
  // a workload of another backend.
  static StatusOr<HostWorkload*> AsHost(Workload& workload);

 private:
  // One run on the uniform (or exact-check) inputs, compared with their
  // reference.
  StatusOr<Comparison> RunAndCompareOn(Workload& workload,
                                       const Execution& exec, bool exact,
                                       double atol, double rtol);

  Fingerprint fingerprint_;  // constant after construction
  const std::atomic<bool>* cancel_ = nullptr;
};

// Mean wall time (steady_clock) of `reps` (at least 1) back-to-back calls of
// run(): the timing loop of the host-side backends' TimeSample. Stops at the
// first run that fails and returns its status.
StatusOr<double> MeanSecondsPerRun(int reps,
                                   const std::function<Status()>& run);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_HOST_HOST_BACKEND_H_
