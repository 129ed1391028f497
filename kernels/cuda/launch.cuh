// Kernel launches that report their own result (cuda_status.h, CheckLaunch).
//
//   LaunchKernel("GemvSplitKKernel", grid, block, stream, &Kernel, a, b);
//
// A <<<>>> launch returns nothing, so its failure can only be read back
// through cudaGetLastError, which also returns (and clears) whatever error an
// earlier, unrelated call left. cudaLaunchKernelEx returns the launch's own
// status. Include from .cu files only.
#ifndef GPUTUNE_KERNELS_CUDA_LAUNCH_CUH_
#define GPUTUNE_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace gputune::kernels {

// Enqueues kernel<<<grid, block, 0, stream>>>(args...); throws
// std::runtime_error naming `name` when the launch is refused.
template <typename... Params, typename... Args>
void LaunchKernel(const char* name, dim3 grid, dim3 block, cudaStream_t stream,
                  void (*kernel)(Params...), Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = nullptr;
  config.numAttrs = 0;
  CheckLaunch(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...),
              name);
}

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_LAUNCH_CUH_
