// Helpers for the GPU suite: skipping without a device, copying device
// buffers back, and a backend every test can create the same way.
#ifndef GPUTUNE_TESTS_GPU_GPU_TEST_SUPPORT_H_
#define GPUTUNE_TESTS_GPU_GPU_TEST_SUPPORT_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/status.h"
#include "tests/support/catch.h"

namespace gputune::kernels::testing {

// True when the CUDA runtime sees at least one device.
inline bool HasCudaDevice() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) cudaGetLastError();  // not sticky; clear it
  return status == cudaSuccess && count > 0;
}

// Every GPU test starts with this: without a device it says so in the run's
// output and passes.
#define GPUTUNE_SKIP_WITHOUT_GPU()                       \
  do {                                                   \
    if (!::gputune::kernels::testing::HasCudaDevice()) { \
      WARN("skipped: no CUDA device");                   \
      return;                                            \
    }                                                    \
  } while (0)

// The value of a call that must succeed; otherwise the test case fails with
// the status's message.
template <typename T>
T Must(StatusOr<T> result) {
  INFO(result.status().message());
  REQUIRE(result.ok());
  return std::move(*result);
}

inline std::unique_ptr<CudaBackend> MakeBackend(
    CudaBackendOptions options = {}) {
  return Must(CudaBackend::Create(options));
}

// The first count elements of a device array, copied to the host.
template <typename T>
std::vector<T> CopyToHost(const void* device, int64_t count) {
  std::vector<T> host(static_cast<size_t>(count));
  CheckCuda(cudaMemcpy(host.data(), device, host.size() * sizeof(T),
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy");
  return host;
}

inline std::string ShapeName(const DenseShape& s) {
  return "M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) +
         " K=" + std::to_string(s.k);
}

}  // namespace gputune::kernels::testing

#endif  // GPUTUNE_TESTS_GPU_GPU_TEST_SUPPORT_H_
