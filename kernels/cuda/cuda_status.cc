#include "kernels/cuda/cuda_status.h"

#include <stdexcept>
#include <string>

namespace gputune::kernels {

std::string CudaErrorMessage(cudaError_t status, const char* call) {
  return std::string(call) + ": " + cudaGetErrorString(status);
}

std::string CublasErrorMessage(cublasStatus_t status, const char* call) {
  return std::string(call) + ": " + cublasLtGetStatusString(status);
}

void CheckCuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    // Handled here, so it must not linger for someone else's check.
    ClearLastErrorIf(status);
    throw std::runtime_error(CudaErrorMessage(status, call));
  }
}

void CheckCublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(CublasErrorMessage(status, call));
  }
}

void CheckLaunch(cudaError_t launch_status, const char* kernel) {
  if (launch_status == cudaSuccess) return;
  ClearLastErrorIf(launch_status);
  throw std::runtime_error(std::string("launch of ") + kernel + ": " +
                           cudaGetErrorString(launch_status));
}

void ClearLastErrorIf(cudaError_t expected) {
  if (expected != cudaSuccess && cudaPeekAtLastError() == expected) {
    (void)cudaGetLastError();
  }
}

}  // namespace gputune::kernels
