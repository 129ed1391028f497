// Leaving L2 clean and cold before a timed sample (CudaBackend::TimeSample).
//
// A memset of a buffer larger than L2 evicts what was there but leaves up to
// an L2's worth of dirty lines of its own, which the next timed kernel pays
// for: every line it brings in may first write a dirty one back to HBM. A
// read-only sweep of a buffer of twice the L2 evicts everything (dirty lines
// are written back during the sweep, before the timed region) and leaves
// only clean lines of the sweep buffer, which the timed kernel never reads.
#ifndef GPUTUNE_KERNELS_CUDA_L2_SCRUB_H_
#define GPUTUNE_KERNELS_CUDA_L2_SCRUB_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gputune::kernels {

// Enqueues a kernel that reads every 16 bytes of buf[0, bytes) with ordinary
// (L2-allocating) loads and writes nothing unless the data XORs to a value a
// buffer of one repeated byte (zero, or what a memset scrub left) cannot
// give; sink (4 bytes of device memory) is where it would write, so the
// compiler keeps the loads. bytes is rounded down to a
// multiple of 16; buf must be 16-byte aligned. Throws std::runtime_error on a
// failed launch.
void L2ReadSweep(const void* buf, uint64_t bytes, unsigned* sink, int sm_count,
                 cudaStream_t stream);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_L2_SCRUB_H_
