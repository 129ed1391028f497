// libgputune_cuda.so: see module_api.h.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/module_api.h"

extern "C" {

__attribute__((visibility("default"))) int gputune_cuda_module_abi() {
  return gputune::kernels::kCudaModuleAbi;
}

__attribute__((visibility("default"))) gputune::kernels::Backend*
gputune_cuda_module_open(const gputune::kernels::CudaModuleOptions* options,
                         std::string* error) {
  gputune::kernels::CudaBackendOptions backend_options;
  backend_options.device = options->device;
  backend_options.heuristic_candidates = options->heuristic_candidates;
  backend_options.workspace_limit_bytes = options->workspace_limit_bytes;
  backend_options.reference_limit_seconds = options->reference_limit_seconds;
  return gputune::kernels::CudaBackend::Create(backend_options, error)
      .release();
}

}  // extern "C"
