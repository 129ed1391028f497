// libgputune_cuda.so: see module_api.h.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/module_api.h"
#include "kernels/status.h"

namespace {

// Copies text into the caller's buffer, cut to fit; allocates nothing, so it
// is safe in a handler for std::bad_alloc.
void CopyMessage(const char* text, char* message, size_t message_size) {
  if (message == nullptr || message_size == 0) return;
  std::snprintf(message, message_size, "%s", text);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int gputune_cuda_module_abi() {
  return gputune::kernels::kCudaModuleAbi;
}

__attribute__((visibility("default"))) int gputune_cuda_module_open(
    const gputune::kernels::CudaModuleOptions* options,
    gputune::kernels::Backend** backend, char* message,
    size_t message_size) noexcept {
  using gputune::kernels::StatusCode;
  *backend = nullptr;
  CopyMessage("", message, message_size);
  // CudaBackend::Create converts what the CUDA side throws; this catches what
  // is left (copying the options, the status's own strings) so that nothing
  // escapes into gputuned.
  try {
    gputune::kernels::CudaBackendOptions backend_options;
    backend_options.device = options->device;
    backend_options.heuristic_candidates = options->heuristic_candidates;
    backend_options.workspace_limit_bytes = options->workspace_limit_bytes;
    backend_options.reference_limit_seconds = options->reference_limit_seconds;
    auto opened = gputune::kernels::CudaBackend::Create(backend_options);
    if (opened.ok()) {
      *backend = opened->release();
      return static_cast<int>(StatusCode::kOk);
    }
    CopyMessage(opened.status().message().c_str(), message, message_size);
    return static_cast<int>(opened.status().code());
  } catch (const std::bad_alloc& e) {
    CopyMessage(e.what(), message, message_size);
    return static_cast<int>(StatusCode::kResourceExhausted);
  } catch (const std::exception& e) {
    CopyMessage(e.what(), message, message_size);
    return static_cast<int>(StatusCode::kInternal);
  } catch (...) {
    CopyMessage("unknown exception opening the CUDA backend", message,
                message_size);
    return static_cast<int>(StatusCode::kInternal);
  }
}

}  // extern "C"
