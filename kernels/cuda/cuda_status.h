// Status checks for CUDA runtime and cuBLASLt calls.
//
// Every call into CUDA or cuBLASLt in kernels/cuda goes through one of these,
// so a failure names the call and the library's own error string:
//
//   CheckCuda(cudaMalloc(&p, bytes), "cudaMalloc");
//   // throws std::runtime_error("cudaMalloc: out of memory")
//
// Inside kernels/cuda the device work reports errors by throwing: one CUDA
// call in three can fail, and the throw keeps each a single line. Nothing
// thrown leaves the library: every entry point that other folders call
// (CudaBackend's Backend methods and Create, DenseRunner) catches it and
// returns a Status instead (GuardedStatus below), which is also what keeps
// exceptions inside the dlopen'ed module (module_api.h).
#ifndef GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_
#define GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/status.h"

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

// Thrown inside kernels/cuda to carry a status that is not a CUDA error (a
// cancellation: CancelledStatus()) to the entry point that converts it.
class StatusException : public std::runtime_error {
 public:
  explicit StatusException(Status status)
      : std::runtime_error(status.message()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// body()'s value, or the status of what it threw: a StatusException's own,
// kResourceExhausted for std::bad_alloc (a host allocation), kInternal with
// the message for anything else (a CUDA or cuBLASLt error from CheckCuda,
// CheckCublas, CheckLaunch; an execution that cannot run).
template <typename Body>
auto GuardedStatus(Body&& body) -> StatusOr<decltype(body())> {
  try {
    return body();
  } catch (const StatusException& e) {
    return e.status();
  } catch (const std::bad_alloc& e) {
    return ResourceExhaustedError(e.what());
  } catch (...) {
    return InternalError(CurrentExceptionMessage());
  }
}

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_CUDA_STATUS_H_
