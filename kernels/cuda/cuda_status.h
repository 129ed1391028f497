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
// CheckCuda also clears the failed call's own error from the runtime's last
// error (ClearLastErrorIf), so that a handled failure (a cudaMalloc that ran
// out of memory) does not fail an unrelated later check.
void CheckCuda(cudaError_t status, const char* call);
void CheckCublas(cublasStatus_t status, const char* call);

// Checks a kernel launch by its own result (the value cudaLaunchKernelEx
// returned, see launch.cuh), never by cudaGetLastError: the runtime's last
// error may be an earlier, unrelated one (a handled cudaMalloc failure, or in
// a client process the application's own pending error), which is neither
// ours to report nor ours to clear. On failure the launch's own error, which
// the runtime also recorded as the last error, is cleared (when it is still
// the last error) so that it cannot fail someone else's next check, and
// std::runtime_error("launch of <kernel>: <error string>") is thrown. On
// success nothing is touched.
void CheckLaunch(cudaError_t launch_status, const char* kernel);

// Clears the last error when it is `expected` and leaves any other alone:
// for a status a call returned that is not a failure here (cudaEventQuery's
// cudaErrorNotReady), which the runtime records as the last error all the
// same (PyTorch's CUDAEvent::query clears it for this reason).
void ClearLastErrorIf(cudaError_t expected);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_
