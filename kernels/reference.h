// The reference every dense candidate is validated against, and the
// comparison of a candidate's output with it (Backend::RunAndCompare).
//
//   StatusOr<std::vector<float>> ref = ReferenceDense(shape, x, w);
//   Comparison c = CompareWithReference(y, ref->data(), ref->size(),
//                                       tol.atol, tol.rtol);
#ifndef GPUTUNE_KERNELS_REFERENCE_H_
#define GPUTUNE_KERNELS_REFERENCE_H_

#include <atomic>
#include <cstddef>
#include <vector>

#include "kernels/backend.h"
#include "kernels/bf16.h"
#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// y[m][n] = sum_k x[m][k] * w[n][k] for row-major x[M][K] and w[N][K], as
// floats (M*N of them). Products and sums are taken in double (bf16 products
// are exact there), so the reference is more accurate than any fp32
// accumulation it judges. Deliberately the plainest loop, separate from every
// candidate: it must be obviously right, not fast (O(MNK), single thread).
// Checks `cancel` (when not null) every row of 64 outputs and returns
// CancelledStatus() once it is set: at the largest shapes this loop alone
// runs for tens of seconds. Fails only so.
StatusOr<std::vector<float>> ReferenceDense(
    const DenseShape& shape, const Bf16* x, const Bf16* w,
    const std::atomic<bool>* cancel = nullptr);

// ReferenceDense for the exact-check inputs (FillExactCheckBf16, bf16.h),
// summing only the K positions where W can be nonzero (k % P == n % P), so it
// costs O(MNK / P): the same numbers as ReferenceDense on those inputs.
StatusOr<std::vector<float>> ReferenceExactCheck(
    const DenseShape& shape, const Bf16* x, const Bf16* w,
    const std::atomic<bool>* cancel = nullptr);

// Counts the outputs that are NaN/Inf, or farther than atol + rtol*|ref| from
// the reference, and the largest finite |out - ref|.
Comparison CompareWithReference(const Bf16* out, const float* ref, size_t count,
                                double atol, double rtol);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_REFERENCE_H_
