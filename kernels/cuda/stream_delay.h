// Holding a stream back while the host enqueues a timed run.
//
// A decode kernel can finish faster than the host can launch the next one, so
// timing back-to-back launches would measure the host. TimeSample therefore
// enqueues DelayStream first, then the start event and all reps, while the
// GPU waits; when the delay ends the reps run back to back.
#ifndef GPUTUNE_KERNELS_CUDA_STREAM_DELAY_H_
#define GPUTUNE_KERNELS_CUDA_STREAM_DELAY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gputune::kernels {

// Enqueues a one-thread kernel that spins for `nanoseconds` of device time
// (%globaltimer). Throws std::runtime_error on a failed launch.
void DelayStream(cudaStream_t stream, uint64_t nanoseconds);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_STREAM_DELAY_H_
