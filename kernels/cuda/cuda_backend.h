// CudaBackend: the Backend (kernels/backend.h) for one CUDA device.
//
//   StatusOr<std::unique_ptr<CudaBackend>> backend =
//       CudaBackend::Create({.device = "0"});
//   if (!backend.ok()) { /* status: "cudaGetDeviceCount: ..." */ }
//   Fingerprint fp = (*backend)->GetFingerprint();
//   TuneReport r = TuneDense(**backend, shape, options);
//
// Candidates for a shape: cuBLASLt's default (what it runs untuned), the
// heuristic's top algos rebuilt from their configs, then for decode shapes
// (M <= 16) parameterisations of gputune's own split-K GEMV (gemv_splitk.h)
// and tensor-core skinny kernel (mma_skinny.h), alternating. Each is an
// Execution complete enough to replay with DenseRunner in another process.
//
// Timing: every sample is preceded by an L2 scrub and a device-side delay, both
// outside the timed region. The scrub (l2_scrub.h) reads a scratch buffer of
// twice the L2 size, so nothing an earlier candidate, sample or input fill
// left in L2 survives into the sample, and nothing it leaves is dirty (a
// memset would leave up to an L2 of dirty lines, written back inside the
// timed region): gputune's GEMV streams W with evict-first loads, which leave
// normal-priority lines in place, so without the scrub about a third of a
// 4096 x 4096 W (32 MiB, in a 50-60 MiB L2) would hit in L2 and the GEMV
// would look 10-25 % faster than in a model. Within a sample, each rep reads
// its own copy of x and W from a rotation of input sets whose combined size
// exceeds twice the L2, so every rep reads weights from HBM as a real model
// does, where the other layers' weights evicted them. The delay lets the host
// enqueue all reps while the GPU waits, so they run back to back without
// launch gaps (stream_delay.h); it is sized from this candidate's own enqueue
// rate, and a sample whose delay ended before the last launch was enqueued
// (it may hold gaps) is taken again with a delay sized from what the enqueue
// took, and discarded with an error when even the longest delay was short.
// L2Scrub::kNone and kWrite (the bench's A/B) skip the scrub or make it a
// memset, to measure L2 hits and write-back apart.
//
// Candidates: the default is Execution{kCublasLtDefaultKernel, {}, W}:
// cuBLASLt's first heuristic result for W bytes of workspace (W: what #0
// needs within the limit) as the heuristic returns it, exactly what
// DenseRunner runs for an entry that keeps it. Every heuristic algo,
// including #0, is also rebuilt from its config, as a client replaying an
// entry rebuilds it, compared with the heuristic's byte for byte
// (heuristic_rebuilds()), and offered as a candidate of its own unless it is
// the default's algo or a duplicate. What is left out or differs (a rebuild
// that fails or changes bytes, a workspace over the limit, a duplicate, a #0
// for W bytes that is not the #0 for the limit) is said in
// CandidateNotes(), which the entry and the log carry.
//
// Shapes: Prepare computes the fp32 reference twice (uniform and exact-check
// inputs) in launches of about 2^32 multiply-adds, stops between them when the
// job is cancelled (SetCancel), and refuses a shape whose references would
// take longer than reference_limit_seconds, extrapolated from the first
// launch, saying how long they would take.
//
// Thread safety: not thread-safe (Backend's contract); any one thread at a
// time may call it, and each call makes the backend's device current on that
// thread.
#ifndef GPUTUNE_KERNELS_CUDA_CUDA_BACKEND_H_
#define GPUTUNE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cublaslt_dense.h"
#include "kernels/cuda/dense_plan.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// The NVIDIA driver's build ("580.65.06") from the text of
// /proc/driver/nvidia/version; empty when the text has none.
std::string NvidiaDriverBuild(const std::string& proc_version);

// Arguments of one launch of a dense kernel.
struct DenseLaunch {
  DenseShape shape;
  const void* x = nullptr;  // [M,K] bf16, row-major
  const void* w = nullptr;  // [N,K] bf16, row-major
  void* y = nullptr;        // [M,N] bf16, row-major
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

// A kernel family supplied by the caller instead of built in: the test suite
// injects a deliberately wrong one to prove validation rejects it.
struct ExtraKernel {
  std::string name;  // Execution::kernel; must not clash with a built-in
  // Enqueues the kernel; throws std::exception when it cannot run.
  std::function<void(const DenseLaunch&)> launch;
};

// How TimeSample leaves L2 before a sample.
enum class L2Scrub {
  kNone,   // as the last candidate left it: L2 hits possible (A/B only)
  kRead,   // a read-only sweep of 2 x L2: cold and clean (the default)
  kWrite,  // a memset of 2 x L2: cold but dirty, write-back costs (A/B only)
};

struct CudaBackendOptions {
  // Device ordinal ("0") or UUID as nvidia-smi prints it ("GPU-8f3c...",
  // case-insensitive, the "GPU-" prefix optional).
  std::string device = "0";
  // How many cuBLASLt heuristic results to ask for.
  int heuristic_candidates = kDefaultHeuristicCandidates;
  // The most workspace any candidate may use; allocated once.
  uint64_t workspace_limit_bytes = 32ull << 20;
  // Appended after the built-in candidates, one Execution (no params) each.
  // Empty in production.
  std::vector<ExtraKernel> extra_kernels;
  // How L2 is scrubbed before every timed sample (see above). Only kRead
  // measures as a model runs; the others are for the A/B.
  L2Scrub scrub = L2Scrub::kRead;
  // Rotate inputs through copies of 2 x L2 in all (see above). false: one
  // input set, for a run that checks kernels rather than times them (the
  // memcheck test), where hundreds of fills of a small shape cost minutes.
  bool rotate_inputs = true;
  // The longest both fp32 references of a shape may take together (see
  // above); gputuned passes half its job timeout.
  double reference_limit_seconds = 60;
};

// How one heuristic algo of the last Candidates() call came back from its
// config (CudaBackend::heuristic_rebuilds).
struct HeuristicRebuild {
  int index = 0;           // position in cuBLASLt's heuristic list
  bool rebuilt = false;    // BuildAlgo succeeded
  bool identical = false;  // the rebuilt algo's bytes equal the heuristic's
  std::string error;       // why the rebuild failed
  cublasLtMatmulAlgo_t heuristic{};
  cublasLtMatmulAlgo_t rebuilt_algo{};
};

// The buffers of one prepared shape. Set 0 is what RunAndCompare runs on and
// what the accessors return; TimeSample rotates through all sets.
class CudaWorkload final : public Workload {
 public:
  ~CudaWorkload() override;

  const DenseShape& shape() const { return shape_; }
  const void* x() const { return sets_[0].x; }
  const void* w() const { return sets_[0].w; }
  // The output of the last RunAndCompare.
  const void* y() const { return sets_[0].y; }
  // [M,N] fp32 reference for set 0.
  const float* reference() const {
    return static_cast<const float*>(reference_.get());
  }
  // Input sets TimeSample rotates through.
  int rotation_sets() const { return static_cast<int>(sets_.size()); }
  // The exact-check inputs and their (exact) reference.
  const void* exact_x() const { return exact_.x; }
  const void* exact_w() const { return exact_.w; }
  const float* exact_reference() const {
    return static_cast<const float*>(exact_reference_.get());
  }

 private:
  friend class CudaBackend;
  struct Set {
    void* x;
    void* w;
    void* y;
  };
  CudaWorkload() = default;

  int device_ = 0;
  DenseShape shape_;
  DeviceBuffer pool_;  // every set's x, W and y
  DeviceBuffer reference_;
  DeviceBuffer compare_scratch_;
  DeviceBuffer exact_pool_;  // the exact check's x and W
  DeviceBuffer exact_reference_;
  Set exact_{};  // y is set 0's
  std::vector<Set> sets_;
  size_t next_set_ = 0;
};

class CudaBackend final : public Backend {
 public:
  // Opens the device, creates the stream, the cuBLASLt handle, the workspace
  // and timing events. Fails when there is no usable device, naming the
  // failing call and CUDA's error string (e.g. "cudaGetDeviceCount: no
  // CUDA-capable device is detected") or the device option that matched
  // nothing. Never throws.
  static StatusOr<std::unique_ptr<CudaBackend>> Create(
      const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Backend. No method throws (these are called across the module's dlopen
  // boundary, module_api.h): each returns kInternal naming the CUDA or
  // cuBLASLt call and its error string on a device error or when an
  // execution cannot run (unknown kernel, bad params, algo check),
  // kResourceExhausted when host memory runs out, CancelledStatus() when the
  // job was cancelled (SetCancel).
  std::string Name() const override { return "cuda"; }
  Fingerprint GetFingerprint() const override { return fingerprint_; }
  std::string PciBusId() const override { return pci_bus_id_; }
  StatusOr<std::vector<Execution>> Candidates(const DenseShape& shape,
                                              int max_candidates) override;
  StatusOr<std::unique_ptr<Workload>> Prepare(const DenseShape& shape,
                                              uint64_t seed) override;
  StatusOr<Comparison> RunAndCompare(Workload& workload, const Execution& exec,
                                     double atol, double rtol) override;
  StatusOr<Comparison> RunAndCompareExact(Workload& workload,
                                          const Execution& exec) override;
  // A cuBLASLt split-K that does not reduce in the fp32 compute type rounds
  // its splitk partials to bf16; everything else accumulates in fp32.
  int Bf16Partials(const Execution& exec) const override;
  std::vector<std::string> CandidateNotes() const override { return notes_; }
  StatusOr<double> TimeSample(Workload& workload, const Execution& exec,
                              int reps) override;
  // kUnavailable with the sticky error of the device's context
  // (cudaDeviceSynchronize), if any.
  Status DeviceStatus() override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // Every heuristic result of the last Candidates() call and its rebuild.
  const std::vector<HeuristicRebuild>& heuristic_rebuilds() const {
    return rebuilds_;
  }
  void set_scrub(L2Scrub scrub) { options_.scrub = scrub; }
  L2Scrub scrub() const { return options_.scrub; }
  void SetCancel(const std::atomic<bool>* cancel) override { cancel_ = cancel; }
  int sm_count() const { return sm_count_; }
  int cc_major() const { return cc_major_; }
  uint64_t l2_bytes() const { return l2_bytes_; }

 private:
  CudaBackend() = default;
  // Opens the device; throws std::runtime_error.
  void Open(const CudaBackendOptions& options);
  // The Backend methods' work, which reports errors by throwing (CheckCuda,
  // ThrowIfCancelled); the methods return what it throws as a status
  // (GuardedStatus, cuda_status.h).
  std::vector<Execution> CandidatesOrThrow(const DenseShape& shape,
                                           int max_candidates);
  std::unique_ptr<Workload> PrepareOrThrow(const DenseShape& shape,
                                           uint64_t seed);
  Comparison RunAndCompareOrThrow(Workload& workload, const Execution& exec,
                                  double atol, double rtol);
  Comparison RunAndCompareExactOrThrow(Workload& workload,
                                       const Execution& exec);
  double TimeSampleOrThrow(Workload& workload, const Execution& exec, int reps);
  // Makes the device current on the calling thread.
  void Activate() const;
  // The cuBLASLt descriptors of the shape, rebuilt (and the plan cache
  // cleared) when the shape changes.
  void UseShape(const DenseShape& shape);
  // An execution resolved once, launched many times: exactly one is set.
  struct Launcher {
    const ExtraKernel* extra = nullptr;
    const DensePlan* plan = nullptr;
  };
  // Throws std::runtime_error when exec cannot run here.
  Launcher Resolve(const Execution& exec);
  // Enqueues one run on one input set; throws when it cannot run.
  void Launch(const Launcher& launcher, const DenseShape& shape,
              const CudaWorkload::Set& set);
  // Throws StatusException(CancelledStatus()) when the job's cancel flag is
  // set.
  void ThrowIfCancelled() const;
  // Both references of a prepared workload, in launches, within
  // reference_limit_seconds (see above); throws.
  void ComputeReferences(CudaWorkload& w);
  // Enqueues the scrub the options ask for.
  void ScrubL2(int attempt);

  // Constant after Create.
  CudaBackendOptions options_;
  int device_ = 0;
  int sm_count_ = 0;
  int cc_major_ = 0;  // compute capability major: mma_skinny needs 8
  uint64_t l2_bytes_ = 0;
  Fingerprint fingerprint_;
  std::string pci_bus_id_;  // nvidia-smi's form, "00000000:65:00.0"
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer scrub_;  // 2 x L2, zero-filled, swept before every sample
  DeviceBuffer scrub_sink_;
  const std::atomic<bool>* cancel_ = nullptr;  // the job's, or null

  // Per-shape caches, valid for problem_->shape().
  std::shared_ptr<const CublasLtDense> problem_;
  std::map<std::string, std::unique_ptr<DensePlan>> plans_;  // by exec key
  std::vector<std::string> notes_;  // of the last Candidates()
  std::vector<HeuristicRebuild> rebuilds_;
  // Host time to enqueue one launch of each candidate (by exec key), learnt
  // from its earlier samples; sizes the delay that keeps the GPU waiting
  // until all reps are enqueued. A cuBLASLt launch and an own kernel's
  // differ several-fold, so one rate for all would be wrong for some.
  std::map<std::string, double> enqueue_seconds_per_launch_;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_CUDA_BACKEND_H_
