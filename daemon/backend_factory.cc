#include "daemon/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "kernels/host/fault_backend.h"
#include "kernels/host/host_backend.h"
#if defined(GPUTUNE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace gputune {
namespace {

// Opens the CUDA device; null with *error naming the CUDA failure.
std::unique_ptr<kernels::Backend> OpenCuda(const Config& config,
                                           std::string* error) {
#if defined(GPUTUNE_HAVE_CUDA)
  kernels::CudaBackendOptions options;
  options.device = config.device;
  options.heuristic_candidates = config.cublaslt_candidates;
  options.workspace_limit_bytes = config.workspace_bytes;
  return kernels::CudaBackend::Create(options, error);
#else
  (void)config;
  *error = "this gputuned was built without CUDA (GPUTUNE_CUDA=OFF)";
  return nullptr;
#endif
}

}  // namespace

BackendChoice MakeBackend(const Config& config) {
  BackendChoice choice;
  choice.name = config.backend;
  if (config.backend == "none") {
    choice.error = "started with --backend=none (serving the cache only)";
  } else if (config.backend == "host") {
    choice.backend = std::make_unique<kernels::HostBackend>();
  } else if (config.backend == "fault") {
    std::vector<kernels::Execution> candidates =
        kernels::FaultBackend::DefaultCandidates();
    if (!config.fault_candidates.empty()) {
      candidates = kernels::FaultBackend::ParseCandidates(
          config.fault_candidates, &choice.error);
    }
    if (!candidates.empty()) {
      choice.backend = std::make_unique<kernels::FaultBackend>(candidates);
    }
  } else if (config.backend == "cuda") {
    std::string error;
    choice.backend = OpenCuda(config, &error);
    if (!choice.backend) {
      choice.error = absl::StrCat(
          "the CUDA backend is unavailable: ", error,
          " (check nvidia-smi and the device permissions, or start with "
          "--backend=host)");
    }
  } else {  // auto
    std::string error;
    choice.backend = OpenCuda(config, &error);
    if (choice.backend) {
      choice.name = "cuda";
    } else {
      choice.name = "host";
      choice.warning = absl::StrCat("no usable CUDA device (", error,
                                    "): benchmarking on the host CPU instead");
      choice.backend = std::make_unique<kernels::HostBackend>();
    }
  }
  return choice;
}

}  // namespace gputune
