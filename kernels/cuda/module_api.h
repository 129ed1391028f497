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
//
// No C++ exception crosses the boundary: the open call returns a status code
// and message (below), and the Backend it hands out returns Status values
// from every method (kernels/backend.h), converting at each method whatever
// the CUDA runtime, cuBLASLt or the standard library threw inside the module.
#ifndef GPUTUNE_KERNELS_CUDA_MODULE_API_H_
#define GPUTUNE_KERNELS_CUDA_MODULE_API_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/backend.h"

namespace gputune::kernels {

inline constexpr int kCudaModuleAbi = 3;

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
// Opens the device. Returns a StatusCode (kernels/status.h) as an int: 0
// (kOk) with *backend set to a new Backend the caller owns; otherwise
// *backend is null and `message` (message_size bytes, at least 1) holds why,
// NUL-terminated and cut to fit, naming the CUDA call that failed. Never
// throws.
using CudaModuleOpenFn = int (*)(const CudaModuleOptions* options,
                                 Backend** backend, char* message,
                                 size_t message_size);
// Room for the open call's message: CUDA's error strings are short.
inline constexpr size_t kCudaModuleMessageBytes = 1024;

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_MODULE_API_H_
