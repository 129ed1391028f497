// gputune.mma_skinny: a bf16 skinny GEMM on tensor cores for decode shapes
// (M = 1..16 tokens), y[M,N] = x[M,K] * W[N,K]^T with fp32 accumulation.
//
// The split-K GEMV (gemv_splitk.h) spends ~120-230 instructions per 512 B of
// weights at M = 8-16 (one FMA per weight and token): issue-bound, not
// memory-bound. Here each warp computes 16 output features x 8 (or 16)
// tokens per mma.sync.m16n8k16 (fp32 accumulate), with the weights as the A
// operand (16 rows of W) and the tokens as B (x^T), so one instruction
// consumes 256 weights for all tokens at once.
//
// Loads are 16 bytes wide. Since a dot product does not depend on the order
// of its K terms, each lane loads 16 consecutive K elements of its W rows and
// of its token's x row per 64-element K step, and the four mma steps of that
// K step use the same permutation of K for A and B (mma_skinny.cu derives
// it), so no shuffle or shared memory is needed. A warp owns row_tiles tiles
// of 16 rows and reuses its x fragments (registers) for all of them; with
// k_unroll K steps loaded before any mma, a lane has row_tiles * 4 *
// k_unroll 16-byte W loads in flight. split_k > 1 splits K over CTAs (for
// N = 4096, where N / 16 / row_tiles warps cannot fill the device) and adds
// the fp32 partials in a second pass, in chunk order.
//
// Needs compute capability 8.0 (bf16 mma.sync); compiled for sm_80 and sm_90
// in the normal build. K % 64 == 0 and 16-byte aligned x and W. Accumulates
// in fp32 throughout, so it passes the exact check like any correct kernel.
#ifndef GPUTUNE_KERNELS_CUDA_MMA_SKINNY_H_
#define GPUTUNE_KERNELS_CUDA_MMA_SKINNY_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// Execution::kernel of this family.
inline constexpr char kMmaSkinnyKernel[] = "gputune.mma_skinny";

// Decode shapes this family is offered for.
inline constexpr int64_t kMmaSkinnyMaxM = 16;

struct MmaSkinnyParams {
  int row_tiles = 2;  // tiles of 16 output rows per warp: 1, 2 or 4
  int warps = 4;      // warps per CTA: 1, 2, 4 or 8
  int split_k = 1;    // K chunks computed by separate CTAs, 1..64
  int k_unroll = 1;   // 64-element K steps loaded before the mmas: 1 or 2
  friend bool operator==(const MmaSkinnyParams&,
                         const MmaSkinnyParams&) = default;
};

// K chunks a launch computes and reduces: split_k less the chunks that
// rounding each up to 64 * k_unroll elements leaves empty; 1 without
// split-K. Candidates always have split_k == MmaSkinnyChunks.
int64_t MmaSkinnyChunks(const MmaSkinnyParams& params, const DenseShape& shape);

// fp32 partials for split_k > 1 (split_k * M * N * 4 bytes), else 0.
uint64_t MmaSkinnyWorkspaceBytes(const MmaSkinnyParams& params,
                                 const DenseShape& shape);

// Execution{kMmaSkinnyKernel, {row_tiles, warps, split_k, k_unroll},
// MmaSkinnyWorkspaceBytes(params, shape)}.
Execution ToExecution(const MmaSkinnyParams& params, const DenseShape& shape);

// The inverse of ToExecution, checked against the shape. kInvalidArgument
// (naming the param, or M or K) when the execution is not this family or
// cannot run on the shape (M > 16, K % 64 != 0).
StatusOr<MmaSkinnyParams> MmaSkinnyParamsFromExecution(
    const Execution& execution, const DenseShape& shape);

// A few parameterisations worth measuring for the shape on a device with
// sm_count multiprocessors of compute capability major.minor, distinct and
// valid; empty unless M <= 16, K % 64 == 0 and the device has bf16
// mma.sync (compute capability >= 8.0).
std::vector<MmaSkinnyParams> MmaSkinnyCandidates(const DenseShape& shape,
                                                 int sm_count, int cc_major);

// Enqueues y = x * W^T on the stream. x and w must be 16-byte aligned device
// pointers, workspace must hold MmaSkinnyWorkspaceBytes (may be null when
// that is 0). params must have passed MmaSkinnyParamsFromExecution for the
// shape, and the device must have compute capability >= 8.0 (DensePlan checks
// it once; a kernel run below 8.0 traps). Throws std::runtime_error on a
// misaligned pointer or a failed launch.
void LaunchMmaSkinny(const MmaSkinnyParams& params, const DenseShape& shape,
                     const void* x, const void* w, void* y, void* workspace,
                     cudaStream_t stream);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_MMA_SKINNY_H_
