// Compiled with -O3 but never -march=native (kernels/CMakeLists.txt): a
// measurement must hold for every machine with the same fingerprint, and a
// client replaying an execution must compute exactly what was measured.
#include "kernels/host/host_kernels.h"

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/bf16.h"
#include "kernels/status.h"

namespace gputune::kernels {
namespace {

struct ParamRule {
  const char* name;
  int64_t min;
  int64_t max;
};

// The values of exactly the parameters in `rules`, in their order, or
// kInvalidArgument naming the first parameter that is missing, unknown or out
// of range.
StatusOr<std::vector<int64_t>> TakeParams(
    const Execution& exec, std::initializer_list<ParamRule> rules) {
  std::vector<int64_t> values;
  for (const ParamRule& rule : rules) {
    auto it = exec.params.find(rule.name);
    if (it == exec.params.end()) {
      return InvalidArgumentError(exec.kernel + " needs parameter " +
                                  rule.name);
    }
    if (it->second < rule.min || it->second > rule.max) {
      return InvalidArgumentError(exec.kernel + " parameter " + rule.name +
                                  "=" + std::to_string(it->second) +
                                  " is outside [" + std::to_string(rule.min) +
                                  ", " + std::to_string(rule.max) + "]");
    }
    values.push_back(it->second);
  }
  if (exec.params.size() != rules.size()) {
    for (const auto& param : exec.params) {
      const bool known = std::any_of(
          rules.begin(), rules.end(),
          [&](const ParamRule& rule) { return param.first == rule.name; });
      if (!known) {
        return InvalidArgumentError(exec.kernel + " has no parameter " +
                                    param.first);
      }
    }
  }
  return values;
}

// Outputs (or output tiles) between two looks at the cancel flag: a relaxed
// load every 64 dot products costs nothing measurable, and stops even the
// slowest kernel on the largest shape within milliseconds.
constexpr int64_t kCancelStride = 64;

using Cancel = const std::atomic<bool>*;

inline bool IsCancelled(Cancel cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

inline float ToFloat(uint16_t b) { return Bf16ToFloat(b); }
inline float ToFloat(float f) { return f; }

// sum_i a[i] * b[i] over n elements with U independent fp32 accumulators
// (element i goes to accumulator i % U, tail elements to one more), combined
// pairwise. Independent accumulators are what lets the compiler keep U/4 SSE
// (or U/8 AVX) registers busy without -ffast-math.
template <int U, typename T>
float Dot(const T* a, const T* b, int64_t n) {
  float acc[U] = {};
  int64_t i = 0;
  for (; i + U <= n; i += U) {
    for (int j = 0; j < U; ++j) acc[j] += ToFloat(a[i + j]) * ToFloat(b[i + j]);
  }
  float tail = 0;
  for (; i < n; ++i) tail += ToFloat(a[i]) * ToFloat(b[i]);
  for (int width = U / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0] + tail;
}

// The untuned default: one accumulator, k in order. The serial dependency
// on acc is what makes it slow (one add per FP-add latency).
Status Naive(const DenseShape& s, const uint16_t* x, const uint16_t* w,
             uint16_t* y, Cancel cancel) {
  for (int64_t m = 0; m < s.m; ++m) {
    for (int64_t n = 0; n < s.n; ++n) {
      if (n % kCancelStride == 0 && IsCancelled(cancel)) {
        return CancelledStatus();
      }
      float acc = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        acc += Bf16ToFloat(x[m * s.k + k]) * Bf16ToFloat(w[n * s.k + k]);
      }
      y[m * s.n + n] = FloatToBf16(acc);
    }
  }
  return OkStatus();
}

template <int U>
Status Unrolled(const DenseShape& s, const uint16_t* x, const uint16_t* w,
                uint16_t* y, Cancel cancel) {
  for (int64_t m = 0; m < s.m; ++m) {
    for (int64_t n = 0; n < s.n; ++n) {
      if (n % kCancelStride == 0 && IsCancelled(cancel)) {
        return CancelledStatus();
      }
      y[m * s.n + n] = FloatToBf16(Dot<U>(x + m * s.k, w + n * s.k, s.k));
    }
  }
  return OkStatus();
}

// For each strip of tile_n columns and each K slice, converts the W slice to
// fp32 once and reuses it for every row of x (converted per tile_m rows);
// per-output sums live in acc[M][tile_n] across the K slices.
Status Blocked(const DenseShape& s, const uint16_t* x, const uint16_t* w,
               uint16_t* y, int64_t tile_m, int64_t tile_n, int64_t tile_k,
               Cancel cancel) {
  std::vector<float> xf(static_cast<size_t>(tile_m * tile_k));
  std::vector<float> wf(static_cast<size_t>(tile_n * tile_k));
  std::vector<float> acc(static_cast<size_t>(s.m * tile_n));
  for (int64_t n0 = 0; n0 < s.n; n0 += tile_n) {
    const int64_t nn = std::min(tile_n, s.n - n0);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t k0 = 0; k0 < s.k; k0 += tile_k) {
      if (IsCancelled(cancel)) return CancelledStatus();
      const int64_t kk = std::min(tile_k, s.k - k0);
      for (int64_t j = 0; j < nn; ++j) {
        const uint16_t* src = w + (n0 + j) * s.k + k0;
        std::transform(src, src + kk, &wf[j * tile_k], Bf16ToFloat);
      }
      for (int64_t m0 = 0; m0 < s.m; m0 += tile_m) {
        const int64_t mm = std::min(tile_m, s.m - m0);
        for (int64_t i = 0; i < mm; ++i) {
          const uint16_t* src = x + (m0 + i) * s.k + k0;
          std::transform(src, src + kk, &xf[i * tile_k], Bf16ToFloat);
        }
        for (int64_t i = 0; i < mm; ++i) {
          for (int64_t j = 0; j < nn; ++j) {
            acc[(m0 + i) * tile_n + j] +=
                Dot<8>(&xf[i * tile_k], &wf[j * tile_k], kk);
          }
        }
      }
    }
    for (int64_t m = 0; m < s.m; ++m) {
      for (int64_t j = 0; j < nn; ++j) {
        y[m * s.n + n0 + j] = FloatToBf16(acc[m * tile_n + j]);
      }
    }
  }
  return OkStatus();
}

// Tiles of `tile` output columns go to whichever thread asks next; each
// output is Dot<8> of its row and column, so the result does not depend on
// which thread computed it. The calling thread works too.
Status Threaded(const DenseShape& s, const uint16_t* x, const uint16_t* w,
                uint16_t* y, int64_t threads, int64_t tile, Cancel cancel) {
  const int64_t tiles = (s.n + tile - 1) / tile;
  std::atomic<int64_t> next{0};
  std::atomic<bool> stopped{false};  // a worker left tiles undone
  auto work = [&] {
    for (int64_t t;
         (t = next.fetch_add(1, std::memory_order_relaxed)) < tiles;) {
      const int64_t n_end = std::min(s.n, (t + 1) * tile);
      for (int64_t n = t * tile; n < n_end; ++n) {
        if ((n - t * tile) % kCancelStride == 0 && IsCancelled(cancel)) {
          stopped.store(true, std::memory_order_relaxed);
          return;
        }
        for (int64_t m = 0; m < s.m; ++m) {
          y[m * s.n + n] = FloatToBf16(Dot<8>(x + m * s.k, w + n * s.k, s.k));
        }
      }
    }
  };
  {
    std::vector<std::jthread> helpers;  // joined on every exit path
    const int64_t extra = std::min(threads, tiles) - 1;
    helpers.reserve(static_cast<size_t>(extra));
    for (int64_t i = 0; i < extra; ++i) helpers.emplace_back(work);
    work();
  }
  return stopped.load() ? CancelledStatus() : OkStatus();
}

}  // namespace

StatusOr<HostKernel> HostKernel::Make(const Execution& exec) {
  if (exec.workspace_bytes != 0) {
    return InvalidArgumentError(exec.kernel +
                                " takes no workspace, got workspace_bytes=" +
                                std::to_string(exec.workspace_bytes));
  }
  HostKernel kernel;
  StatusOr<std::vector<int64_t>> p = std::vector<int64_t>{};
  if (exec.kernel == "host.naive") {
    kernel.family_ = Family::kNaive;
    p = TakeParams(exec, {});
  } else if (exec.kernel == "host.unrolled") {
    kernel.family_ = Family::kUnrolled;
    p = TakeParams(exec, {{"unroll", 4, 16}});
    if (p.ok() && (*p)[0] != 4 && (*p)[0] != 8 && (*p)[0] != 16) {
      return InvalidArgumentError(
          "host.unrolled parameter unroll=" + std::to_string((*p)[0]) +
          " is not 4, 8 or 16");
    }
  } else if (exec.kernel == "host.blocked") {
    kernel.family_ = Family::kBlocked;
    p = TakeParams(exec,
                   {{"tile_m", 1, 64}, {"tile_n", 1, 64}, {"tile_k", 8, 4096}});
  } else if (exec.kernel == "host.threaded") {
    kernel.family_ = Family::kThreaded;
    p = TakeParams(exec, {{"threads", 1, 256}, {"tile", 1, 65536}});
  } else {
    return InvalidArgumentError("unknown host kernel \"" + exec.kernel + "\"");
  }
  if (!p.ok()) return p.status();
  p->resize(3);
  kernel.p0_ = (*p)[0];
  kernel.p1_ = (*p)[1];
  kernel.p2_ = (*p)[2];
  return kernel;
}

Status HostKernel::Run(const DenseShape& shape, const uint16_t* x,
                       const uint16_t* w, uint16_t* y,
                       const std::atomic<bool>* cancel) const {
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) {
    return InvalidArgumentError("dense shape needs m, n, k >= 1");
  }
  // What the standard library can throw here: std::bad_alloc for
  // host.blocked's tiles, std::system_error when host.threaded cannot start
  // a thread.
  try {
    return RunFamily(shape, x, w, y, cancel);
  } catch (const std::bad_alloc& e) {
    return ResourceExhaustedError(e.what());
  } catch (...) {
    return InternalError(CurrentExceptionMessage());
  }
}

Status HostKernel::RunFamily(const DenseShape& shape, const uint16_t* x,
                             const uint16_t* w, uint16_t* y,
                             const std::atomic<bool>* cancel) const {
  switch (family_) {
    case Family::kNaive:
      return Naive(shape, x, w, y, cancel);
    case Family::kUnrolled:
      if (p0_ == 4) return Unrolled<4>(shape, x, w, y, cancel);
      if (p0_ == 8) return Unrolled<8>(shape, x, w, y, cancel);
      return Unrolled<16>(shape, x, w, y, cancel);
    case Family::kBlocked:
      return Blocked(shape, x, w, y, p0_, p1_, p2_, cancel);
    case Family::kThreaded:
      return Threaded(shape, x, w, y, p0_, p1_, cancel);
  }
  return InternalError("unknown host kernel family");
}

Status RunHostExecution(const Execution& exec, const DenseShape& shape,
                        const uint16_t* x, const uint16_t* w, uint16_t* y) {
  StatusOr<HostKernel> kernel = HostKernel::Make(exec);
  if (!kernel.ok()) return kernel.status();
  return kernel->Run(shape, x, w, y);
}

Status ValidateHostExecution(const Execution& exec) {
  return HostKernel::Make(exec).status();
}

}  // namespace gputune::kernels
