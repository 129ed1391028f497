// What this copy of the CUDA kernels was compiled with, for the fingerprint:
// code built for other architectures is other code.
#ifndef GPUTUNE_KERNELS_CUDA_BUILD_INFO_H_
#define GPUTUNE_KERNELS_CUDA_BUILD_INFO_H_

#include <string>

namespace gputune::kernels {

// "nvcc 13.0, archs 800,900": the compiler and the architectures embedded.
std::string CudaBuildInfo();

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_BUILD_INFO_H_
