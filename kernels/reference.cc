#include "kernels/reference.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace gputune::kernels {

namespace {

// Outputs between two looks at the cancel flag.
constexpr int64_t kCancelStride = 64;

bool CancelRequested(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

}  // namespace

StatusOr<std::vector<float>> ReferenceDense(const DenseShape& shape,
                                            const Bf16* x, const Bf16* w,
                                            const std::atomic<bool>* cancel) {
  std::vector<float> y(static_cast<size_t>(shape.m * shape.n));
  for (int64_t m = 0; m < shape.m; ++m) {
    for (int64_t n = 0; n < shape.n; ++n) {
      if (n % kCancelStride == 0 && CancelRequested(cancel)) {
        return CancelledStatus();
      }
      double sum = 0;
      for (int64_t k = 0; k < shape.k; ++k) {
        sum += static_cast<double>(Bf16ToFloat(x[m * shape.k + k])) *
               static_cast<double>(Bf16ToFloat(w[n * shape.k + k]));
      }
      y[m * shape.n + n] = static_cast<float>(sum);
    }
  }
  return y;
}

StatusOr<std::vector<float>> ReferenceExactCheck(
    const DenseShape& shape, const Bf16* x, const Bf16* w,
    const std::atomic<bool>* cancel) {
  const int64_t period = ExactCheckPeriod(shape.k);
  std::vector<float> y(static_cast<size_t>(shape.m * shape.n));
  for (int64_t m = 0; m < shape.m; ++m) {
    for (int64_t n = 0; n < shape.n; ++n) {
      if (n % kCancelStride == 0 && CancelRequested(cancel)) {
        return CancelledStatus();
      }
      double sum = 0;
      for (int64_t k = n % period; k < shape.k; k += period) {
        sum += static_cast<double>(Bf16ToFloat(x[m * shape.k + k])) *
               static_cast<double>(Bf16ToFloat(w[n * shape.k + k]));
      }
      y[m * shape.n + n] = static_cast<float>(sum);
    }
  }
  return y;
}

Comparison CompareWithReference(const Bf16* out, const float* ref, size_t count,
                                double atol, double rtol) {
  Comparison c;
  for (size_t i = 0; i < count; ++i) {
    const double got = Bf16ToFloat(out[i]);
    const double want = ref[i];
    if (!std::isfinite(got)) {
      ++c.non_finite;
      continue;
    }
    const double error = std::abs(got - want);
    if (error > c.max_abs_error) c.max_abs_error = error;
    if (error > atol + rtol * std::abs(want)) ++c.mismatches;
  }
  return c;
}

}  // namespace gputune::kernels
