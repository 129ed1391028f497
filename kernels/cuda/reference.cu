#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reference.h"

namespace gputune::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void FillUniformKernel(Bf16* __restrict__ out, int64_t count,
                                  uint64_t seed, uint64_t stream) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = UniformBf16(seed, stream, static_cast<uint64_t>(i));
  }
}

// The exact-check matrices (bf16.h), element by element as on the host.
__global__ void FillExactCheckKernel(Bf16* __restrict__ out, int64_t count,
                                     uint64_t seed, uint64_t stream,
                                     int64_t k) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = ExactCheckBf16(seed, stream, static_cast<uint64_t>(i), k);
  }
}

// 64 x 64 output tile per CTA, 16 x 16 threads with 4 x 4 outputs each,
// K in steps of 16 through shared memory (rows padded by one word).
constexpr int kTile = 64;
constexpr int kTileK = 16;

__global__ void __launch_bounds__(kThreads)
    ReferenceKernel(const __nv_bfloat16* __restrict__ x,
                    const __nv_bfloat16* __restrict__ w,
                    float* __restrict__ ref, int64_t m, int64_t n, int64_t k,
                    int64_t n_begin) {
  __shared__ float xs[kTileK][kTile + 1];
  __shared__ float ws[kTileK][kTile + 1];
  const int tx = threadIdx.x % 16;
  const int ty = threadIdx.x / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = n_begin + static_cast<int64_t>(blockIdx.x) * kTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += kThreads) {
      const int row = i / kTileK;
      const int kk = i % kTileK;
      const int64_t gk = k0 + kk;
      const int64_t gm = m0 + row;
      const int64_t gn = n0 + row;
      xs[kk][row] = gm < m && gk < k ? __bfloat162float(x[gm * k + gk]) : 0.0f;
      ws[kk][row] = gn < n && gk < k ? __bfloat162float(w[gn * k + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk][ty + 16 * i];
        b[i] = ws[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t gm = m0 + ty + 16 * i;
      const int64_t gn = n0 + tx + 16 * j;
      if (gm < m && gn < n) ref[gm * n + gn] = acc[i][j];
    }
  }
}

struct CompareCounters {
  unsigned int max_abs_bits;  // bits of a non-negative float: ordered as uint
  unsigned int unused;
  unsigned long long mismatches;
  unsigned long long non_finite;
};
static_assert(sizeof(CompareCounters) <= kCompareScratchBytes);

__global__ void CompareKernel(const __nv_bfloat16* __restrict__ y,
                              const float* __restrict__ ref, int64_t count,
                              float atol, float rtol,
                              CompareCounters* __restrict__ counters) {
  float max_abs = 0.0f;
  unsigned long long mismatches = 0;
  unsigned long long non_finite = 0;
  const auto* bits = reinterpret_cast<const unsigned short*>(y);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if ((bits[i] & 0x7F80u) == 0x7F80u) {  // exponent all ones: Inf or NaN
      ++non_finite;
      continue;
    }
    const float r = ref[i];
    const float diff = fabsf(__bfloat162float(y[i]) - r);
    max_abs = fmaxf(max_abs, diff);
    if (diff > atol + rtol * fabsf(r)) ++mismatches;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    max_abs = fmaxf(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
    mismatches += __shfl_xor_sync(0xffffffffu, mismatches, offset);
    non_finite += __shfl_xor_sync(0xffffffffu, non_finite, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&counters->max_abs_bits, __float_as_uint(max_abs));
    if (mismatches != 0) atomicAdd(&counters->mismatches, mismatches);
    if (non_finite != 0) atomicAdd(&counters->non_finite, non_finite);
  }
}

unsigned GridFor(int64_t count) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((count + kThreads - 1) / kThreads, 1, 4096));
}

}  // namespace

void DeviceFillDenseInputs(const DenseShape& shape, void* x, void* w,
                           uint64_t seed, cudaStream_t stream) {
  const int64_t x_count = shape.m * shape.k;
  const int64_t w_count = shape.n * shape.k;
  LaunchKernel("FillUniformKernel(x)", dim3(GridFor(x_count)), dim3(kThreads),
               stream, &FillUniformKernel, static_cast<Bf16*>(x), x_count, seed,
               kStreamX);
  LaunchKernel("FillUniformKernel(W)", dim3(GridFor(w_count)), dim3(kThreads),
               stream, &FillUniformKernel, static_cast<Bf16*>(w), w_count, seed,
               kStreamW);
}

void DeviceFillExactCheckInputs(const DenseShape& shape, void* x, void* w,
                                uint64_t seed, cudaStream_t stream) {
  const int64_t x_count = shape.m * shape.k;
  const int64_t w_count = shape.n * shape.k;
  LaunchKernel("FillExactCheckKernel(x)", dim3(GridFor(x_count)),
               dim3(kThreads), stream, &FillExactCheckKernel,
               static_cast<Bf16*>(x), x_count, seed, kStreamExactX, shape.k);
  LaunchKernel("FillExactCheckKernel(W)", dim3(GridFor(w_count)),
               dim3(kThreads), stream, &FillExactCheckKernel,
               static_cast<Bf16*>(w), w_count, seed, kStreamExactW, shape.k);
}

void DeviceReferenceDense(const DenseShape& shape, const void* x, const void* w,
                          float* ref, cudaStream_t stream, int64_t n_begin,
                          int64_t n_end) {
  if (n_end < 0 || n_end > shape.n) n_end = shape.n;
  if (n_begin < 0) n_begin = 0;
  if (n_begin >= n_end) return;
  const dim3 grid(static_cast<unsigned>((n_end - n_begin + kTile - 1) / kTile),
                  static_cast<unsigned>((shape.m + kTile - 1) / kTile));
  // Tiles past n_end but below N write columns of the next range with the
  // same values that range computes: harmless, and only when n_end - n_begin
  // is not a multiple of kTile (DeviceReferenceColumns is).
  LaunchKernel("ReferenceKernel", grid, dim3(kThreads), stream,
               &ReferenceKernel, static_cast<const __nv_bfloat16*>(x),
               static_cast<const __nv_bfloat16*>(w), ref, shape.m, shape.n,
               shape.k, n_begin);
}

Comparison DeviceCompareWithReference(const void* y, const float* ref,
                                      int64_t count, double atol, double rtol,
                                      void* scratch, cudaStream_t stream) {
  auto* counters = static_cast<CompareCounters*>(scratch);
  CheckCuda(cudaMemsetAsync(counters, 0, sizeof(CompareCounters), stream),
            "cudaMemsetAsync");
  LaunchKernel("CompareKernel", dim3(GridFor(count)), dim3(kThreads), stream,
               &CompareKernel, static_cast<const __nv_bfloat16*>(y), ref, count,
               static_cast<float>(atol), static_cast<float>(rtol), counters);
  CompareCounters host{};
  CheckCuda(cudaMemcpyAsync(&host, counters, sizeof(host),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync");
  CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  Comparison result;
  float max_abs = 0;
  static_assert(sizeof(max_abs) == sizeof(host.max_abs_bits));
  std::memcpy(&max_abs, &host.max_abs_bits, sizeof(max_abs));
  result.max_abs_error = max_abs;
  result.mismatches = static_cast<int64_t>(host.mismatches);
  result.non_finite = static_cast<int64_t>(host.non_finite);
  return result;
}

int64_t DeviceReferenceColumns(const DenseShape& shape, double fmas) {
  const double per_column = static_cast<double>(shape.m) * shape.k;
  const double columns = std::max(fmas / std::max(per_column, 1.0), 1.0);
  const int64_t tiles = std::max<int64_t>(
      static_cast<int64_t>(std::min(columns, 1e15) / kTile), 1);
  return std::min(tiles * kTile, (shape.n + kTile - 1) / kTile * kTile);
}

}  // namespace gputune::kernels
