// The dense bf16 problem (y[M,N] = x[M,K] * W[N,K]^T, bf16 in and out, fp32
// accumulation) and the description of one way to compute it.
//
// This library is used by the daemon (to benchmark) and by the client (to run
// what was measured). It depends on the C++ standard library alone (and CUDA
// for kernels/cuda), so it builds on machines without gRPC or Abseil.
#ifndef GPUTUNE_KERNELS_DENSE_H_
#define GPUTUNE_KERNELS_DENSE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gputune::kernels {

// Bumped whenever a candidate's code or the candidate list changes, so entries
// measured with other kernels go STALE (it is part of the fingerprint).
inline constexpr char kKernelVersion[] = "1";

// Problem size. All three are >= 1.
struct DenseShape {
  int64_t m = 0;  // tokens
  int64_t n = 0;  // output features
  int64_t k = 0;  // input features
};

// One way to compute the problem: a kernel family and its parameters, complete
// enough to run exactly what was measured. Mirrors gputune.v1.Execution.
struct Execution {
  std::string kernel;  // e.g. "host.blocked", "cublaslt"
  // Family-specific, by name. Values fit in int32 (gputune.v1.Execution).
  std::map<std::string, int64_t> params;
  uint64_t workspace_bytes = 0;

  // "kernel(a=1,b=2)" for logs and tables, with " workspace_bytes=N" appended
  // when workspace_bytes is not zero. ParseExecution reads it back.
  std::string ToString() const;
  friend bool operator==(const Execution&, const Execution&) = default;
};

// The inverse of Execution::ToString. Also accepts a bare kernel name ("k" for
// "k()") and spaces around tokens. Returns nullopt on a syntax error, a
// duplicate parameter or a value that does not fit int64.
std::optional<Execution> ParseExecution(std::string_view text);

// The device and software a measurement was taken on. Mirrors
// gputune.v1.Fingerprint.
struct Fingerprint {
  std::string backend;  // "host" or "cuda"
  std::string device_name;
  std::string device_uuid;
  std::string compute_capability;
  uint32_t processor_count = 0;
  uint64_t memory_bytes = 0;
  std::string driver_version;
  std::string runtime_version;
  std::string cublaslt_version;
  std::string kernel_version;
  std::string build;
  friend bool operator==(const Fingerprint&, const Fingerprint&) = default;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_DENSE_H_
