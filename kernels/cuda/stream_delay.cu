#include <cstdint>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/stream_delay.h"

namespace gputune::kernels {
namespace {

__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void DelayKernel(uint64_t nanoseconds) {
  const uint64_t start = GlobalTimer();
  while (GlobalTimer() - start < nanoseconds) __nanosleep(1000);
}

}  // namespace

void DelayStream(cudaStream_t stream, uint64_t nanoseconds) {
  LaunchKernel("DelayKernel", dim3(1), dim3(1), stream, &DelayKernel,
               nanoseconds);
}

}  // namespace gputune::kernels
