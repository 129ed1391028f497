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
void DeviceReferenceDense(const DenseShape& shape, const void* x, const void* w,
                          float* ref, cudaStream_t stream);

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
