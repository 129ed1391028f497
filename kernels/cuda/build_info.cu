#include <string>

#include "kernels/cuda/build_info.h"

namespace gputune::kernels {

#define GPUTUNE_STR2(...) #__VA_ARGS__
#define GPUTUNE_STR(...) GPUTUNE_STR2(__VA_ARGS__)

std::string CudaBuildInfo() {
  std::string info = "nvcc " GPUTUNE_STR(__CUDACC_VER_MAJOR__) "." GPUTUNE_STR(
      __CUDACC_VER_MINOR__);
#if defined(__CUDA_ARCH_LIST__)
  info += ", archs " GPUTUNE_STR(__CUDA_ARCH_LIST__);
#endif
  return info;
}

#undef GPUTUNE_STR
#undef GPUTUNE_STR2

}  // namespace gputune::kernels
