#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/execution_params.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/cuda/launch.cuh"

namespace gputune::kernels {
namespace {

constexpr int kVec = 8;               // bf16 per 16-byte load
constexpr int kWarpStep = 32 * kVec;  // K elements one warp step covers
constexpr int kMaxAccumulators = 32;  // m_tile * rows_per_warp, per lane
constexpr int kMaxWarps = 8;          // __launch_bounds__ below
constexpr int kMaxSplitK = 64;

__device__ __forceinline__ void Bf16x8ToFloat(const uint4& v, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// One warp step at K offset kk (this lane's 8 elements): acc[m][r] +=
// x[m, kk:kk+8] . w[r, kk:kk+8] for the m_count valid tokens.
template <int kMTile, int kRows>
__device__ __forceinline__ void Accumulate(const uint4 (&wv)[kRows],
                                           const __nv_bfloat16* x, int64_t k,
                                           int64_t kk, int m_count,
                                           float (&acc)[kMTile][kRows]) {
  float wf[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) Bf16x8ToFloat(wv[r], wf[r]);
#pragma unroll
  for (int mi = 0; mi < kMTile; ++mi) {
    if (mi < m_count) {
      float xf[8];
      Bf16x8ToFloat(__ldg(reinterpret_cast<const uint4*>(x + mi * k + kk)), xf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          acc[mi][r] = fmaf(xf[j], wf[r][j], acc[mi][r]);
        }
      }
    }
  }
}

// Grid: x = row blocks of warps*kRows rows, y = K chunks, z = token tiles.
// Writes bf16 y directly when partial is null, else fp32 partials
// partial[chunk][m][n].
template <int kMTile, int kRows>
__global__ void __launch_bounds__(kMaxWarps * 32)
    GemvSplitKKernel(const __nv_bfloat16* __restrict__ x,
                     const __nv_bfloat16* __restrict__ w,
                     __nv_bfloat16* __restrict__ y, float* __restrict__ partial,
                     int64_t m, int64_t n, int64_t k, int64_t k_chunk) {
  // Loads in flight per lane: kUnroll * kRows 16-byte vectors of W.
  constexpr int kUnroll = kRows >= 4 ? 1 : 4 / kRows;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) +
                        threadIdx.x / 32) *
                       kRows;
  if (row0 >= n) return;  // uniform per warp; no block-level barrier below
  const int64_t m0 = static_cast<int64_t>(blockIdx.z) * kMTile;
  const int m_count =
      static_cast<int>(min(static_cast<int64_t>(kMTile), m - m0));
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_chunk;
  const int64_t k_end = min(k, k_begin + k_chunk);
  const __nv_bfloat16* x_tile = x + m0 * k;

  // Rows past N re-read the last row; their sums are never stored.
  const __nv_bfloat16* w_rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) w_rows[r] = w + min(row0 + r, n - 1) * k;

  float acc[kMTile][kRows];
#pragma unroll
  for (int mi = 0; mi < kMTile; ++mi) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[mi][r] = 0.0f;
  }

  // k and k_chunk are multiples of 8, so kk < k_end means all 8 are in range.
  int64_t kk = k_begin + lane * kVec;
  for (; kk + (kUnroll - 1) * kWarpStep < k_end; kk += kUnroll * kWarpStep) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        wv[u][r] = __ldcs(
            reinterpret_cast<const uint4*>(w_rows[r] + kk + u * kWarpStep));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      Accumulate<kMTile, kRows>(wv[u], x_tile, k, kk + u * kWarpStep, m_count,
                                acc);
    }
  }
  for (; kk < k_end; kk += kWarpStep) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      wv[r] = __ldcs(reinterpret_cast<const uint4*>(w_rows[r] + kk));
    }
    Accumulate<kMTile, kRows>(wv, x_tile, k, kk, m_count, acc);
  }

#pragma unroll
  for (int mi = 0; mi < kMTile; ++mi) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        acc[mi][r] += __shfl_xor_sync(0xffffffffu, acc[mi][r], offset);
      }
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int mi = 0; mi < kMTile; ++mi) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (mi < m_count && row0 + r < n) {
        const int64_t index = (m0 + mi) * n + row0 + r;
        if (partial == nullptr) {
          y[index] = __float2bfloat16_rn(acc[mi][r]);
        } else {
          partial[static_cast<int64_t>(blockIdx.y) * m * n + index] =
              acc[mi][r];
        }
      }
    }
  }
}

// y[i] = bf16(sum over chunks of partial[chunk][i]), summed in chunk order.
__global__ void SplitKReduceKernel(const float* __restrict__ partial,
                                   __nv_bfloat16* __restrict__ y, int64_t count,
                                   int chunks) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) sum += partial[c * count + i];
    y[i] = __float2bfloat16_rn(sum);
  }
}

using KernelFn = void (*)(const __nv_bfloat16*, const __nv_bfloat16*,
                          __nv_bfloat16*, float*, int64_t, int64_t, int64_t,
                          int64_t);

template <int kMTile>
KernelFn KernelForRows(int rows) {
  switch (rows) {
    case 1:
      return &GemvSplitKKernel<kMTile, 1>;
    case 2:
      return &GemvSplitKKernel<kMTile, 2>;
    case 4:
      if constexpr (kMTile * 4 <= kMaxAccumulators) {
        return &GemvSplitKKernel<kMTile, 4>;
      }
      return nullptr;
    default:
      return nullptr;
  }
}

KernelFn KernelFor(int m_tile, int rows) {
  switch (m_tile) {
    case 1:
      return KernelForRows<1>(rows);
    case 2:
      return KernelForRows<2>(rows);
    case 4:
      return KernelForRows<4>(rows);
    case 8:
      return KernelForRows<8>(rows);
    case 16:
      return KernelForRows<16>(rows);
    default:
      return nullptr;
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// K chunk per CTA: a multiple of one warp step, so every chunk starts on a
// 512-byte boundary of its row.
int64_t KChunk(const GemvSplitKParams& params, const DenseShape& shape) {
  return SplitKChunkLength(shape.k, params.split_k, kWarpStep);
}

bool IsPowerOfTwoUpTo(int64_t value, int64_t max) {
  return value >= 1 && value <= max && (value & (value - 1)) == 0;
}

}  // namespace

int64_t SplitKChunkLength(int64_t k, int split_k, int64_t step) {
  return CeilDiv(CeilDiv(k, std::max(split_k, 1)), step) * step;
}

// Rounding each chunk up can leave the last ones empty (K=14336, split_k=16,
// 256-element steps: chunks of 1024, 14 of them): only these are launched
// and reduced.
int64_t SplitKChunks(int64_t k, int split_k, int64_t step) {
  return split_k <= 1 ? 1 : CeilDiv(k, SplitKChunkLength(k, split_k, step));
}

uint64_t SplitKPartialBytes(int split_k, const DenseShape& shape) {
  if (split_k <= 1) return 0;
  return static_cast<uint64_t>(split_k) * shape.m * shape.n * sizeof(float);
}

int64_t GemvSplitKChunks(const GemvSplitKParams& params,
                         const DenseShape& shape) {
  return SplitKChunks(shape.k, params.split_k, kWarpStep);
}

uint64_t GemvSplitKWorkspaceBytes(const GemvSplitKParams& params,
                                  const DenseShape& shape) {
  return SplitKPartialBytes(params.split_k, shape);
}

Execution ToExecution(const GemvSplitKParams& params, const DenseShape& shape) {
  Execution e;
  e.kernel = kGemvSplitKKernel;
  e.params = {{"rows_per_warp", params.rows_per_warp},
              {"warps", params.warps},
              {"split_k", params.split_k},
              {"m_tile", params.m_tile},
              {"vec", params.vec}};
  e.workspace_bytes = GemvSplitKWorkspaceBytes(params, shape);
  return e;
}

StatusOr<GemvSplitKParams> GemvSplitKParamsFromExecution(
    const Execution& execution, const DenseShape& shape) {
  if (execution.kernel != kGemvSplitKKernel) {
    return InvalidArgumentError("not a " + std::string(kGemvSplitKKernel) +
                                " execution: " + execution.kernel);
  }
  GPUTUNE_KERNELS_RETURN_IF_ERROR(OnlyKnownParams(
      execution, {"rows_per_warp", "warps", "split_k", "m_tile", "vec"}));
  int64_t rows, warps, split_k, m_tile, vec;
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "rows_per_warp", 1, 4, &rows));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "warps", 1, kMaxWarps, &warps));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "split_k", 1, kMaxSplitK, &split_k));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "m_tile", 1, 16, &m_tile));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "vec", kVec, kVec, &vec));
  if (!IsPowerOfTwoUpTo(rows, 4) || !IsPowerOfTwoUpTo(m_tile, 16) ||
      m_tile * rows > kMaxAccumulators) {
    return InvalidArgumentError(
        std::string(kGemvSplitKKernel) + ": no kernel for rows_per_warp=" +
        std::to_string(rows) + ", m_tile=" + std::to_string(m_tile) +
        " (powers of two, rows_per_warp <= 4, m_tile <= 16, product <= " +
        std::to_string(kMaxAccumulators) + ")");
  }
  if (shape.k % kVec != 0) {
    return InvalidArgumentError(std::string(kGemvSplitKKernel) +
                                ": needs K % 8 == 0 for 16-byte "
                                "loads, K=" +
                                std::to_string(shape.k));
  }
  if (CeilDiv(shape.m, m_tile) > 65535) {
    return InvalidArgumentError(
        std::string(kGemvSplitKKernel) + ": M=" + std::to_string(shape.m) +
        " needs more than 65535 token tiles of m_tile=" +
        std::to_string(m_tile));
  }
  GemvSplitKParams params;
  params.rows_per_warp = static_cast<int>(rows);
  params.warps = static_cast<int>(warps);
  params.split_k = static_cast<int>(split_k);
  params.m_tile = static_cast<int>(m_tile);
  params.vec = static_cast<int>(vec);
  return params;
}

std::vector<GemvSplitKParams> GemvSplitKCandidates(const DenseShape& shape,
                                                   int sm_count) {
  std::vector<GemvSplitKParams> out;
  if (shape.m < 1 || shape.m > kGemvSplitKMaxM || shape.k % kVec != 0) {
    return out;
  }
  // One CTA column per token tile: every token of the call shares each load
  // of W, so W is read from memory once.
  int m_tile = 1;
  while (m_tile < shape.m) m_tile *= 2;
  // Enough warps to cover latency: half of the 64 a multiprocessor can hold.
  const int64_t target_warps = static_cast<int64_t>(std::max(sm_count, 1)) * 32;
  // Each K chunk keeps at least 4 warp steps (1024 elements) so the second
  // pass and the partials stay small next to W.
  const int64_t max_split =
      std::clamp<int64_t>(shape.k / (4 * kWarpStep), 1, 16);
  auto add = [&](const GemvSplitKParams& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const int rows : {1, 2, 4}) {
    if (m_tile * rows > kMaxAccumulators) continue;
    // rows_per_warp = 4 only pays when few tokens share the registers.
    if (rows == 4 && m_tile > 4) continue;
    const int64_t warps_needed = CeilDiv(shape.n, rows);
    int64_t split = 1;
    while (split < max_split && warps_needed * split < target_warps) split *= 2;
    // As many as are not empty after KChunk's rounding.
    split = GemvSplitKChunks({.split_k = static_cast<int>(split)}, shape);
    add({.rows_per_warp = rows, .warps = 4, .split_k = 1, .m_tile = m_tile});
    if (split > 1) {
      add({.rows_per_warp = rows,
           .warps = 4,
           .split_k = static_cast<int>(split),
           .m_tile = m_tile});
    }
  }
  add({.rows_per_warp = 1, .warps = 8, .split_k = 1, .m_tile = m_tile});
  if (max_split >= 2 && GemvSplitKChunks({.split_k = 2}, shape) == 2) {
    add({.rows_per_warp = 2, .warps = 4, .split_k = 2, .m_tile = m_tile});
  }
  // Short K and many tokens leave few variants: smaller CTAs spread a small N
  // over more multiprocessors.
  if (out.size() < 4) {
    add({.rows_per_warp = 1, .warps = 2, .split_k = 1, .m_tile = m_tile});
  }
  return out;
}

void LaunchGemvSplitK(const GemvSplitKParams& params, const DenseShape& shape,
                      const void* x, const void* w, void* y, void* workspace,
                      cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    throw std::runtime_error(std::string(kGemvSplitKKernel) +
                             ": x and W must be 16-byte aligned");
  }
  const KernelFn kernel = KernelFor(params.m_tile, params.rows_per_warp);
  if (kernel == nullptr) {
    throw std::runtime_error(std::string(kGemvSplitKKernel) +
                             ": no kernel for these params");
  }
  const bool split = params.split_k > 1;
  // Empty chunks are neither launched nor reduced (an entry from before
  // candidates were trimmed may still ask for them).
  const int64_t chunks = GemvSplitKChunks(params, shape);
  if (split && workspace == nullptr) {
    throw std::runtime_error(std::string(kGemvSplitKKernel) +
                             ": split_k > 1 needs a workspace");
  }
  const int64_t rows_per_cta =
      static_cast<int64_t>(params.warps) * params.rows_per_warp;
  const dim3 grid(static_cast<unsigned>(CeilDiv(shape.n, rows_per_cta)),
                  static_cast<unsigned>(chunks),
                  static_cast<unsigned>(CeilDiv(shape.m, params.m_tile)));
  const dim3 block(static_cast<unsigned>(params.warps * 32));
  float* partial = split ? static_cast<float*>(workspace) : nullptr;
  LaunchKernel("GemvSplitKKernel", grid, block, stream, kernel,
               static_cast<const __nv_bfloat16*>(x),
               static_cast<const __nv_bfloat16*>(w),
               static_cast<__nv_bfloat16*>(y), partial, shape.m, shape.n,
               shape.k, KChunk(params, shape));
  if (split) {
    LaunchSplitKReduce(partial, y, shape.m * shape.n, static_cast<int>(chunks),
                       stream);
  }
}

void LaunchSplitKReduce(const float* partial, void* y, int64_t count,
                        int chunks, cudaStream_t stream) {
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>(CeilDiv(count, threads), 65535);
  LaunchKernel("SplitKReduceKernel", dim3(static_cast<unsigned>(blocks)),
               dim3(threads), stream, &SplitKReduceKernel, partial,
               static_cast<__nv_bfloat16*>(y), count, chunks);
}

}  // namespace gputune::kernels
