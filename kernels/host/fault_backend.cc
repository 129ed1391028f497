#include "kernels/host/fault_backend.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/host/host_kernels.h"
#include "kernels/reference.h"

namespace gputune::kernels {
namespace {

bool IsFault(const Execution& exec) {
  return exec.kernel.starts_with("fault.");
}

int64_t Param(const Execution& exec, const char* name, int64_t fallback) {
  auto it = exec.params.find(name);
  return it == exec.params.end() ? fallback : it->second;
}

// OK when FaultBackend can run exec, else kInvalidArgument saying why not.
Status ValidateFaultExecution(const Execution& exec) {
  if (!IsFault(exec)) return ValidateHostExecution(exec);
  if (exec.kernel == "fault.wrong" || exec.kernel == "fault.throws" ||
      exec.kernel == "fault.slow" || exec.kernel == "fault.lose_device" ||
      exec.kernel == "fault.drop_term" || exec.kernel == "fault.repeat_term") {
    return OkStatus();
  }
  if (exec.kernel == "fault.splitk_bf16") {
    return Param(exec, "split", 2) >= 1
               ? OkStatus()
               : InvalidArgumentError("fault.splitk_bf16 needs split >= 1");
  }
  if (exec.kernel == "fault.fixed") {
    return Param(exec, "time_us", 100) > 0
               ? OkStatus()
               : InvalidArgumentError("fault.fixed needs time_us > 0");
  }
  return InvalidArgumentError("unknown fault kernel \"" + exec.kernel + "\"");
}

// y = x * W^T computed as `exec` would: host.naive's order, except that
// fault.drop_term leaves out (and fault.repeat_term adds twice) the K term
// `at` (default: the last), and fault.splitk_bf16 sums `split` chunks of K in
// fp32 and adds each chunk's sum, rounded to bf16, into a bf16 output (as a
// cuBLASLt split-K reducing in place in the output type does).
void DenseAsFault(const Execution& exec, const DenseShape& s, const Bf16* x,
                  const Bf16* w, Bf16* y) {
  const int64_t at =
      std::clamp<int64_t>(Param(exec, "at", s.k - 1), 0, s.k - 1);
  const int64_t split =
      exec.kernel == "fault.splitk_bf16" ? Param(exec, "split", 2) : 1;
  const int64_t chunk = (s.k + split - 1) / split;
  for (int64_t m = 0; m < s.m; ++m) {
    for (int64_t n = 0; n < s.n; ++n) {
      auto term = [&](int64_t k) {
        return Bf16ToFloat(x[m * s.k + k]) * Bf16ToFloat(w[n * s.k + k]);
      };
      float out = 0;
      for (int64_t k0 = 0; k0 < s.k; k0 += chunk) {
        float acc = 0;
        for (int64_t k = k0; k < std::min(s.k, k0 + chunk); ++k) {
          acc += term(k);
        }
        out =
            split > 1
                ? Bf16ToFloat(FloatToBf16(out + Bf16ToFloat(FloatToBf16(acc))))
                : acc;
      }
      if (exec.kernel == "fault.drop_term") out -= term(at);
      if (exec.kernel == "fault.repeat_term") out += term(at);
      y[m * s.n + n] = FloatToBf16(out);
    }
  }
}

// Sleeps, looking at the cancel flag every 5 ms.
Status Sleep(std::chrono::milliseconds total, const std::atomic<bool>* cancel) {
  const auto end = std::chrono::steady_clock::now() + total;
  while (std::chrono::steady_clock::now() < end) {
    if (cancel != nullptr && cancel->load()) return CancelledStatus();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(5), end - std::chrono::steady_clock::now()));
  }
  return OkStatus();
}

// Runs a fault.* execution into the workload's output, on the uniform or
// the exact-check inputs.
Status RunFault(HostWorkload& wl, const Execution& exec, bool timing,
                bool exact, const std::atomic<bool>* cancel) {
  GPUTUNE_KERNELS_RETURN_IF_ERROR(ValidateFaultExecution(exec));
  if (exec.kernel == "fault.throws" &&
      (timing || Param(exec, "on_timing", 0) == 0)) {
    return InternalError("injected failure");
  }
  if (exec.kernel == "fault.slow") {
    GPUTUNE_KERNELS_RETURN_IF_ERROR(
        Sleep(std::chrono::milliseconds(Param(exec, "sleep_ms", 50)), cancel));
  }
  const Bf16* x = exact ? wl.exact_x() : wl.x();
  const Bf16* w = exact ? wl.exact_w() : wl.w();
  DenseAsFault(exec, wl.shape(), x, w, wl.y());
  if (exec.kernel == "fault.wrong") {
    for (size_t i = 0; i < wl.outputs(); i += 7) {
      wl.y()[i] = FloatToBf16(Bf16ToFloat(wl.y()[i]) + 16.0f);
    }
  }
  return OkStatus();
}

}  // namespace

FaultBackend::FaultBackend(std::vector<Execution> candidates)
    : candidates_(std::move(candidates)) {}

std::vector<Execution> FaultBackend::DefaultCandidates() {
  return {
      {"host.naive", {}},
      {"host.unrolled", {{"unroll", 8}}},
      {"fault.wrong", {}},
      {"fault.throws", {}},
      {"fault.slow", {{"sleep_ms", 50}}},
  };
}

StatusOr<std::vector<Execution>> FaultBackend::ParseCandidates(
    std::string_view spec) {
  std::vector<Execution> out;
  while (!spec.empty()) {
    const size_t end = std::min(spec.find(';'), spec.size());
    const std::string_view item = spec.substr(0, end);
    spec.remove_prefix(std::min(end + 1, spec.size()));
    std::optional<Execution> exec = ParseExecution(item);
    const Status why = exec ? ValidateFaultExecution(*exec)
                            : InvalidArgumentError("syntax error");
    if (!why.ok()) {
      return InvalidArgumentError("candidate \"" + std::string(item) +
                                  "\": " + why.message());
    }
    out.push_back(std::move(*exec));
  }
  if (out.empty()) return InvalidArgumentError("no candidate given");
  return out;
}

std::string FaultBackend::Name() const { return "fault"; }

Fingerprint FaultBackend::GetFingerprint() const {
  Fingerprint fingerprint = host_.GetFingerprint();
  fingerprint.backend = "fault";
  return fingerprint;
}

StatusOr<std::vector<Execution>> FaultBackend::Candidates(
    const DenseShape& /*shape*/, int max_candidates) {
  std::vector<Execution> out = candidates_;
  out.resize(
      std::min(out.size(), static_cast<size_t>(std::max(1, max_candidates))));
  return out;
}

StatusOr<std::unique_ptr<Workload>> FaultBackend::Prepare(
    const DenseShape& shape, uint64_t seed) {
  return host_.Prepare(shape, seed);
}

Status FaultBackend::DeviceStatus() { return device_status_; }

StatusOr<Comparison> FaultBackend::RunAndCompare(Workload& workload,
                                                 const Execution& exec,
                                                 double atol, double rtol) {
  if (!IsFault(exec)) return host_.RunAndCompare(workload, exec, atol, rtol);
  if (exec.kernel == "fault.lose_device") {
    device_status_ = UnavailableError("injected device loss");
    return device_status_;
  }
  StatusOr<HostWorkload*> wl = HostBackend::AsHost(workload);
  if (!wl.ok()) return wl.status();
  GPUTUNE_KERNELS_RETURN_IF_ERROR(RunFault(**wl, exec, /*timing=*/false,
                                           /*exact=*/false, host_.cancel()));
  return CompareWithReference((*wl)->y(), (*wl)->reference(), (*wl)->outputs(),
                              atol, rtol);
}

StatusOr<Comparison> FaultBackend::RunAndCompareExact(Workload& workload,
                                                      const Execution& exec) {
  if (!IsFault(exec)) return host_.RunAndCompareExact(workload, exec);
  StatusOr<HostWorkload*> wl = HostBackend::AsHost(workload);
  if (!wl.ok()) return wl.status();
  GPUTUNE_KERNELS_RETURN_IF_ERROR(RunFault(**wl, exec, /*timing=*/false,
                                           /*exact=*/true, host_.cancel()));
  return CompareWithReference((*wl)->y(), (*wl)->exact_reference(),
                              (*wl)->outputs(), 0, 0);
}

int FaultBackend::Bf16Partials(const Execution& exec) const {
  return exec.kernel == "fault.splitk_bf16"
             ? static_cast<int>(Param(exec, "split", 2))
             : 1;
}

StatusOr<double> FaultBackend::TimeSample(Workload& workload,
                                          const Execution& exec, int reps) {
  if (!IsFault(exec)) return host_.TimeSample(workload, exec, reps);
  if (exec.kernel == "fault.fixed") return Param(exec, "time_us", 100) * 1e-6;
  StatusOr<HostWorkload*> wl = HostBackend::AsHost(workload);
  if (!wl.ok()) return wl.status();
  return MeanSecondsPerRun(reps, [&] {
    return RunFault(**wl, exec, /*timing=*/true, /*exact=*/false,
                    host_.cancel());
  });
}

}  // namespace gputune::kernels
