#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/execution_params.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_skinny.h"

namespace gputune::kernels {
namespace {

constexpr int kKStep = 64;  // K elements per lane-load step (4 mma k16)
constexpr int kRowsPerTile = 16;
constexpr int kMaxWarps = 8;  // __launch_bounds__ below
constexpr int kMaxSplitK = 64;

// The K permutation. mma.sync.m16n8k16 (bf16) gives lane (g = lane / 4,
// t = lane % 4) these fragments of one k16 step (PTX ISA, "Matrix Fragments
// for mma.m16n8k16"):
//   A (16 x 16, row-major): rows g and g + 8, columns 2t, 2t+1, 2t+8, 2t+9,
//     in registers a0 = (g, 2t..2t+1), a1 = (g+8, 2t..2t+1),
//     a2 = (g, 2t+8..2t+9), a3 = (g+8, 2t+8..2t+9);
//   B (16 x 8, column-major): column g, rows 2t, 2t+1 (b0) and 2t+8, 2t+9
//     (b1);
//   C/D (16 x 8, fp32): rows g (c0, c1) and g + 8 (c2, c3), columns 2t and
//     2t + 1.
// Any bijection between the 64 logical (step s, column c) pairs of a K step
// and its 64 physical K offsets gives the same dot products, provided A and
// B use the same one. With physical(s, c) = 16 * t(c) + 4 * s + 2 * (c / 8)
// + c % 2, t(c) = (c % 8) / 2, lane (g, t) needs exactly the 16 consecutive
// elements [16t, 16t + 16) of its W rows (A) and of its token's x row (B):
// two 16-byte loads each, and for step s the 32-bit words 2s (a0/a1, b0) and
// 2s + 1 (a2/a3, b1) of them.
struct Frag16 {  // 16 consecutive bf16: words 0..7
  uint4 lo;
  uint4 hi;
  __device__ __forceinline__ uint32_t Word(int i) const {
    const uint4& v = i < 4 ? lo : hi;
    switch (i & 3) {
      case 0:
        return v.x;
      case 1:
        return v.y;
      case 2:
        return v.z;
      default:
        return v.w;
    }
  }
};

__device__ __forceinline__ void Mma16816(float (&d)[4], uint32_t a0,
                                         uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  // Never launched below 8.0 (MmaSkinnyCandidates, LaunchMmaSkinny); a
  // kernel that somehow runs there fails loudly instead of computing zeros.
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
  __trap();
#endif
}

__device__ __forceinline__ Frag16 LoadStreaming(const __nv_bfloat16* p) {
  // W is read once per call: evict-first, so it does not push x out of L2.
  const auto* v = reinterpret_cast<const uint4*>(p);
  return {__ldcs(v), __ldcs(v + 1)};
}

__device__ __forceinline__ Frag16 LoadCached(const __nv_bfloat16* p) {
  // x is re-read by every warp: through the read-only path.
  const auto* v = reinterpret_cast<const uint4*>(p);
  return {__ldg(v), __ldg(v + 1)};
}

// Grid: x = row blocks of warps * 16 * kRowTiles rows, y = K chunks.
// kNTiles = 1 for M <= 8 (tokens 0..7), 2 for M <= 16. Writes bf16 y
// directly when partial is null, else fp32 partials partial[chunk][m][n].
template <int kRowTiles, int kUnroll, int kNTiles>
__global__ void __launch_bounds__(kMaxWarps * 32)
    MmaSkinnyKernel(const __nv_bfloat16* __restrict__ x,
                    const __nv_bfloat16* __restrict__ w,
                    __nv_bfloat16* __restrict__ y, float* __restrict__ partial,
                    int64_t m, int64_t n, int64_t k, int64_t k_chunk) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) +
                      threadIdx.x / 32) *
                     (kRowsPerTile * kRowTiles);
  if (n0 >= n) return;  // uniform per warp; no block-level barrier below
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_chunk;
  const int64_t k_end = min(k, k_begin + k_chunk);

  // This lane's W rows (g and g + 8 of each tile; rows past N re-read the
  // last row, their sums are never stored) and token rows, at its 16-element
  // slice of every K step.
  const __nv_bfloat16* w_rows[kRowTiles][2];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min(n0 + kRowsPerTile * r + g + 8 * h, n - 1);
      w_rows[r][h] = w + row * k + 16 * t;
    }
  }
  const __nv_bfloat16* x_rows[kNTiles];
  bool x_valid[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int64_t token = 8 * j + g;
    x_valid[j] = token < m;
    x_rows[j] = x + (x_valid[j] ? token : 0) * k + 16 * t;
  }

  float acc[kRowTiles][kNTiles][4];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][j][i] = 0.0f;
    }
  }

  // k, k_begin and k_chunk are multiples of 64: a K step is wholly inside
  // the chunk or wholly past it.
  for (int64_t kb = k_begin; kb < k_end; kb += kUnroll * kKStep) {
    // Every load of this iteration first (row_tiles * 4 * k_unroll 16-byte
    // W loads in flight per lane), then the mmas.
    Frag16 wf[kUnroll][kRowTiles][2];
    Frag16 xf[kUnroll][kNTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = kb + u * kKStep;
      const bool in = kk < k_end;
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wf[u][r][h] = in ? LoadStreaming(w_rows[r][h] + kk) : Frag16{};
        }
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        xf[u][j] = in && x_valid[j] ? LoadCached(x_rows[j] + kk) : Frag16{};
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (kb + u * kKStep >= k_end) break;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
          const uint32_t a0 = wf[u][r][0].Word(2 * s);
          const uint32_t a1 = wf[u][r][1].Word(2 * s);
          const uint32_t a2 = wf[u][r][0].Word(2 * s + 1);
          const uint32_t a3 = wf[u][r][1].Word(2 * s + 1);
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            Mma16816(acc[r][j], a0, a1, a2, a3, xf[u][j].Word(2 * s),
                     xf[u][j].Word(2 * s + 1));
          }
        }
      }
    }
  }

  // D: rows g (acc 0, 1) and g + 8 (acc 2, 3) of the tile, tokens 2t and
  // 2t + 1 of the token tile.
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = n0 + kRowsPerTile * r + g + 8 * (i / 2);
        const int64_t token = 8 * j + 2 * t + (i % 2);
        if (row >= n || token >= m) continue;
        const int64_t index = token * n + row;
        if (partial == nullptr) {
          y[index] = __float2bfloat16_rn(acc[r][j][i]);
        } else {
          partial[static_cast<int64_t>(blockIdx.y) * m * n + index] =
              acc[r][j][i];
        }
      }
    }
  }
}

using KernelFn = void (*)(const __nv_bfloat16*, const __nv_bfloat16*,
                          __nv_bfloat16*, float*, int64_t, int64_t, int64_t,
                          int64_t);

template <int kRowTiles, int kUnroll>
KernelFn KernelForTokens(int64_t m) {
  return m <= 8 ? &MmaSkinnyKernel<kRowTiles, kUnroll, 1>
                : &MmaSkinnyKernel<kRowTiles, kUnroll, 2>;
}

template <int kRowTiles>
KernelFn KernelForUnroll(int k_unroll, int64_t m) {
  switch (k_unroll) {
    case 1:
      return KernelForTokens<kRowTiles, 1>(m);
    case 2:
      return KernelForTokens<kRowTiles, 2>(m);
    default:
      return nullptr;
  }
}

KernelFn KernelFor(const MmaSkinnyParams& p, int64_t m) {
  switch (p.row_tiles) {
    case 1:
      return KernelForUnroll<1>(p.k_unroll, m);
    case 2:
      return KernelForUnroll<2>(p.k_unroll, m);
    case 4:
      return KernelForUnroll<4>(p.k_unroll, m);
    default:
      return nullptr;
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// K chunk per CTA: a multiple of one iteration (64 * k_unroll elements).
int64_t KChunk(const MmaSkinnyParams& params, const DenseShape& shape) {
  return SplitKChunkLength(shape.k, params.split_k,
                           static_cast<int64_t>(kKStep) * params.k_unroll);
}

bool IsPowerOfTwoUpTo(int64_t value, int64_t max) {
  return value >= 1 && value <= max && (value & (value - 1)) == 0;
}

}  // namespace

int64_t MmaSkinnyChunks(const MmaSkinnyParams& params,
                        const DenseShape& shape) {
  return SplitKChunks(shape.k, params.split_k,
                      static_cast<int64_t>(kKStep) * params.k_unroll);
}

uint64_t MmaSkinnyWorkspaceBytes(const MmaSkinnyParams& params,
                                 const DenseShape& shape) {
  return SplitKPartialBytes(params.split_k, shape);
}

Execution ToExecution(const MmaSkinnyParams& params, const DenseShape& shape) {
  Execution e;
  e.kernel = kMmaSkinnyKernel;
  e.params = {{"row_tiles", params.row_tiles},
              {"warps", params.warps},
              {"split_k", params.split_k},
              {"k_unroll", params.k_unroll}};
  e.workspace_bytes = MmaSkinnyWorkspaceBytes(params, shape);
  return e;
}

StatusOr<MmaSkinnyParams> MmaSkinnyParamsFromExecution(
    const Execution& execution, const DenseShape& shape) {
  const std::string name = kMmaSkinnyKernel;
  if (execution.kernel != kMmaSkinnyKernel) {
    return InvalidArgumentError("not a " + name +
                                " execution: " + execution.kernel);
  }
  GPUTUNE_KERNELS_RETURN_IF_ERROR(OnlyKnownParams(
      execution, {"row_tiles", "warps", "split_k", "k_unroll"}));
  int64_t row_tiles, warps, split_k, k_unroll;
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "row_tiles", 1, 4, &row_tiles));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "warps", 1, kMaxWarps, &warps));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "split_k", 1, kMaxSplitK, &split_k));
  GPUTUNE_KERNELS_RETURN_IF_ERROR(
      ReadParam(execution, "k_unroll", 1, 2, &k_unroll));
  if (!IsPowerOfTwoUpTo(row_tiles, 4) || !IsPowerOfTwoUpTo(warps, kMaxWarps)) {
    return InvalidArgumentError(
        name + ": no kernel for row_tiles=" + std::to_string(row_tiles) +
        ", warps=" + std::to_string(warps) + " (powers of two, up to 4 and " +
        std::to_string(kMaxWarps) + ")");
  }
  if (shape.m < 1 || shape.m > kMmaSkinnyMaxM) {
    return InvalidArgumentError(name + ": M must be 1.." +
                                std::to_string(kMmaSkinnyMaxM) +
                                ", M=" + std::to_string(shape.m));
  }
  if (shape.k % kKStep != 0) {
    return InvalidArgumentError(
        name + ": needs K % 64 == 0, K=" + std::to_string(shape.k));
  }
  MmaSkinnyParams params;
  params.row_tiles = static_cast<int>(row_tiles);
  params.warps = static_cast<int>(warps);
  params.split_k = static_cast<int>(split_k);
  params.k_unroll = static_cast<int>(k_unroll);
  return params;
}

std::vector<MmaSkinnyParams> MmaSkinnyCandidates(const DenseShape& shape,
                                                 int sm_count, int cc_major) {
  std::vector<MmaSkinnyParams> out;
  if (cc_major < 8 || shape.m < 1 || shape.m > kMmaSkinnyMaxM ||
      shape.k % kKStep != 0) {
    return out;
  }
  // Each warp keeps row_tiles * 4 * k_unroll 16-byte loads in flight, so
  // fewer warps than the GEMV's cover latency: 16 a multiprocessor.
  const int64_t target_warps = static_cast<int64_t>(std::max(sm_count, 1)) * 16;
  // Each K chunk keeps at least 4 K steps (256 elements).
  const int64_t max_split = std::clamp<int64_t>(shape.k / (4 * kKStep), 1, 16);
  auto add = [&](MmaSkinnyParams p) {
    // As many chunks as are not empty after rounding.
    p.split_k = static_cast<int>(MmaSkinnyChunks(p, shape));
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const int row_tiles : {1, 2, 4}) {
    const int64_t warps_needed = CeilDiv(shape.n, kRowsPerTile * row_tiles);
    int64_t split = 1;
    while (split < max_split && warps_needed * split < target_warps) split *= 2;
    for (const int k_unroll : {1, 2}) {
      // Two K steps in flight only where one leaves few loads (one tile).
      if (k_unroll == 2 && row_tiles == 4) continue;
      add({.row_tiles = row_tiles,
           .warps = 4,
           .split_k = static_cast<int>(split),
           .k_unroll = k_unroll});
    }
    if (split > 1) {
      add({.row_tiles = row_tiles, .warps = 4, .split_k = 1, .k_unroll = 1});
    }
  }
  return out;
}

void LaunchMmaSkinny(const MmaSkinnyParams& params, const DenseShape& shape,
                     const void* x, const void* w, void* y, void* workspace,
                     cudaStream_t stream) {
  const std::string name = kMmaSkinnyKernel;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    throw std::runtime_error(name + ": x and W must be 16-byte aligned");
  }
  const KernelFn kernel = KernelFor(params, shape.m);
  if (kernel == nullptr) {
    throw std::runtime_error(name + ": no kernel for these params");
  }
  const bool split = params.split_k > 1;
  if (split && workspace == nullptr) {
    throw std::runtime_error(name + ": split_k > 1 needs a workspace");
  }
  const int64_t chunks = MmaSkinnyChunks(params, shape);
  const int64_t rows_per_cta =
      static_cast<int64_t>(params.warps) * kRowsPerTile * params.row_tiles;
  const dim3 grid(static_cast<unsigned>(CeilDiv(shape.n, rows_per_cta)),
                  static_cast<unsigned>(chunks));
  const dim3 block(static_cast<unsigned>(params.warps * 32));
  float* partial = split ? static_cast<float*>(workspace) : nullptr;
  LaunchKernel("MmaSkinnyKernel", grid, block, stream, kernel,
               static_cast<const __nv_bfloat16*>(x),
               static_cast<const __nv_bfloat16*>(w),
               static_cast<__nv_bfloat16*>(y), partial, shape.m, shape.n,
               shape.k, KChunk(params, shape));
  if (split) {
    LaunchSplitKReduce(partial, y, shape.m * shape.n, static_cast<int>(chunks),
                       stream);
  }
}

}  // namespace gputune::kernels
