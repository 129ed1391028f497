// Validation on the device (the host backend's is kernels/reference.h):
// deterministic inputs, the fp32 reference and the
// comparison of a candidate's output with it. Kept apart from every candidate
// kernel so a bug in one cannot hide in the other.
#ifndef GPUTUNE_KERNELS_CUDA_REFERENCE_H_
#define GPUTUNE_KERNELS_CUDA_REFERENCE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/dense.h"

namespace gputune::kernels {

// Fills x[M,K] and W[N,K] on the device with exactly the values the host
// generator gives (bf16.h: UniformBf16 with kStreamX / kStreamW, U[-1, 1)),
// the range ToleranceFor is derived for, so every backend sees the same inputs
// for a seed. Enqueued on the stream. Throws std::runtime_error on a failed
// launch.
void DeviceFillDenseInputs(const DenseShape& shape, void* x, void* w,
                           uint64_t seed, cudaStream_t stream);

// Fills x[M,K] and W[N,K] on the device with the exact-check inputs
// (ExactCheckBf16, bf16.h), exactly as FillExactCheckBf16 does on the host.
// Their reference (DeviceReferenceDense) is exact: every partial sum is an
// integer in [-256, 256]. Throws std::runtime_error on a failed launch.
void DeviceFillExactCheckInputs(const DenseShape& shape, void* x, void* w,
                                uint64_t seed, cudaStream_t stream);

// ref[M,N] = x * W^T from the bf16 inputs with fp32 products and fp32
// accumulation in K order, by a plain tiled kernel. Enqueued on the stream.
// Only the columns [n_begin, n_end) (n_end < 0: to N), so that a caller can
// split a long reference into launches and stop between them; ranges that
// start at multiples of DeviceReferenceColumns' result never overlap.
void DeviceReferenceDense(const DenseShape& shape, const void* x, const void* w,
                          float* ref, cudaStream_t stream, int64_t n_begin = 0,
                          int64_t n_end = -1);

// How many columns of the reference make about `fmas` multiply-adds: a
// multiple of the reference's tile (>= one tile, <= N rounded up to one).
int64_t DeviceReferenceColumns(const DenseShape& shape, double fmas);

// Device scratch DeviceCompareWithReference needs.
inline constexpr size_t kCompareScratchBytes = 64;

// Compares count bf16 outputs y with ref on the device: the largest
// |y - ref| over finite outputs, the finite outputs with
// |y - ref| > atol + rtol * |ref|, and the NaN / Inf outputs (counted only as
// non_finite). Synchronises the stream. Throws std::runtime_error on a CUDA
// error (including one left by an earlier launch on the stream).
Comparison DeviceCompareWithReference(const void* y, const float* ref,
                                      int64_t count, double atol, double rtol,
                                      void* scratch, cudaStream_t stream);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_REFERENCE_H_
