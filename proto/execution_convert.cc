#include "execution_convert.h"

namespace gputune {

v1::Execution ToProto(const kernels::Execution& exec) {
  v1::Execution out;
  out.set_kernel(exec.kernel);
  for (const auto& [name, value] : exec.params) {
    // Kernel parameters are small integers (ids, tile sizes, factors).
    (*out.mutable_params())[name] = static_cast<int32_t>(value);
  }
  out.set_workspace_bytes(exec.workspace_bytes);
  return out;
}

kernels::Execution FromProto(const v1::Execution& exec) {
  kernels::Execution out;
  out.kernel = exec.kernel();
  for (const auto& [name, value] : exec.params()) out.params[name] = value;
  out.workspace_bytes = exec.workspace_bytes();
  return out;
}

v1::Fingerprint ToProto(const kernels::Fingerprint& fp) {
  v1::Fingerprint out;
  out.set_backend(fp.backend);
  out.set_device_name(fp.device_name);
  out.set_device_uuid(fp.device_uuid);
  out.set_compute_capability(fp.compute_capability);
  out.set_processor_count(fp.processor_count);
  out.set_memory_bytes(fp.memory_bytes);
  out.set_driver_version(fp.driver_version);
  out.set_runtime_version(fp.runtime_version);
  out.set_cublaslt_version(fp.cublaslt_version);
  out.set_kernel_version(fp.kernel_version);
  out.set_build(fp.build);
  return out;
}

kernels::DenseShape ShapeOf(const v1::DenseBf16Key& key) {
  return kernels::DenseShape{key.tokens(), key.output_features(),
                             key.input_features()};
}

}  // namespace gputune
