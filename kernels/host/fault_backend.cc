#include "kernels/host/fault_backend.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
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

// Empty when FaultBackend can run exec, else why not.
std::string FaultExecutionError(const Execution& exec) {
  if (!IsFault(exec)) return HostExecutionError(exec);
  if (exec.kernel == "fault.wrong" || exec.kernel == "fault.throws" ||
      exec.kernel == "fault.slow" || exec.kernel == "fault.lose_device") {
    return "";
  }
  if (exec.kernel == "fault.fixed") {
    return Param(exec, "time_us", 100) > 0 ? ""
                                           : "fault.fixed needs time_us > 0";
  }
  return "unknown fault kernel \"" + exec.kernel + "\"";
}

// Runs a fault.* execution into the workload's output.
void RunFault(HostWorkload& wl, const Execution& exec, bool timing) {
  if (std::string error = FaultExecutionError(exec); !error.empty()) {
    throw std::invalid_argument(error);
  }
  if (exec.kernel == "fault.throws" &&
      (timing || Param(exec, "on_timing", 0) == 0)) {
    throw std::runtime_error("injected failure");
  }
  if (exec.kernel == "fault.slow") {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(Param(exec, "sleep_ms", 50)));
  }
  RunHostExecution(Execution{"host.naive", {}}, wl.shape(), wl.x(), wl.w(),
                   wl.y());
  if (exec.kernel == "fault.wrong") {
    for (size_t i = 0; i < wl.outputs(); i += 7) {
      wl.y()[i] = FloatToBf16(Bf16ToFloat(wl.y()[i]) + 16.0f);
    }
  }
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

std::vector<Execution> FaultBackend::ParseCandidates(std::string_view spec,
                                                     std::string* error) {
  std::vector<Execution> out;
  while (!spec.empty()) {
    const size_t end = std::min(spec.find(';'), spec.size());
    const std::string_view item = spec.substr(0, end);
    spec.remove_prefix(std::min(end + 1, spec.size()));
    std::optional<Execution> exec = ParseExecution(item);
    std::string why = exec ? FaultExecutionError(*exec) : "syntax error";
    if (!why.empty()) {
      *error = "candidate \"" + std::string(item) + "\": " + why;
      return {};
    }
    out.push_back(std::move(*exec));
  }
  if (out.empty()) *error = "no candidate given";
  return out;
}

std::string FaultBackend::Name() const { return "fault"; }

Fingerprint FaultBackend::GetFingerprint() const {
  Fingerprint fingerprint = host_.GetFingerprint();
  fingerprint.backend = "fault";
  return fingerprint;
}

std::vector<Execution> FaultBackend::Candidates(const DenseShape& /*shape*/,
                                                int max_candidates) {
  std::vector<Execution> out = candidates_;
  out.resize(
      std::min(out.size(), static_cast<size_t>(std::max(1, max_candidates))));
  return out;
}

std::unique_ptr<Workload> FaultBackend::Prepare(const DenseShape& shape,
                                                uint64_t seed) {
  return host_.Prepare(shape, seed);
}

std::string FaultBackend::DeviceError() { return device_error_; }

Comparison FaultBackend::RunAndCompare(Workload& workload,
                                       const Execution& exec, double atol,
                                       double rtol) {
  if (!IsFault(exec)) return host_.RunAndCompare(workload, exec, atol, rtol);
  if (exec.kernel == "fault.lose_device") {
    device_error_ = "injected device loss";
    throw std::runtime_error("injected device loss");
  }
  HostWorkload& wl = HostBackend::AsHost(workload);
  RunFault(wl, exec, /*timing=*/false);
  return CompareWithReference(wl.y(), wl.reference(), wl.outputs(), atol, rtol);
}

double FaultBackend::TimeSample(Workload& workload, const Execution& exec,
                                int reps) {
  if (!IsFault(exec)) return host_.TimeSample(workload, exec, reps);
  if (exec.kernel == "fault.fixed") return Param(exec, "time_us", 100) * 1e-6;
  HostWorkload& wl = HostBackend::AsHost(workload);
  return MeanSecondsPerRun(reps, [&] { RunFault(wl, exec, /*timing=*/true); });
}

}  // namespace gputune::kernels
