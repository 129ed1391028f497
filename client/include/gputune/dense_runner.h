// gputune::DenseRunner: runs a tuned dense_bf16 execution in the caller's
// process, on the caller's CUDA stream and device pointers.
//
//   auto runner = gputune::DenseRunner::Create();      // current device
//   auto r = client->Lookup(key);                      // memo hit: no I/O
//   gputune::DenseArgs args{.m = 1, .n = 6144, .k = 4096,
//                           .x = x, .w = w, .y = y, .stream = stream};
//   absl::StatusOr<gputune::DenseRun> run =
//       (*runner)->Run(r.ok() ? r->entry().execution() :
//       gputune::v1::Execution(),
//                      args);
//   if (run.ok() && run->fell_back) LOG_ONCE(run->reason);
//
// The execution is checked here before it runs: a cuBLASLt execution is
// rebuilt from its params and checked with cublasLtMatmulAlgoCheck, one of
// gputune's own kernels has its params and the pointers' alignment checked,
// and the workspace must be large enough. When it cannot run (unknown kernel,
// bad params, the algo check refuses it, too little workspace or alignment,
// the launch is refused) the default runs instead, cuBLASLt's first
// heuristic choice, and the result says why. Plans are cached per shape and
// execution: repeated calls do no cuBLASLt queries and no allocation.
//
// Built when libgputune is built with CUDA: this header and
// libgputune_dense.so (CMake target gputune::dense). The C API's
// gputune_dense_* load that library on first use.
//
// Not thread-safe: one runner per thread (or a lock around it).
#ifndef GPUTUNE_DENSE_RUNNER_H_
#define GPUTUNE_DENSE_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gputune/v1/tune.pb.h"

// cudaStream_t is CUstream_st*: a cudaStream_t converts without a cast, and
// this header needs no CUDA headers.
struct CUstream_st;

namespace gputune {

// y[M,N] = x[M,K] * W[N,K]^T, row-major bf16 device pointers on the runner's
// device.
struct DenseArgs {
  int64_t m = 0;  // tokens
  int64_t n = 0;  // output features
  int64_t k = 0;  // input features
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  CUstream_st* stream = nullptr;  // null: the legacy default stream
  void* workspace = nullptr;      // may be null when workspace_bytes is 0
  size_t workspace_bytes = 0;
};

// What ran.
struct DenseRun {
  // The execution could not run here and the default ran instead.
  bool fell_back = false;
  // Why it fell back (empty otherwise).
  std::string reason;
};

class DenseRunner {
 public:
  // Binds to the device current on the calling thread. FAILED_PRECONDITION
  // naming the CUDA or cuBLASLt call when there is no usable device.
  static absl::StatusOr<std::unique_ptr<DenseRunner>> Create();
  ~DenseRunner();
  DenseRunner(const DenseRunner&) = delete;
  DenseRunner& operator=(const DenseRunner&) = delete;

  // Enqueues the execution (an entry's, e.g. LookupResult::entry()
  // .execution()), or the default when its kernel is empty (no entry), on
  // args.stream. The runner's device must be current. OK means something was
  // enqueued; an error (INVALID_ARGUMENT for a bad shape, FAILED_PRECONDITION
  // when neither the execution nor the default can run) means nothing was.
  absl::StatusOr<DenseRun> Run(const v1::Execution& execution,
                               const DenseArgs& args);

  // The device ordinal the runner is bound to.
  int device() const;

  class Impl;

 private:
  explicit DenseRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gputune

#endif  // GPUTUNE_DENSE_RUNNER_H_
