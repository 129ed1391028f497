// Status checks for CUDA runtime and cuBLASLt calls.
//
// Every call into CUDA or cuBLASLt in kernels/cuda goes through one of these,
// so a failure names the call and the library's own error string:
//
//   CheckCuda(cudaMalloc(&p, bytes), "cudaMalloc");
//   // throws std::runtime_error("cudaMalloc: out of memory")
#ifndef GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_
#define GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

namespace gputune::kernels {

// "<call>: <cudaGetErrorString(status)>".
std::string CudaErrorMessage(cudaError_t status, const char* call);
// "<call>: <cublasLtGetStatusString(status)>".
std::string CublasErrorMessage(cublasStatus_t status, const char* call);

// Throw std::runtime_error with the message above unless status is success.
void CheckCuda(cudaError_t status, const char* call);
void CheckCublas(cublasStatus_t status, const char* call);

// Checks a kernel launch (cudaGetLastError) and names the kernel.
void CheckLaunch(const char* kernel);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_
