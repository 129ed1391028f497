// What the CUDA backend does without a device: Create fails with CUDA's own
// error, so does the module's open call across its C boundary, and
// executions round-trip between params and typed configs. Runs on every
// machine.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cublaslt_dense.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dense_plan.h"
#include "kernels/cuda/gemv_splitk.h"
#include "kernels/cuda/mma_skinny.h"
#include "kernels/cuda/module_api.h"
#include "kernels/cuda/reference.h"
#include "kernels/dense.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

using testing::HasCudaDevice;
using testing::Must;

TEST_CASE(
    "CudaBackend::Create without a usable device fails and names the CUDA "
    "error") {
  std::string error;
  if (!HasCudaDevice()) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    cudaGetLastError();
    auto backend = CudaBackend::Create({});
    CHECK_FALSE(backend.ok());
    error = backend.status().message();
    INFO(error);
    if (status != cudaSuccess) {
      CHECK(error ==
            std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status));
    } else {
      CHECK(error.find("cudaGetDeviceCount") != std::string::npos);
    }
    return;
  }
  // With a device, a device option that names nothing fails the same way.
  for (const std::string device :
       {"99", "GPU-00000000-0000-0000-0000-000000000000"}) {
    CudaBackendOptions options;
    options.device = device;
    const auto backend = CudaBackend::Create(options);
    CHECK_FALSE(backend.ok());
    error = backend.status().message();
    CHECK(error.find(device) != std::string::npos);
  }
  CHECK(error.find("no CUDA device has UUID") != std::string::npos);
}

TEST_CASE(
    "the CUDA module's open call returns a status code and message, never "
    "an exception") {
  // As gputuned loads it (daemon/backend_factory.cc).
  void* module = dlopen(GPUTUNE_CUDA_MODULE_PATH, RTLD_NOW | RTLD_LOCAL);
  INFO((module == nullptr ? dlerror() : GPUTUNE_CUDA_MODULE_PATH));
  REQUIRE(module != nullptr);
  auto abi =
      reinterpret_cast<CudaModuleAbiFn>(dlsym(module, kCudaModuleAbiSymbol));
  auto open =
      reinterpret_cast<CudaModuleOpenFn>(dlsym(module, kCudaModuleOpenSymbol));
  REQUIRE(abi != nullptr);
  REQUIRE(open != nullptr);
  CHECK(abi() == kCudaModuleAbi);

  // A device that exists nowhere fails on every machine: with a GPU on the
  // device option, without one on cudaGetDeviceCount.
  CudaModuleOptions options;
  options.device = "GPU-00000000-0000-0000-0000-000000000000";
  options.heuristic_candidates = kDefaultHeuristicCandidates;
  options.workspace_limit_bytes = 32u << 20;
  Backend* backend = reinterpret_cast<Backend*>(&options);  // must be reset
  char message[kCudaModuleMessageBytes];
  const int code = open(&options, &backend, message, sizeof(message));
  CHECK(code != static_cast<int>(StatusCode::kOk));
  CHECK(backend == nullptr);
  INFO(message);
  if (HasCudaDevice()) {
    CHECK(std::string(message).find(options.device) != std::string::npos);
  } else {
    CHECK(std::string(message).rfind("cudaGetDeviceCount", 0) == 0);
  }

  // A buffer too small for the message gets as much as fits, terminated.
  char tiny[8];
  std::fill(std::begin(tiny), std::end(tiny), 'x');
  CHECK(open(&options, &backend, tiny, sizeof(tiny)) == code);
  CHECK(std::string(tiny) == std::string(message).substr(0, 7));
  // The module stays loaded, as in gputuned: the CUDA runtime is not meant
  // to be unloaded.
}

// A pending error that belongs to someone else (the application, or an
// earlier handled failure): a device ordinal that cannot exist fails with or
// without a device, and the runtime records the failure as its last error.
cudaError_t LeaveAPendingError() {
  const cudaError_t status = cudaSetDevice(1 << 20);
  REQUIRE(status != cudaSuccess);
  REQUIRE(cudaPeekAtLastError() == status);
  return status;
}

TEST_CASE(
    "a launch check reads the launch's own result and leaves the caller's "
    "pending error alone") {
  const cudaError_t pending = LeaveAPendingError();
  // A launch that succeeded is not failed by the earlier error...
  CHECK_NOTHROW(CheckLaunch(cudaSuccess, "Kernel"));
  // ...and does not take it from its owner.
  CHECK(cudaPeekAtLastError() == pending);
  // A launch that failed reports its own error.
  CHECK_THROWS_WITH(CheckLaunch(cudaErrorInvalidConfiguration, "Kernel"),
                    std::string("launch of Kernel: ") +
                        cudaGetErrorString(cudaErrorInvalidConfiguration));
  (void)cudaGetLastError();
}

TEST_CASE("a status cleared where it is produced clears only that status") {
  // Without a driver every runtime call, cudaPeekAtLastError included, fails
  // anew, so an error can be seen to stay but not to go.
  const bool runtime_works = HasCudaDevice();
  const cudaError_t pending = LeaveAPendingError();
  // cudaEventQuery's cudaErrorNotReady is cleared only when it is the last
  // error: someone else's error stays.
  ClearLastErrorIf(cudaErrorNotReady);
  CHECK(cudaPeekAtLastError() == pending);
  if (!runtime_works) {
    WARN("without a device only the half that keeps an error is checked");
    return;
  }
  ClearLastErrorIf(pending);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  // A failure CheckCuda handled (it threw) does not linger either.
  const cudaError_t again = cudaSetDevice(1 << 20);
  CHECK_THROWS(CheckCuda(again, "cudaSetDevice"));
  CHECK(cudaPeekAtLastError() == cudaSuccess);
}

TEST_CASE(
    "a cuBLASLt execution carries every algo config attribute and "
    "round-trips") {
  const LtAlgoConfig config{.algo_id = 66,
                            .tile = 20,
                            .stages = 35,
                            .splitk = 4,
                            .reduction_scheme = 2,
                            .swizzle = 1,
                            .custom_option = 3,
                            .inner_shape = 7,
                            .cluster_shape = 12};
  const Execution exec = ToExecution(config, 1 << 20);
  CHECK(exec.kernel == "cublaslt");
  CHECK(exec.workspace_bytes == 1u << 20);
  for (const char* name :
       {"algo_id", "tile", "stages", "splitk", "reduction_scheme", "swizzle",
        "custom_option", "inner_shape", "cluster_shape"}) {
    INFO(name);
    CHECK(exec.params.count(name) == 1);
  }

  // Through text, as an entry travels to a client and back.
  const std::optional<Execution> parsed = ParseExecution(exec.ToString());
  REQUIRE(parsed.has_value());
  CHECK(*parsed == exec);

  LtAlgoConfig back;
  std::string error;
  back = Must(LtAlgoConfigFromExecution(*parsed));
  CHECK(back == config);
}

TEST_CASE(
    "cuBLASLt config values past INT32_MAX survive the int32 params of an "
    "entry") {
  // gputune.v1.Execution's params are int32; cuBLASLt's uint32 attributes
  // can use all 32 bits (custom_option, tile ids of newer releases).
  const LtAlgoConfig config{.algo_id = 66,
                            .tile = 0xFFFFFFF0u,
                            .stages = 0x80000000u,
                            .splitk = 1,
                            .reduction_scheme = 0x7FFFFFFFu,
                            .swizzle = 0xFFFFFFFFu,
                            .custom_option = 0x80000001u};
  const Execution exec = ToExecution(config, 0);
  Execution through_proto = exec;  // what ToProto/FromProto keep of each
  for (auto& [name, value] : through_proto.params) {
    INFO(name << "=" << value);
    CHECK(value >= std::numeric_limits<int32_t>::min());
    CHECK(value <= std::numeric_limits<int32_t>::max());
    value = static_cast<int32_t>(value);
  }
  LtAlgoConfig back;
  std::string error;
  back = Must(LtAlgoConfigFromExecution(through_proto));
  CHECK(back == config);
  // A plain uint32 value (an in-process Execution) reads back too.
  Execution plain = exec;
  plain.params["tile"] = 0xFFFFFFF0ll;
  back = Must(LtAlgoConfigFromExecution(plain));
  CHECK(back.tile == 0xFFFFFFF0u);
  plain.params["tile"] = 0x100000000ll;
  error = LtAlgoConfigFromExecution(plain).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("tile") != std::string::npos);
}

TEST_CASE("the driver's build is read from /proc/driver/nvidia/version") {
  CHECK(NvidiaDriverBuild(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun "
            "Jul 27 07:09:58 UTC 2025\nGCC version:  gcc version 12.2.0\n") ==
        "580.65.06");
  CHECK(NvidiaDriverBuild("NVRM version: NVIDIA UNIX Open Kernel Module for "
                          "x86_64  570.124.06  Release Build  (dvs-builder@U16)"
                          "  Wed Feb 26 01:03:13 UTC 2025\n") == "570.124.06");
  CHECK(NvidiaDriverBuild("").empty());
  CHECK(NvidiaDriverBuild("garbage without a version\n").empty());
  // Only the first line counts.
  CHECK(NvidiaDriverBuild("NVRM version: ?\nKernel Module 1.2.3\n").empty());
}

TEST_CASE("split-K GEMV launches no empty K chunk") {
  // K=14336 in chunks rounded up to 256 elements: split_k=16 gives chunks of
  // 1024, of which 14 hold all of K.
  const DenseShape down{.m = 4, .n = 4096, .k = 14336};
  CHECK(GemvSplitKChunks({.split_k = 16}, down) == 14);
  CHECK(GemvSplitKChunks({.split_k = 1}, down) == 1);
  CHECK(GemvSplitKChunks({.split_k = 4}, down) == 4);
  for (const int64_t m : {1, 4, 16}) {
    for (const auto& [k, n] :
         std::vector<std::pair<int64_t, int64_t>>{{4096, 4096},
                                                  {14336, 4096},
                                                  {28672, 8192},
                                                  {8192, 10240},
                                                  {1280, 4096},
                                                  {2304, 1024},
                                                  {14336, 1024},
                                                  {16640, 512}}) {
      const DenseShape shape{.m = m, .n = n, .k = k};
      INFO(testing::ShapeName(shape));
      for (const auto& params : GemvSplitKCandidates(shape, 132)) {
        INFO(ToExecution(params, shape).ToString());
        CHECK(GemvSplitKChunks(params, shape) == params.split_k);
      }
    }
  }
}

TEST_CASE("the reference is split into launches of whole tiles") {
  const DenseShape big{.m = 16, .n = 1 << 20, .k = 1 << 20};
  const int64_t columns = DeviceReferenceColumns(big, 4.0 * (1ull << 30));
  CHECK(columns % 64 == 0);
  CHECK(columns >= 64);
  CHECK(columns * big.m * big.k <= 4.0 * (1ull << 30) + 64.0 * big.m * big.k);
  // A small shape is one launch of at least N columns.
  const DenseShape small{.m = 1, .n = 100, .k = 64};
  CHECK(DeviceReferenceColumns(small, 4.0 * (1ull << 30)) >= small.n);
  CHECK(DeviceReferenceColumns(small, 4.0 * (1ull << 30)) % 64 == 0);
  // Never below one tile, however small the budget.
  CHECK(DeviceReferenceColumns(big, 1) == 64);
}

TEST_CASE(
    "a cuBLASLt execution with a missing, unknown or out-of-range "
    "param is refused by name") {
  const Execution good = ToExecution(LtAlgoConfig{}, 0);
  LtAlgoConfig config;
  std::string error;

  Execution missing = good;
  missing.params.erase("stages");
  error = LtAlgoConfigFromExecution(missing).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("stages") != std::string::npos);

  Execution unknown = good;
  unknown.params["heuristic_index"] = 0;
  error = LtAlgoConfigFromExecution(unknown).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("heuristic_index") != std::string::npos);

  Execution range = good;
  range.params["inner_shape"] = 70000;  // a uint16_t attribute
  error = LtAlgoConfigFromExecution(range).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("inner_shape") != std::string::npos);

  Execution other = good;
  other.kernel = "gputune.gemv_splitk";
  error = LtAlgoConfigFromExecution(other).status().message();
  CHECK_FALSE(error.empty());
}

TEST_CASE(
    "gemv_splitk candidates are distinct, valid and offered only for "
    "decode shapes") {
  constexpr int kSms = 132;
  for (const int64_t m : {1, 2, 3, 4, 8, 16}) {
    for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{
             {4096, 6144}, {4096, 28672}, {14336, 4096}, {1000, 333}}) {
      const DenseShape shape{.m = m, .n = n, .k = k};
      INFO(testing::ShapeName(shape));
      const auto candidates = GemvSplitKCandidates(shape, kSms);
      CHECK(candidates.size() >= 4);
      CHECK(candidates.size() <= 8);
      for (size_t i = 0; i < candidates.size(); ++i) {
        const Execution exec = ToExecution(candidates[i], shape);
        INFO(exec.ToString());
        GemvSplitKParams back;
        std::string error;
        back = Must(GemvSplitKParamsFromExecution(exec, shape));
        CHECK(back == candidates[i]);
        CHECK(back.m_tile >= m);  // W is read once per call
        const int64_t partials =
            back.split_k > 1 ? back.split_k * m * n * 4 : 0;
        CHECK(exec.workspace_bytes == static_cast<uint64_t>(partials));
        const std::optional<Execution> parsed = ParseExecution(exec.ToString());
        REQUIRE(parsed.has_value());
        CHECK(*parsed == exec);
        for (size_t j = 0; j < i; ++j) CHECK_FALSE(candidates[j] == back);
      }
    }
  }
  CHECK(GemvSplitKCandidates({.m = 17, .n = 4096, .k = 4096}, kSms).empty());
  CHECK(GemvSplitKCandidates({.m = 1, .n = 4096, .k = 4100}, kSms).empty());
}

TEST_CASE("gemv_splitk params the kernel cannot run are refused by name") {
  const DenseShape shape{.m = 4, .n = 4096, .k = 4096};
  const Execution good = ToExecution(GemvSplitKParams{.m_tile = 4}, shape);
  GemvSplitKParams params;
  std::string error;
  params = Must(GemvSplitKParamsFromExecution(good, shape));

  Execution rows = good;
  rows.params["rows_per_warp"] = 3;
  error = GemvSplitKParamsFromExecution(rows, shape).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("rows_per_warp=3") != std::string::npos);

  Execution vec = good;
  vec.params["vec"] = 4;
  error = GemvSplitKParamsFromExecution(vec, shape).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("vec") != std::string::npos);

  Execution too_many = good;
  too_many.params["m_tile"] = 16;
  too_many.params["rows_per_warp"] = 4;
  error = GemvSplitKParamsFromExecution(too_many, shape).status().message();
  CHECK_FALSE(error.empty());

  error = GemvSplitKParamsFromExecution(good, {.m = 4, .n = 4096, .k = 4095})
              .status()
              .message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("K % 8") != std::string::npos);
}

}  // namespace
}  // namespace gputune::kernels

namespace gputune::kernels {
namespace {

TEST_CASE(
    "mma_skinny candidates are distinct, valid, without empty K chunks and "
    "offered only for decode shapes on 8.0+") {
  constexpr int kSms = 132;
  for (const int64_t m : {1, 2, 4, 8, 9, 16}) {
    for (const auto& [k, n] :
         std::vector<std::pair<int64_t, int64_t>>{{4096, 6144},
                                                  {4096, 4096},
                                                  {4096, 28672},
                                                  {14336, 4096},
                                                  {8192, 10240},
                                                  {28672, 8192},
                                                  {16640, 512},
                                                  {1024, 100}}) {
      const DenseShape shape{.m = m, .n = n, .k = k};
      INFO(testing::ShapeName(shape));
      const auto candidates = MmaSkinnyCandidates(shape, kSms, 9);
      CHECK(candidates.size() >= 3);
      CHECK(candidates.size() <= 8);
      bool split = false;
      for (size_t i = 0; i < candidates.size(); ++i) {
        const Execution exec = ToExecution(candidates[i], shape);
        INFO(exec.ToString());
        MmaSkinnyParams back;
        std::string error;
        back = Must(MmaSkinnyParamsFromExecution(exec, shape));
        CHECK(back == candidates[i]);
        CHECK(MmaSkinnyChunks(back, shape) == back.split_k);
        split = split || back.split_k > 1;
        const int64_t partials =
            back.split_k > 1 ? back.split_k * m * n * 4 : 0;
        CHECK(exec.workspace_bytes == static_cast<uint64_t>(partials));
        const std::optional<Execution> parsed = ParseExecution(exec.ToString());
        REQUIRE(parsed.has_value());
        CHECK(*parsed == exec);
        for (size_t j = 0; j < i; ++j) CHECK_FALSE(candidates[j] == back);
      }
      // N = 4096 cannot fill 132 SMs with 16-row tiles alone: split-K.
      if (n <= 4096 && k >= 4096) CHECK(split);
    }
  }
  CHECK(MmaSkinnyCandidates({.m = 17, .n = 4096, .k = 4096}, kSms, 9).empty());
  CHECK(
      MmaSkinnyCandidates({.m = 4, .n = 4096, .k = 4032 + 8}, kSms, 9).empty());
  // No bf16 mma.sync before 8.0.
  CHECK(MmaSkinnyCandidates({.m = 4, .n = 4096, .k = 4096}, kSms, 7).empty());
  // K=16640 in 16 chunks of 1040, rounded up to 1152 (9 x 128 for
  // k_unroll=2): 15 hold all of K.
  CHECK(MmaSkinnyChunks({.split_k = 16, .k_unroll = 2},
                        {.m = 8, .n = 512, .k = 16640}) == 15);
  CHECK(MmaSkinnyChunks({.split_k = 16, .k_unroll = 1},
                        {.m = 8, .n = 4096, .k = 14336}) == 16);
}

TEST_CASE("mma_skinny params it cannot run are refused by name") {
  const DenseShape shape{.m = 16, .n = 4096, .k = 4096};
  const Execution good = ToExecution(MmaSkinnyParams{}, shape);
  MmaSkinnyParams params;
  std::string error;
  params = Must(MmaSkinnyParamsFromExecution(good, shape));
  CHECK(params == MmaSkinnyParams{});

  for (const auto& [name, value] :
       std::vector<std::pair<std::string, int>>{{"row_tiles", 3},
                                                {"row_tiles", 8},
                                                {"warps", 3},
                                                {"warps", 16},
                                                {"split_k", 0},
                                                {"split_k", 65},
                                                {"k_unroll", 3}}) {
    INFO(name << "=" << value);
    Execution bad = good;
    bad.params[name] = value;
    error = MmaSkinnyParamsFromExecution(bad, shape).status().message();
    CHECK_FALSE(error.empty());
    CHECK(error.find(name) != std::string::npos);
  }
  Execution unknown = good;
  unknown.params["stages"] = 2;
  error = MmaSkinnyParamsFromExecution(unknown, shape).status().message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("stages") != std::string::npos);

  error = MmaSkinnyParamsFromExecution(good, {.m = 17, .n = 4096, .k = 4096})
              .status()
              .message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("M=17") != std::string::npos);
  error = MmaSkinnyParamsFromExecution(good, {.m = 4, .n = 4096, .k = 4104})
              .status()
              .message();
  CHECK_FALSE(error.empty());
  CHECK(error.find("K % 64") != std::string::npos);
  Execution other = good;
  other.kernel = kGemvSplitKKernel;
  error = MmaSkinnyParamsFromExecution(other, shape).status().message();
  CHECK_FALSE(error.empty());
}

TEST_CASE(
    "an mma_skinny entry resolves to a plan that says what a launch "
    "needs") {
  // The DenseRunner path up to the launch: DensePlan::Make from the entry's
  // execution, then CheckLaunchable on the client's buffers.
  const DenseShape shape{.m = 8, .n = 4096, .k = 4096};
  const MmaSkinnyParams split{.row_tiles = 2, .warps = 4, .split_k = 4};
  const Execution exec = ToExecution(split, shape);
  std::shared_ptr<const CublasLtDense> problem;
  try {
    problem = std::make_shared<const CublasLtDense>(shape);
  } catch (const std::exception& e) {
    WARN("skipped: cuBLASLt descriptors need a device here: " << e.what());
    return;
  }
  auto plan = Must(DensePlan::Make(nullptr, problem, exec));
  CHECK(plan->workspace_bytes() == 4u * 8 * 4096 * 4);
  CHECK(plan->min_alignment() == 16);
  alignas(256) static char buffers[1024];
  CHECK(plan->CheckLaunchable(buffers, buffers + 256, buffers + 512,
                              plan->workspace_bytes())
            .ok());
  const Status small =
      plan->CheckLaunchable(buffers, buffers + 256, buffers + 512, 1024);
  CHECK(small.code() == StatusCode::kFailedPrecondition);
  CHECK(small.message().find("workspace too small") != std::string::npos);
  CHECK(plan->CheckLaunchable(buffers + 8, buffers + 256, buffers + 512,
                              plan->workspace_bytes())
            .message()
            .find("16-byte aligned") != std::string::npos);

  Execution bad = exec;
  bad.params["row_tiles"] = 3;
  const Status refused = DensePlan::Make(nullptr, problem, bad).status();
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message().find("row_tiles=3") != std::string::npos);
  CHECK(DensePlan::Make(nullptr,
                        std::make_shared<const CublasLtDense>(
                            DenseShape{.m = 32, .n = 4096, .k = 4096}),
                        exec)
            .status()
            .message()
            .find("M=32") != std::string::npos);
}

}  // namespace
}  // namespace gputune::kernels
