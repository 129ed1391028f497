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
    throw std::runtime_error(CudaErrorMessage(status, call));
  }
}

void CheckCublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(CublasErrorMessage(status, call));
  }
}

void CheckLaunch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("launch of ") + kernel + ": " +
                             cudaGetErrorString(status));
  }
}

}  // namespace gputune::kernels
