// FaultBackend: a Backend whose candidates misbehave on purpose, so that the
// engine's and the daemon's handling of bad kernels can be tested without a
// broken GPU. It lives in gputune_kernels_fault, never in gputune_kernels:
// the kernels tests link it, and gputuned offers it behind --backend=fault
// so that the integration tests exercise the real binary's failure paths
// (kernels/CMakeLists.txt says why gputuned carries it).
//
//   kernels::FaultBackend backend({{"fault.fixed", {{"time_us", 100}}},
//                                  {"fault.fixed", {{"time_us", 97}}}});
//   kernels::TuneReport r = kernels::TuneDense(backend, shape, options);
//
// Kernel families (parameters optional, defaults shown):
//   host.*                           HostBackend's kernels, unchanged
//   fault.wrong                      every 7th output is off by +16
//   fault.throws    on_timing=0      fails with kInternal "injected
//                                    failure" in validation, or (on_timing=1)
//                                    only when timed (a kernel that throws,
//                                    as the name says, in a backend whose
//                                    boundary converts it)
//   fault.slow      sleep_ms=50      correct, but sleeps sleep_ms per run
//   fault.lose_device                fails, and from then on DeviceStatus()
//                                    reports kUnavailable "injected device
//                                    loss" (a sticky CUDA error, simulated)
//   fault.fixed     time_us=100      correct; TimeSample reports exactly
//                                    time_us per run without running anything,
//                                    so selection tests are deterministic
//   fault.drop_term   at=K-1         leaves the K term `at` out of every output
//   fault.repeat_term at=K-1         adds the K term `at` twice
//   fault.splitk_bf16 split=2        correct, but sums `split` chunks of K and
//                                    adds each, rounded to bf16, into a bf16
//                                    output (a split-K reducing in place in
//                                    bf16); Bf16Partials says so
// Workloads are HostWorkloads; outputs start from host.naive's (correct) one.
// fault.slow's sleep and host kernels stop on the cancel flag (SetCancel).
#ifndef GPUTUNE_KERNELS_HOST_FAULT_BACKEND_H_
#define GPUTUNE_KERNELS_HOST_FAULT_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "kernels/dense.h"
#include "kernels/host/host_backend.h"

namespace gputune::kernels {

class FaultBackend final : public Backend {
 public:
  // Offers `candidates` (the first is the default) for every shape.
  explicit FaultBackend(
      std::vector<Execution> candidates = DefaultCandidates());

  // host.naive (default), host.unrolled(unroll=8), fault.wrong, fault.throws,
  // fault.slow: a valid winner and one of each failure.
  static std::vector<Execution> DefaultCandidates();

  // Reads a candidate list written as Execution::ToString forms separated by
  // ';', e.g. "fault.fixed(time_us=100);fault.fixed(time_us=97)" (for a
  // --fault_candidates flag). kInvalidArgument on a syntax error, a kernel
  // this backend cannot run or an empty list.
  static StatusOr<std::vector<Execution>> ParseCandidates(
      std::string_view spec);

  std::string Name() const override;  // "fault"
  // The host's fingerprint with backend "fault", so fault-tuned entries never
  // pass for host ones.
  Fingerprint GetFingerprint() const override;
  // The constructor's list, cut to max_candidates.
  StatusOr<std::vector<Execution>> Candidates(const DenseShape& shape,
                                              int max_candidates) override;
  StatusOr<std::unique_ptr<Workload>> Prepare(const DenseShape& shape,
                                              uint64_t seed) override;
  StatusOr<Comparison> RunAndCompare(Workload& workload, const Execution& exec,
                                     double atol, double rtol) override;
  StatusOr<Comparison> RunAndCompareExact(Workload& workload,
                                          const Execution& exec) override;
  int Bf16Partials(const Execution& exec) const override;
  void SetCancel(const std::atomic<bool>* cancel) override {
    host_.SetCancel(cancel);
  }
  StatusOr<double> TimeSample(Workload& workload, const Execution& exec,
                              int reps) override;
  // Not OK once a fault.lose_device candidate ran.
  Status DeviceStatus() override;

 private:
  HostBackend host_;
  Status device_status_;
  const std::vector<Execution> candidates_;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_HOST_FAULT_BACKEND_H_
