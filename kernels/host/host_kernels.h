// The host (CPU) implementations of the dense bf16 op, one per kernel family.
// HostBackend benchmarks them; the client library runs the chosen one:
//
//   kernels::Status s = kernels::RunHostExecution(entry_execution, shape, x,
//                                                 w, y);
//
// Families and their parameters (all required, no others accepted, so an
// Execution names exactly one computation):
//   host.naive                      one fp32 accumulator per output (default)
//   host.unrolled   unroll          4, 8 or 16 independent fp32 accumulators
//                                   so the compiler vectorises the dot product
//   host.blocked    tile_m, tile_n  output tiles of [1, 64] x [1, 64]; K in
//                   tile_k          slices of [8, 4096] converted to fp32 once
//   host.threaded   threads, tile   n split into tiles of [1, 65536] columns
//                                   that [1, 256] threads take in turn
// Every family fixes each output's order of operations, so an Execution gives
// bit-identical results on every run (whatever thread computes an output) and
// on every machine running the same build (see Fingerprint::build).
#ifndef GPUTUNE_KERNELS_HOST_HOST_KERNELS_H_
#define GPUTUNE_KERNELS_HOST_HOST_KERNELS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// An Execution checked once, to run many times (the benchmark's reps, or a
// client's memoised choice). Immutable; Run may be called from any thread.
class HostKernel {
 public:
  // The kernel, or kInvalidArgument when exec is not a host family, or a
  // parameter is missing, unknown or out of range, or workspace_bytes is not
  // zero (host kernels need none).
  static StatusOr<HostKernel> Make(const Execution& exec);

  // y[m][n] = bf16(sum_k x[m][k] * w[n][k]) for row-major, densely packed
  // x[M][K], w[N][K], y[M][N] (bf16 bit patterns). kInvalidArgument when a
  // dimension of shape is below 1, kResourceExhausted when host.blocked's
  // tiles do not fit in memory, kInternal when host.threaded cannot start a
  // thread. When cancel is not null it is checked every 64 outputs (or K
  // slice), and once it is set Run returns CancelledStatus() (backend.h),
  // leaving y partly written.
  Status Run(const DenseShape& shape, const uint16_t* x, const uint16_t* w,
             uint16_t* y, const std::atomic<bool>* cancel = nullptr) const;

 private:
  enum class Family { kNaive, kUnrolled, kBlocked, kThreaded };
  HostKernel() = default;
  Status RunFamily(const DenseShape& shape, const uint16_t* x,
                   const uint16_t* w, uint16_t* y,
                   const std::atomic<bool>* cancel) const;

  Family family_ = Family::kNaive;
  int64_t p0_ = 0;  // unroll | tile_m | threads
  int64_t p1_ = 0;  // tile_n | tile
  int64_t p2_ = 0;  // tile_k
};

// HostKernel::Make(exec) and Run(shape, x, w, y), with their errors.
Status RunHostExecution(const Execution& exec, const DenseShape& shape,
                        const uint16_t* x, const uint16_t* w, uint16_t* y);

// OK when HostKernel::Make accepts exec, else its error.
Status ValidateHostExecution(const Execution& exec);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_HOST_HOST_KERNELS_H_
