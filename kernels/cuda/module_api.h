// The CUDA backend as a module (libgputune_cuda.so) that gputuned loads with
// dlopen only when it benchmarks on a GPU.
//
// Linking cuBLASLt and the CUDA runtime into gputuned itself costs ~150 MiB
// of resident memory at start (relocating libcublasLt), in every daemon,
// including those that serve the cache with the host backend or none. The
// module keeps that cost to the processes that use a GPU.
//
// This header needs no CUDA headers: gputuned includes it without the
// toolkit. The module and gputuned are built together; kCudaModuleAbi guards
// against loading a module from another build of the structs below.
#ifndef GPUTUNE_KERNELS_CUDA_MODULE_API_H_
#define GPUTUNE_KERNELS_CUDA_MODULE_API_H_

#include <cstdint>
#include <string>

#include "kernels/backend.h"

namespace gputune::kernels {

inline constexpr int kCudaModuleAbi = 2;

// The CudaBackendOptions the daemon sets (see cuda_backend.h), passed
// through as they are.
struct CudaModuleOptions {
  std::string device;
  int heuristic_candidates = 0;
  uint64_t workspace_limit_bytes = 0;
  double reference_limit_seconds = 60;
};

// The module's two entry points (extern "C", looked up with dlsym).
inline constexpr char kCudaModuleAbiSymbol[] = "gputune_cuda_module_abi";
inline constexpr char kCudaModuleOpenSymbol[] = "gputune_cuda_module_open";
using CudaModuleAbiFn = int (*)();
// Opens the device: a new Backend (the caller owns it), or null with *error
// naming the CUDA failure.
using CudaModuleOpenFn = Backend* (*)(const CudaModuleOptions* options,
                                      std::string* error);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_MODULE_API_H_
