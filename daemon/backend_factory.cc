#include "daemon/backend_factory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "kernels/cuda/module_api.h"
#include "kernels/host/fault_backend.h"
#include "kernels/host/host_backend.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

// Where libgputune_cuda.so may be, in order: beside the binary as installed
// and as bench/gpu/carry.sh lays it out (../lib/gputune), then the build
// tree; $GPUTUNE_CUDA_MODULE alone when set. Empty for a build without CUDA.
std::vector<std::string> CudaModulePaths() {
  std::vector<std::string> paths;
#if defined(GPUTUNE_CUDA_MODULE_BUILT)
  if (const char* env = getenv("GPUTUNE_CUDA_MODULE"); env && *env) {
    return {env};  // the operator's choice, alone
  }
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* dir : {GPUTUNE_CUDA_MODULE_RELDIR, "../lib/gputune"}) {
      paths.push_back(
          (exe.parent_path() / dir / "libgputune_cuda.so").lexically_normal());
    }
  }
  paths.push_back(GPUTUNE_CUDA_MODULE_BUILT);
#endif
  return paths;
}

// Loads the CUDA module and opens the device; null with *error naming what
// failed. The module stays loaded (the CUDA runtime is not meant to be
// unloaded).
std::unique_ptr<kernels::Backend> OpenCuda(const Config& config,
                                           std::string* error) {
  const std::vector<std::string> paths = CudaModulePaths();
  if (paths.empty()) {
    *error = "this gputuned was built without CUDA (GPUTUNE_CUDA=OFF)";
    return nullptr;
  }
  void* module = nullptr;
  std::string path;
  std::vector<std::string> failures;
  for (const std::string& candidate : paths) {
    if (!std::filesystem::exists(candidate)) continue;
    module = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module) {
      path = candidate;
      break;
    }
    failures.push_back(dlerror());
  }
  if (!module) {
    *error = failures.empty() ? absl::StrCat(
                                    "the CUDA module libgputune_cuda.so is not "
                                    "installed (looked in ",
                                    absl::StrJoin(paths, ", "), ")")
                              : absl::StrCat("cannot load the CUDA module: ",
                                             absl::StrJoin(failures, "; "));
    return nullptr;
  }
  auto abi = reinterpret_cast<kernels::CudaModuleAbiFn>(
      dlsym(module, kernels::kCudaModuleAbiSymbol));
  auto open = reinterpret_cast<kernels::CudaModuleOpenFn>(
      dlsym(module, kernels::kCudaModuleOpenSymbol));
  if (!abi || !open || abi() != kernels::kCudaModuleAbi) {
    *error = absl::StrCat(path,
                          " is not the CUDA module of this gputuned (another "
                          "build or version?)");
    return nullptr;
  }
  spdlog::info("loaded the CUDA backend module {}", path);
  kernels::CudaModuleOptions options;
  options.device = config.device;
  options.heuristic_candidates = config.cublaslt_candidates;
  options.workspace_limit_bytes = config.workspace_bytes;
  // The shape's two fp32 references may take half the job's time; a shape
  // whose references would take longer is refused up front, saying so.
  options.reference_limit_seconds =
      absl::ToDoubleSeconds(config.job_timeout) / 2;
  kernels::Backend* backend = nullptr;
  char message[kernels::kCudaModuleMessageBytes] = "";
  const int code = open(&options, &backend, message, sizeof(message));
  if (code != static_cast<int>(kernels::StatusCode::kOk) ||
      backend == nullptr) {
    *error = message[0] != '\0'
                 ? std::string(message)
                 : absl::StrCat("the CUDA module's open call failed (code ",
                                code, ")");
    return nullptr;
  }
  return std::unique_ptr<kernels::Backend>(backend);
}

// Whether this machine can have a CUDA device at all: the NVIDIA driver's
// control node. Checked before loading the module for --backend=auto, so a
// daemon on a machine without a GPU does not load ~150 MiB of CUDA
// libraries to find out.
bool NvidiaDriverPresent(std::string* error) {
  if (access("/dev/nvidiactl", F_OK) == 0) return true;
  *error = "no NVIDIA driver: /dev/nvidiactl does not exist";
  return false;
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
    kernels::StatusOr<std::vector<kernels::Execution>> candidates =
        kernels::FaultBackend::DefaultCandidates();
    if (!config.fault_candidates.empty()) {
      candidates =
          kernels::FaultBackend::ParseCandidates(config.fault_candidates);
    }
    if (candidates.ok()) {
      choice.backend =
          std::make_unique<kernels::FaultBackend>(std::move(*candidates));
    } else {
      choice.error = candidates.status().message();
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
    if (NvidiaDriverPresent(&error)) choice.backend = OpenCuda(config, &error);
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
