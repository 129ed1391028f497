#include "kernels/host/host_backend.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/host/host_kernels.h"
#include "kernels/reference.h"

#ifndef GPUTUNE_KERNELS_BUILD
#define GPUTUNE_KERNELS_BUILD "unknown build"
#endif

namespace gputune::kernels {
namespace {

// Rotation: enough input copies to cover twice the last-level cache, within
// these bounds (memory is shared with the daemon's other work).
constexpr size_t kMaxRotationBytes = size_t{256} << 20;
constexpr int kMaxCopies = 8;
constexpr size_t kAssumedCacheBytes = size_t{32} << 20;

constexpr Bf16 kQuietNaN = 0x7fc0;

size_t LastLevelCacheBytes() {
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<size_t>(l3);
#endif
  return kAssumedCacheBytes;
}

int CopiesFor(const DenseShape& shape) {
  const size_t per_copy =
      static_cast<size_t>((shape.m + shape.n) * shape.k) * sizeof(Bf16);
  const size_t target = std::min(2 * LastLevelCacheBytes(), kMaxRotationBytes);
  return static_cast<int>(std::clamp<size_t>(target / per_copy, 1,
                                             static_cast<size_t>(kMaxCopies)));
}

// The CPU model as /proc/cpuinfo names it (x86: "model name"; Arm: "Model"
// or "Hardware"), else the architecture.
std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string fallback;
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string_view key(line.data(), colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) {
      key.remove_suffix(1);
    }
    const size_t start = line.find_first_not_of(' ', colon + 1);
    const std::string value =
        start == std::string::npos ? "" : line.substr(start);
    if (value.empty()) continue;
    if (key == "model name") return value;
    if ((key == "Model" || key == "Hardware") && fallback.empty()) {
      fallback = value;
    }
  }
  if (!fallback.empty()) return fallback;
  utsname names{};
  return uname(&names) == 0 ? std::string("unknown ") + names.machine
                            : "unknown CPU";
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0
             ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
             : 0;
}

// Elements generated between two looks at the cancel flag.
constexpr size_t kFillCancelStride = size_t{1} << 16;

// out[i] = element(i) for i < count, stopping with CancelledStatus() once
// cancel (when not null) is set: the inputs of the largest shapes take
// seconds.
template <typename Element>
Status FillInputs(Bf16* out, size_t count, const std::atomic<bool>* cancel,
                  Element element) {
  for (size_t i = 0; i < count; ++i) {
    if (i % kFillCancelStride == 0 && cancel != nullptr && cancel->load()) {
      return CancelledStatus();
    }
    out[i] = element(i);
  }
  return OkStatus();
}

uint32_t HardwareThreads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

StatusOr<std::unique_ptr<HostWorkload>> HostWorkload::Make(
    const DenseShape& shape, uint64_t seed, int copies,
    const std::atomic<bool>* cancel) {
  if (shape.m < 1 || shape.n < 1 || shape.k < 1 || copies < 1) {
    return InvalidArgumentError(
        "host workload needs m, n, k >= 1 and at least one copy");
  }
  // The buffers of the largest shapes may not fit: std::bad_alloc (or
  // std::length_error) is the standard library's only way to say so.
  try {
    std::unique_ptr<HostWorkload> workload(new HostWorkload(shape, copies));
    GPUTUNE_KERNELS_RETURN_IF_ERROR(workload->Fill(seed, cancel));
    return workload;
  } catch (const std::bad_alloc& e) {
    return ResourceExhaustedError(e.what());
  } catch (...) {
    return ResourceExhaustedError(CurrentExceptionMessage());
  }
}

Status HostWorkload::Fill(uint64_t seed, const std::atomic<bool>* cancel) {
  const DenseShape& shape = shape_;
  const size_t x_size = static_cast<size_t>(shape.m * shape.k);
  const size_t w_size = static_cast<size_t>(shape.n * shape.k);
  x_.resize(x_size * copies_);
  w_.resize(w_size * copies_);
  y_.resize(static_cast<size_t>(shape.m * shape.n));
  // FillUniformBf16's values, with looks at the cancel flag.
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      FillInputs(x_.data(), x_size, cancel,
                 [&](size_t i) { return UniformBf16(seed, kStreamX, i); }));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      FillInputs(w_.data(), w_size, cancel,
                 [&](size_t i) { return UniformBf16(seed, kStreamW, i); }));
  for (int c = 1; c < copies_; ++c) {
    std::copy_n(x_.begin(), x_size, x_.begin() + c * x_size);
    std::copy_n(w_.begin(), w_size, w_.begin() + c * w_size);
  }
  StatusOr<std::vector<float>> reference =
      ReferenceDense(shape, x_.data(), w_.data(), cancel);
  if (!reference.ok()) return reference.status();
  reference_ = std::move(*reference);
  exact_x_.resize(x_size);
  exact_w_.resize(w_size);
  // FillExactCheckBf16's values, with looks at the cancel flag.
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      FillInputs(exact_x_.data(), x_size, cancel, [&](size_t i) {
        return ExactCheckBf16(seed, kStreamExactX, i, shape.k);
      }));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      FillInputs(exact_w_.data(), w_size, cancel, [&](size_t i) {
        return ExactCheckBf16(seed, kStreamExactW, i, shape.k);
      }));
  StatusOr<std::vector<float>> exact_reference =
      ReferenceExactCheck(shape, exact_x_.data(), exact_w_.data(), cancel);
  if (!exact_reference.ok()) return exact_reference.status();
  exact_reference_ = std::move(*exact_reference);
  return OkStatus();
}

const Bf16* HostWorkload::x(int copy) const {
  return x_.data() + static_cast<size_t>(copy * shape_.m * shape_.k);
}

const Bf16* HostWorkload::w(int copy) const {
  return w_.data() + static_cast<size_t>(copy * shape_.n * shape_.k);
}

int HostWorkload::NextCopy() {
  const int copy = next_copy_;
  next_copy_ = (next_copy_ + 1) % copies_;
  return copy;
}

HostBackend::HostBackend() {
  fingerprint_.backend = "host";
  fingerprint_.device_name = CpuModel();
  fingerprint_.processor_count = HardwareThreads();
  fingerprint_.memory_bytes = PhysicalMemoryBytes();
  fingerprint_.kernel_version = kKernelVersion;
  fingerprint_.build = GPUTUNE_KERNELS_BUILD;
}

std::string HostBackend::Name() const { return "host"; }

Fingerprint HostBackend::GetFingerprint() const { return fingerprint_; }

StatusOr<std::vector<Execution>> HostBackend::Candidates(
    const DenseShape& /*shape*/, int max_candidates) {
  std::vector<Execution> out = {
      {"host.naive", {}},
      {"host.unrolled", {{"unroll", 8}}},
      {"host.unrolled", {{"unroll", 16}}},
      {"host.blocked", {{"tile_m", 4}, {"tile_n", 16}, {"tile_k", 256}}},
      {"host.blocked", {{"tile_m", 8}, {"tile_n", 8}, {"tile_k", 512}}},
      // Decode-shaped: one row of x at a time, wide strips of W.
      {"host.blocked", {{"tile_m", 1}, {"tile_n", 32}, {"tile_k", 1024}}},
  };
  const int64_t threads = fingerprint_.processor_count;
  if (threads > 1) {
    out.push_back({"host.threaded", {{"threads", threads}, {"tile", 8}}});
    out.push_back({"host.threaded", {{"threads", threads}, {"tile", 64}}});
  }
  out.resize(
      std::min(out.size(), static_cast<size_t>(std::max(1, max_candidates))));
  return out;
}

StatusOr<std::unique_ptr<Workload>> HostBackend::Prepare(
    const DenseShape& shape, uint64_t seed) {
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) {
    return InvalidArgumentError("dense shape needs m, n, k >= 1");
  }
  StatusOr<std::unique_ptr<HostWorkload>> workload =
      HostWorkload::Make(shape, seed, CopiesFor(shape), cancel_);
  if (!workload.ok()) return workload.status();
  return std::unique_ptr<Workload>(std::move(*workload));
}

StatusOr<Comparison> HostBackend::RunAndCompare(Workload& workload,
                                                const Execution& exec,
                                                double atol, double rtol) {
  return RunAndCompareOn(workload, exec, /*exact=*/false, atol, rtol);
}

StatusOr<Comparison> HostBackend::RunAndCompareExact(Workload& workload,
                                                     const Execution& exec) {
  return RunAndCompareOn(workload, exec, /*exact=*/true, 0, 0);
}

StatusOr<Comparison> HostBackend::RunAndCompareOn(Workload& workload,
                                                  const Execution& exec,
                                                  bool exact, double atol,
                                                  double rtol) {
  StatusOr<HostWorkload*> wl = AsHost(workload);
  if (!wl.ok()) return wl.status();
  StatusOr<HostKernel> kernel = HostKernel::Make(exec);
  if (!kernel.ok()) return kernel.status();
  HostWorkload& w = **wl;
  std::fill_n(w.y(), w.outputs(), kQuietNaN);
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      kernel->Run(w.shape(), exact ? w.exact_x() : w.x(),
                  exact ? w.exact_w() : w.w(), w.y(), cancel_));
  return CompareWithReference(w.y(),
                              exact ? w.exact_reference() : w.reference(),
                              w.outputs(), atol, rtol);
}

StatusOr<double> HostBackend::TimeSample(Workload& workload,
                                         const Execution& exec, int reps) {
  StatusOr<HostWorkload*> wl = AsHost(workload);
  if (!wl.ok()) return wl.status();
  StatusOr<HostKernel> kernel = HostKernel::Make(exec);
  if (!kernel.ok()) return kernel.status();
  HostWorkload& w = **wl;
  return MeanSecondsPerRun(reps, [&] {
    const int copy = w.NextCopy();
    return kernel->Run(w.shape(), w.x(copy), w.w(copy), w.y(), cancel_);
  });
}

StatusOr<double> MeanSecondsPerRun(int reps,
                                   const std::function<Status()>& run) {
  reps = std::max(reps, 1);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) GPUTUNE_KERNELS_RETURN_IF_ERROR(run());
  const std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / reps;
}

StatusOr<HostWorkload*> HostBackend::AsHost(Workload& workload) {
  auto* host = dynamic_cast<HostWorkload*>(&workload);
  if (host == nullptr) {
    return InvalidArgumentError("not a workload of the host backend");
  }
  return host;
}

}  // namespace gputune::kernels
