// gputune.gemv_splitk: gputune's own kernel for decode shapes (M <= 16).
//
// Decode is memory-bound: W (N x K bf16) is read once per call while x is a
// handful of rows, so the kernel streams W with 16-byte loads (8 bf16 per
// lane, coalesced across the warp, several loads in flight per lane) and keeps
// x in L1. Each warp owns rows_per_warp rows of W (output features) for m_tile
// tokens, accumulates in fp32 registers and reduces across lanes with warp
// shuffles. With split_k > 1, K is cut into split_k chunks computed by
// separate CTAs; each writes fp32 partials to the workspace and a second pass
// sums them in a fixed order and converts to bf16. The second pass (not
// atomics) keeps the output bit-for-bit deterministic, so a client replaying
// an execution gets exactly the bytes the daemon validated.
#ifndef GPUTUNE_KERNELS_CUDA_GEMV_SPLITK_H_
#define GPUTUNE_KERNELS_CUDA_GEMV_SPLITK_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// Execution::kernel of this family.
inline constexpr char kGemvSplitKKernel[] = "gputune.gemv_splitk";

// Decode shapes this family is offered for.
inline constexpr int64_t kGemvSplitKMaxM = 16;

struct GemvSplitKParams {
  int rows_per_warp = 1;  // output rows of W per warp: 1, 2 or 4
  int warps = 4;          // warps per CTA, 1..8: a CTA owns warps*rows rows
  int split_k = 1;        // K chunks computed by separate CTAs, 1..64
  int m_tile = 1;         // tokens per CTA: 1, 2, 4, 8 or 16
  int vec = 8;            // bf16 per load; only 8 (16-byte loads) exists
  friend bool operator==(const GemvSplitKParams&,
                         const GemvSplitKParams&) = default;
};

// K chunks a launch computes and reduces: split_k less the chunks that
// rounding each up to a 256-element warp step leaves empty (K=14336 with
// split_k=16 has 14); 1 without split-K. Candidates always have
// split_k == GemvSplitKChunks.
int64_t GemvSplitKChunks(const GemvSplitKParams& params,
                         const DenseShape& shape);

// fp32 partials for split_k > 1 (split_k * M * N * 4 bytes), else 0.
uint64_t GemvSplitKWorkspaceBytes(const GemvSplitKParams& params,
                                  const DenseShape& shape);

// Execution{kGemvSplitKKernel, {rows_per_warp, warps, split_k, m_tile, vec},
// GemvSplitKWorkspaceBytes(params, shape)}.
Execution ToExecution(const GemvSplitKParams& params, const DenseShape& shape);

// The inverse of ToExecution, checked against the shape. kInvalidArgument
// (naming the param, or K when K % 8 != 0) when the execution is not this
// family or cannot run on the shape. Any M is accepted: m_tile decides how
// many CTAs share a row of W.
StatusOr<GemvSplitKParams> GemvSplitKParamsFromExecution(
    const Execution& execution, const DenseShape& shape);

// A few parameterisations worth measuring for the shape on a device with
// sm_count multiprocessors, distinct and valid; empty unless
// shape.m <= kGemvSplitKMaxM and shape.k % 8 == 0.
std::vector<GemvSplitKParams> GemvSplitKCandidates(const DenseShape& shape,
                                                   int sm_count);

// Enqueues y = x * W^T on the stream. x and w must be 16-byte aligned device
// pointers, workspace must hold GemvSplitKWorkspaceBytes (may be null when
// that is 0). params must have passed GemvSplitKParamsFromExecution for the
// shape. Throws std::runtime_error on a misaligned pointer or a failed launch.
void LaunchGemvSplitK(const GemvSplitKParams& params, const DenseShape& shape,
                      const void* x, const void* w, void* y, void* workspace,
                      cudaStream_t stream);

// The split-K arithmetic both own families share: K split into split_k
// chunks, each rounded up to a multiple of `step` elements, of which
// SplitKChunks are not empty (1 without split-K); and the bytes of their fp32
// partials (split_k * M * N * 4, 0 without split-K).
int64_t SplitKChunkLength(int64_t k, int split_k, int64_t step);
int64_t SplitKChunks(int64_t k, int split_k, int64_t step);
uint64_t SplitKPartialBytes(int split_k, const DenseShape& shape);

// Enqueues y[i] = bf16(sum over c < chunks of partial[c * count + i]),
// summed in chunk order in fp32: the second pass of a split-K (this family's
// and mma_skinny.h's). Throws std::runtime_error on a failed launch.
void LaunchSplitKReduce(const float* partial, void* y, int64_t count,
                        int chunks, cudaStream_t stream);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_GEMV_SPLITK_H_
