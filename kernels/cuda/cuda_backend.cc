#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/build_info.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/cuda/l2_scrub.h"
#include "kernels/cuda/mma_skinny.h"
#include "kernels/cuda/reference.h"
#include "kernels/cuda/stream_delay.h"
#include "proto/device_uuid.h"

namespace gputune::kernels {
namespace {

// Pointers into one pool are rounded up to this: cuBLASLt's heuristics
// assume 256-byte aligned operands, as cudaMalloc gives.
constexpr uint64_t kAlignment = 256;
// Rotation sets for tiny shapes are capped: beyond this the pool is only
// partly cold, which matters little for shapes this small.
constexpr uint64_t kMaxRotationSets = 1024;
// A device-side delay longer than this would only mean the host is stalled.
constexpr double kMaxDelaySeconds = 0.1;
// Takes of one sample before one whose delay ran out before the last launch
// was enqueued is discarded (each retry's delay is sized from the enqueue
// time the previous take measured).
constexpr int kSampleAttempts = 4;
// Multiply-adds per reference launch: ~10-40 ms on a current GPU's CUDA
// cores, so a cancelled job stops soon and the first launch is long enough
// to extrapolate from.
constexpr double kReferenceFmasPerLaunch = 4.0 * (1ull << 30);

uint64_t AlignUp(uint64_t v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

std::string FormatUuid(const cudaUUID_t& uuid) {
  return FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
}

// 13000 -> "13.0" (cudaDriverGetVersion / cudaRuntimeGetVersion encoding).
std::string FormatCudaVersion(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// 130100 -> "13.1.0" (CUBLAS_VERSION encoding).
std::string FormatCublasVersion(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) +
         "." + std::to_string(v % 100);
}

std::string Lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The ordinal the device option names; throws std::runtime_error.
int ResolveDevice(const std::string& device, int count) {
  if (!device.empty() &&
      std::all_of(device.begin(), device.end(),
                  [](unsigned char c) { return std::isdigit(c) != 0; })) {
    const int ordinal = device.size() > 9 ? count : std::stoi(device);
    if (ordinal >= count) {
      throw std::runtime_error("device " + device + " does not exist: " +
                               std::to_string(count) + " CUDA device(s)");
    }
    return ordinal;
  }
  std::string wanted = Lower(device);
  if (wanted.rfind("gpu-", 0) != 0) wanted = "gpu-" + wanted;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    CheckCuda(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    if (Lower(FormatUuid(prop.uuid)) == wanted) return i;
  }
  throw std::runtime_error("no CUDA device has UUID " + device + " (" +
                           std::to_string(count) + " device(s) visible)");
}

std::string ShapeString(const DenseShape& s) {
  return "M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) +
         " K=" + std::to_string(s.k);
}

// Cache key of an execution (kernel, params, workspace).
std::string ExecKey(const Execution& e) {
  std::string key = e.kernel;
  for (const auto& [name, value] : e.params) {
    key += ";" + name + "=" + std::to_string(value);
  }
  return key + ";ws=" + std::to_string(e.workspace_bytes);
}

CudaWorkload& AsCuda(Workload& workload) {
  auto* cuda = dynamic_cast<CudaWorkload*>(&workload);
  if (cuda == nullptr) {
    throw std::invalid_argument("workload was not prepared by CudaBackend");
  }
  return *cuda;
}

}  // namespace

std::string NvidiaDriverBuild(const std::string& proc_version) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul ..."
  // or "... NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release
  // Build ...".
  static const std::regex kBuild(
      R"(Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+){1,3})\b)");
  std::smatch match;
  const std::string first_line =
      proc_version.substr(0, std::min<size_t>(proc_version.find('\n'), 4096));
  if (std::regex_search(first_line, match, kBuild)) return match[1].str();
  return "";
}

CudaWorkload::~CudaWorkload() { cudaSetDevice(device_); }

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  return GuardedStatus([&] {
    std::unique_ptr<CudaBackend> backend(new CudaBackend());
    backend->Open(options);
    return backend;
  });
}

void CudaBackend::Open(const CudaBackendOptions& options) {
  options_ = options;
  if (options_.heuristic_candidates < 1) {
    throw std::invalid_argument("heuristic_candidates must be >= 1");
  }
  int count = 0;
  CheckCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) {
    throw std::runtime_error("cudaGetDeviceCount: 0 CUDA devices visible");
  }
  device_ = ResolveDevice(options_.device, count);
  CheckCuda(cudaSetDevice(device_), "cudaSetDevice");

  cudaDeviceProp prop{};
  CheckCuda(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  sm_count_ = prop.multiProcessorCount;
  cc_major_ = prop.major;
  l2_bytes_ = static_cast<uint64_t>(prop.l2CacheSize);
  int driver = 0;
  int runtime = 0;
  CheckCuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  CheckCuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");

  fingerprint_.backend = "cuda";
  fingerprint_.device_name = prop.name;
  fingerprint_.device_uuid = FormatUuid(prop.uuid);
  // The same digits nvidia-smi and NVML print (an 8-digit domain), so that
  // the bus id in GetStatus can be compared with theirs as text.
  char bus_id[32];
  std::snprintf(bus_id, sizeof(bus_id), "%08X:%02X:%02X.0", prop.pciDomainID,
                prop.pciBusID, prop.pciDeviceID);
  pci_bus_id_ = bus_id;
  fingerprint_.compute_capability =
      std::to_string(prop.major) + "." + std::to_string(prop.minor);
  fingerprint_.processor_count =
      static_cast<uint32_t>(prop.multiProcessorCount);
  fingerprint_.memory_bytes = prop.totalGlobalMem;
  // The driver's build (580.65.06), which the API level (13.0) does not
  // tell apart: a driver update changes kernels' timings.
  std::string proc_version;
  if (std::ifstream in("/proc/driver/nvidia/version"); in) {
    std::ostringstream text;
    text << in.rdbuf();
    proc_version = text.str();
  }
  fingerprint_.driver_version = NvidiaDriverBuild(proc_version);
  if (fingerprint_.driver_version.empty()) {
    fingerprint_.driver_version = FormatCudaVersion(driver);
  }
  fingerprint_.runtime_version = FormatCudaVersion(runtime);
  fingerprint_.cublaslt_version = FormatCublasVersion(cublasLtGetVersion());
  fingerprint_.kernel_version = std::string(kKernelVersion);
  fingerprint_.build = CudaBuildInfo();

  CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
  CheckCublas(cublasLtCreate(&lt_), "cublasLtCreate");
  CheckCuda(cudaEventCreate(&start_), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop_), "cudaEventCreate");
  workspace_ = DeviceBuffer(options_.workspace_limit_bytes);
  scrub_ = DeviceBuffer(2 * l2_bytes_);
  scrub_sink_ = DeviceBuffer(256);
  // Zero: the read sweep's XOR of a zero buffer never matches its sentinel,
  // so the sweep writes nothing.
  CheckCuda(cudaMemsetAsync(scrub_.get(), 0, scrub_.size(), stream_),
            "cudaMemsetAsync");
  CheckCuda(cudaMemsetAsync(scrub_sink_.get(), 0, scrub_sink_.size(), stream_),
            "cudaMemsetAsync");
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void CudaBackend::ThrowIfCancelled() const {
  if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
    throw StatusException(CancelledStatus());
  }
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  plans_.clear();
  problem_.reset();
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaBackend::DeviceStatus() {
  // Errors from kernel launches are sticky: once one happened, every call on
  // the context returns it. A non-sticky error has been reported to the
  // candidate that caused it already; clear it.
  if (cudaSetDevice(device_) != cudaSuccess) {
    return UnavailableError(std::string("cudaSetDevice: ") +
                            cudaGetErrorString(cudaGetLastError()));
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) {
    (void)cudaGetLastError();
    return OkStatus();
  }
  return UnavailableError(std::string("cudaDeviceSynchronize: ") +
                          cudaGetErrorString(err));
}

void CudaBackend::Activate() const {
  CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaBackend::UseShape(const DenseShape& shape) {
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) {
    throw std::invalid_argument("dense shape must have M, N, K >= 1, got " +
                                ShapeString(shape));
  }
  if (problem_ != nullptr && problem_->shape().m == shape.m &&
      problem_->shape().n == shape.n && problem_->shape().k == shape.k) {
    return;
  }
  plans_.clear();
  problem_.reset();
  problem_ = std::make_shared<const CublasLtDense>(shape);
}

CudaBackend::Launcher CudaBackend::Resolve(const Execution& exec) {
  for (const auto& extra : options_.extra_kernels) {
    if (extra.name == exec.kernel) return {.extra = &extra};
  }
  const std::string key = ExecKey(exec);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    StatusOr<std::unique_ptr<DensePlan>> plan =
        DensePlan::Make(lt_, problem_, exec);
    if (!plan.ok()) throw StatusException(plan.status());
    it = plans_.emplace(key, std::move(*plan)).first;
  }
  return {.plan = it->second.get()};
}

StatusOr<std::vector<Execution>> CudaBackend::Candidates(
    const DenseShape& shape, int max_candidates) {
  return GuardedStatus(
      [&] { return CandidatesOrThrow(shape, max_candidates); });
}

std::vector<Execution> CudaBackend::CandidatesOrThrow(const DenseShape& shape,
                                                      int max_candidates) {
  Activate();
  UseShape(shape);
  const uint64_t limit = workspace_.size();

  notes_.clear();
  rebuilds_.clear();
  std::vector<Execution> lt;
  const auto heuristics = problem_->Heuristics(
      lt_, options_.heuristic_candidates, limit, kAlignment);
  // The default first: cuBLASLt's #0 for the workspace it needs, as the
  // heuristic returns it, through the very resolution DenseRunner uses for an
  // entry that keeps the default (DensePlan::Default).
  const DensePlan* default_plan = nullptr;
  if (!heuristics.empty()) {
    Execution dflt{kCublasLtDefaultKernel, {}, heuristics[0].workspaceSize};
    StatusOr<std::unique_ptr<DensePlan>> planned =
        DensePlan::Make(lt_, problem_, dflt);
    std::unique_ptr<DensePlan> plan =
        planned.ok() ? std::move(*planned) : nullptr;
    if (plan == nullptr) {
      notes_.push_back("cuBLASLt's default " + dflt.ToString() +
                       " cannot be planned (" + planned.status().message() +
                       "): the heuristic's algos are offered without it");
    } else {
      if (std::memcmp(&plan->lt_algo(), &heuristics[0].algo,
                      sizeof(cublasLtMatmulAlgo_t)) != 0) {
        notes_.push_back(
            "cuBLASLt's #0 for the " + std::to_string(dflt.workspace_bytes) +
            " workspace bytes it needs is not its #0 for the " +
            std::to_string(limit) +
            "-byte limit; the default is the former, what a client replaying "
            "the entry runs");
      }
      default_plan = plan.get();
      plans_.emplace(ExecKey(dflt), std::move(plan));
      lt.push_back(std::move(dflt));
    }
  }
  for (size_t i = 0; i < heuristics.size(); ++i) {
    const cublasLtMatmulHeuristicResult_t& h = heuristics[i];
    Execution exec = ToExecution(ReadAlgoConfig(h.algo), h.workspaceSize);
    // Offer only what a client can rebuild from the params alone, with the
    // workspace the rebuilt algo needs.
    HeuristicRebuild rebuild;
    rebuild.index = static_cast<int>(i);
    rebuild.heuristic = h.algo;
    StatusOr<std::unique_ptr<DensePlan>> planned =
        DensePlan::Make(lt_, problem_, exec);
    std::unique_ptr<DensePlan> plan =
        planned.ok() ? std::move(*planned) : nullptr;
    rebuild.rebuilt = plan != nullptr;
    rebuild.error = planned.status().message();
    const std::string name = "cuBLASLt heuristic #" + std::to_string(i);
    if (plan != nullptr) {
      rebuild.rebuilt_algo = plan->lt_algo();
      rebuild.identical = std::memcmp(&rebuild.rebuilt_algo, &h.algo,
                                      sizeof(cublasLtMatmulAlgo_t)) == 0;
      if (!rebuild.identical) {
        notes_.push_back(
            name + " " + exec.ToString() +
            ": the algo rebuilt from its config differs from the "
            "heuristic's in its bytes; measured as rebuilt, as a "
            "client replays it" +
            (i == 0 ? "; the default is the heuristic's own" : ""));
      }
    } else {
      notes_.push_back(name + " " + exec.ToString() +
                       " left out: it cannot be rebuilt from its config (" +
                       rebuild.error + ")" +
                       (i == 0 && default_plan != nullptr
                            ? "; the default is its algo as the heuristic "
                              "returns it"
                            : ""));
    }
    rebuilds_.push_back(rebuild);
    if (plan == nullptr) continue;
    exec.workspace_bytes =
        std::max(exec.workspace_bytes, plan->workspace_bytes());
    if (default_plan != nullptr &&
        std::memcmp(&plan->lt_algo(), &default_plan->lt_algo(),
                    sizeof(cublasLtMatmulAlgo_t)) == 0 &&
        exec.workspace_bytes <= lt.front().workspace_bytes) {
      continue;  // the default itself: timed once, as the default
    }
    if (exec.workspace_bytes > limit) {
      notes_.push_back(
          name + " " + exec.ToString() + " left out: rebuilt, it needs " +
          std::to_string(exec.workspace_bytes) + " workspace bytes, over the " +
          std::to_string(limit) + "-byte limit");
      continue;
    }
    if (std::find(lt.begin(), lt.end(), exec) != lt.end()) {
      notes_.push_back(name + " " + exec.ToString() +
                       " left out: the same execution as an earlier one");
      continue;
    }
    plans_.emplace(ExecKey(exec), std::move(plan));
    lt.push_back(std::move(exec));
  }

  std::vector<Execution> own;
  for (const auto& extra : options_.extra_kernels) {
    own.push_back(Execution{extra.name, {}, 0});
  }
  // The two own families alternate, so that when slots run short both are
  // measured: the GEMV (CUDA cores, best at M 1-4) and the tensor-core
  // skinny kernel (M 8-16).
  std::vector<Execution> gemv;
  for (const auto& params : GemvSplitKCandidates(shape, sm_count_)) {
    gemv.push_back(ToExecution(params, shape));
  }
  std::vector<Execution> mma;
  for (const auto& params : MmaSkinnyCandidates(shape, sm_count_, cc_major_)) {
    mma.push_back(ToExecution(params, shape));
  }
  for (size_t i = 0; i < std::max(gemv.size(), mma.size()); ++i) {
    for (const std::vector<Execution>* family : {&gemv, &mma}) {
      if (i < family->size() && (*family)[i].workspace_bytes <= limit) {
        own.push_back((*family)[i]);
      }
    }
  }

  if (lt.empty() && own.empty()) {
    throw std::runtime_error("no candidate for " + ShapeString(shape) +
                             ": cuBLASLt's heuristic returned no usable algo");
  }
  // cuBLASLt's first result is the default. Beyond it, when not everything
  // fits, own kernels get up to half the slots.
  const size_t budget = static_cast<size_t>(std::max(max_candidates, 1));
  size_t own_slots = std::min(own.size(), budget / 2);
  const size_t lt_slots = std::min(lt.size(), budget - own_slots);
  own_slots = std::min(own.size(), budget - lt_slots);
  std::vector<Execution> out(lt.begin(), lt.begin() + lt_slots);
  out.insert(out.end(), own.begin(), own.begin() + own_slots);
  return out;
}

StatusOr<std::unique_ptr<Workload>> CudaBackend::Prepare(
    const DenseShape& shape, uint64_t seed) {
  return GuardedStatus([&] { return PrepareOrThrow(shape, seed); });
}

std::unique_ptr<Workload> CudaBackend::PrepareOrThrow(const DenseShape& shape,
                                                      uint64_t seed) {
  Activate();
  UseShape(shape);
  std::unique_ptr<CudaWorkload> w(new CudaWorkload());
  w->device_ = device_;
  w->shape_ = shape;
  const uint64_t x_bytes = AlignUp(shape.m * shape.k * 2);
  const uint64_t w_bytes = AlignUp(shape.n * shape.k * 2);
  const uint64_t y_bytes = AlignUp(shape.m * shape.n * 2);
  const uint64_t set_bytes = x_bytes + w_bytes + y_bytes;
  // Between two uses of one set, the others touch at least 2 x L2. A set of
  // 2 x L2 or more evicts its own beginning by the time it comes round.
  const uint64_t cold = 2 * l2_bytes_;
  const uint64_t sets =
      set_bytes >= cold || !options_.rotate_inputs
          ? 1
          : std::min(kMaxRotationSets, (cold + set_bytes - 1) / set_bytes + 1);
  w->pool_ = DeviceBuffer(sets * set_bytes);
  auto* base = static_cast<char*>(w->pool_.get());
  for (uint64_t i = 0; i < sets; ++i) {
    ThrowIfCancelled();
    char* p = base + i * set_bytes;
    w->sets_.push_back({p, p + x_bytes, p + x_bytes + w_bytes});
    DeviceFillDenseInputs(shape, p, p + x_bytes, seed + i, stream_);
  }
  w->reference_ = DeviceBuffer(shape.m * shape.n * sizeof(float));
  w->compare_scratch_ = DeviceBuffer(kCompareScratchBytes);
  w->exact_pool_ = DeviceBuffer(x_bytes + w_bytes);
  auto* exact = static_cast<char*>(w->exact_pool_.get());
  w->exact_ = {exact, exact + x_bytes, w->sets_[0].y};
  DeviceFillExactCheckInputs(shape, w->exact_.x, w->exact_.w, seed, stream_);
  w->exact_reference_ = DeviceBuffer(shape.m * shape.n * sizeof(float));
  ComputeReferences(*w);
  return w;
}

void CudaBackend::ComputeReferences(CudaWorkload& w) {
  const DenseShape& shape = w.shape();
  const int64_t columns =
      DeviceReferenceColumns(shape, kReferenceFmasPerLaunch);
  const int64_t launches_each = (shape.n + columns - 1) / columns;
  const struct {
    const void* x;
    const void* w;
    float* ref;
  } refs[] = {
      {w.x(), w.w(), static_cast<float*>(w.reference_.get())},
      {w.exact_.x, w.exact_.w, static_cast<float*>(w.exact_reference_.get())},
  };
  // The fills first, so the clock measures the references alone.
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int64_t done = 0;
  for (const auto& r : refs) {
    for (int64_t n0 = 0; n0 < shape.n; n0 += columns) {
      ThrowIfCancelled();
      DeviceReferenceDense(shape, r.x, r.w, r.ref, stream_, n0,
                           std::min(shape.n, n0 + columns));
      CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      ++done;
      // Extrapolated from the launches so far.
      const double so_far =
          std::chrono::duration<double>(Clock::now() - start).count();
      const double total = so_far / done * (2 * launches_each);
      if (total > options_.reference_limit_seconds) {
        char buf[320];
        std::snprintf(buf, sizeof(buf),
                      "the fp32 references of %s would take about %.3g s "
                      "(%lld launches, the first %lld took %.3g s), more than "
                      "the %.3g s allowed (reference_limit_seconds)",
                      ShapeString(shape).c_str(), total,
                      static_cast<long long>(2 * launches_each),
                      static_cast<long long>(done), so_far,
                      options_.reference_limit_seconds);
        throw std::runtime_error(buf);
      }
    }
  }
}

void CudaBackend::Launch(const Launcher& launcher, const DenseShape& shape,
                         const CudaWorkload::Set& set) {
  if (launcher.extra != nullptr) {
    launcher.extra->launch(DenseLaunch{shape, set.x, set.w, set.y,
                                       workspace_.get(), workspace_.size(),
                                       stream_});
    return;
  }
  const DensePlan& plan = *launcher.plan;
  if (Status s = plan.CheckLaunchable(set.x, set.w, set.y, workspace_.size());
      !s.ok()) {
    throw StatusException(std::move(s));
  }
  plan.Launch(lt_, set.x, set.w, set.y, workspace_.get(), workspace_.size(),
              stream_);
}

StatusOr<Comparison> CudaBackend::RunAndCompare(Workload& workload,
                                                const Execution& exec,
                                                double atol, double rtol) {
  return GuardedStatus(
      [&] { return RunAndCompareOrThrow(workload, exec, atol, rtol); });
}

Comparison CudaBackend::RunAndCompareOrThrow(Workload& workload,
                                             const Execution& exec, double atol,
                                             double rtol) {
  Activate();
  CudaWorkload& w = AsCuda(workload);
  UseShape(w.shape());
  const CudaWorkload::Set& set = w.sets_[0];
  const int64_t count = w.shape().m * w.shape().n;
  // Poison: 0xFFFF is a bf16 NaN, so an output the candidate never writes
  // counts as non-finite.
  CheckCuda(cudaMemsetAsync(set.y, 0xFF, count * 2, stream_),
            "cudaMemsetAsync");
  Launch(Resolve(exec), w.shape(), set);
  return DeviceCompareWithReference(set.y, w.reference(), count, atol, rtol,
                                    w.compare_scratch_.get(), stream_);
}

StatusOr<Comparison> CudaBackend::RunAndCompareExact(Workload& workload,
                                                     const Execution& exec) {
  return GuardedStatus(
      [&] { return RunAndCompareExactOrThrow(workload, exec); });
}

Comparison CudaBackend::RunAndCompareExactOrThrow(Workload& workload,
                                                  const Execution& exec) {
  Activate();
  CudaWorkload& w = AsCuda(workload);
  UseShape(w.shape());
  const int64_t count = w.shape().m * w.shape().n;
  CheckCuda(cudaMemsetAsync(w.exact_.y, 0xFF, count * 2, stream_),
            "cudaMemsetAsync");
  Launch(Resolve(exec), w.shape(), w.exact_);
  return DeviceCompareWithReference(w.exact_.y, w.exact_reference(), count, 0,
                                    0, w.compare_scratch_.get(), stream_);
}

int CudaBackend::Bf16Partials(const Execution& exec) const {
  LtAlgoConfig config;
  if (exec.kernel == kCublasLtDefaultKernel) {
    // The default's config is its planned algo's.
    const auto it = plans_.find(ExecKey(exec));
    if (it == plans_.end()) return 1;
    try {
      config = ReadAlgoConfig(it->second->lt_algo());
    } catch (const std::exception&) {
      return 1;
    }
  } else if (exec.kernel == kCublasLtKernel) {
    StatusOr<LtAlgoConfig> read = LtAlgoConfigFromExecution(exec);
    if (!read.ok()) return 1;
    config = *read;
  } else {
    return 1;
  }
  if (config.splitk <= 1 ||
      config.reduction_scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) {
    return 1;
  }
  return config.splitk;
}

void CudaBackend::ScrubL2(int attempt) {
  switch (options_.scrub) {
    case L2Scrub::kNone:
      return;
    case L2Scrub::kRead:
      L2ReadSweep(scrub_.get(), scrub_.size(),
                  static_cast<unsigned*>(scrub_sink_.get()), sm_count_,
                  stream_);
      return;
    case L2Scrub::kWrite:
      CheckCuda(
          cudaMemsetAsync(scrub_.get(), attempt & 0xff, scrub_.size(), stream_),
          "cudaMemsetAsync(L2 scrub)");
      return;
  }
}

StatusOr<double> CudaBackend::TimeSample(Workload& workload,
                                         const Execution& exec, int reps) {
  return GuardedStatus([&] { return TimeSampleOrThrow(workload, exec, reps); });
}

double CudaBackend::TimeSampleOrThrow(Workload& workload, const Execution& exec,
                                      int reps) {
  Activate();
  CudaWorkload& w = AsCuda(workload);
  UseShape(w.shape());
  reps = std::max(reps, 1);
  const Launcher launcher = Resolve(exec);  // fails before holding the GPU
  using Clock = std::chrono::steady_clock;
  // This candidate's enqueue rate, learnt from its earlier samples; a first
  // guess for its first.
  double& per_launch =
      enqueue_seconds_per_launch_.try_emplace(ExecKey(exec), 20e-6)
          .first->second;
  double delay = std::min(kMaxDelaySeconds, 20e-6 + 2.0 * reps * per_launch);
  // The delay must outlast the host enqueueing all reps; when it did not (the
  // start event already completed), the sample may contain launch gaps and is
  // taken again with a delay sized from what this enqueue took.
  double enqueue = 0;
  for (int attempt = 0; attempt < kSampleAttempts; ++attempt) {
    ThrowIfCancelled();
    ScrubL2(attempt);  // outside the timed region: before the delay
    DelayStream(stream_, static_cast<uint64_t>(delay * 1e9));
    CheckCuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      // Between launches, so a job cancelled in a long enqueue stops there
      // (what is enqueued drains on the next synchronising call).
      if (i % 256 == 255) ThrowIfCancelled();
      Launch(launcher, w.shape(), w.sets_[w.next_set_]);
      w.next_set_ = (w.next_set_ + 1) % w.sets_.size();
    }
    enqueue = std::chrono::duration<double>(Clock::now() - t0).count();
    CheckCuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    const cudaError_t started = cudaEventQuery(start_);
    // Not ready is the normal case (the delay still holds the stream), but
    // the runtime records it as the last error: clear it here, where it is
    // produced, or the next launch check would read it.
    if (started == cudaErrorNotReady) ClearLastErrorIf(cudaErrorNotReady);
    if (started != cudaSuccess && started != cudaErrorNotReady) {
      CheckCuda(started, "cudaEventQuery");
    }
    CheckCuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    per_launch = std::max(enqueue / reps, 1e-6);
    if (started == cudaErrorNotReady) {
      float ms = 0;
      CheckCuda(cudaEventElapsedTime(&ms, start_, stop_),
                "cudaEventElapsedTime");
      return ms * 1e-3 / reps;
    }
    if (delay >= kMaxDelaySeconds) break;
    delay =
        std::min(kMaxDelaySeconds, std::max(2 * delay, 2 * enqueue + 50e-6));
  }
  char buf[200];
  std::snprintf(
      buf, sizeof(buf),
      "launch gaps: enqueueing %d runs took %.3g ms, past the %.3g ms "
      "device-side delay, in each of its takes; sample discarded",
      reps, enqueue * 1e3, delay * 1e3);
  throw std::runtime_error(buf);
}

}  // namespace gputune::kernels
