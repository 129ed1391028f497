#include "kernels/cuda/cublaslt_dense.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/execution_params.h"

namespace gputune::kernels {
namespace {

// bf16 in and out, fp32 accumulation and scale.
constexpr cublasComputeType_t kComputeType = CUBLAS_COMPUTE_32F;
constexpr cudaDataType_t kScaleType = CUDA_R_32F;
constexpr cudaDataType_t kDataType = CUDA_R_16BF;

template <typename T>
T GetConfig(const cublasLtMatmulAlgo_t& algo,
            cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  CheckCublas(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value,
                                                   sizeof(value), &written),
              "cublasLtMatmulAlgoConfigGetAttribute");
  return value;
}

template <typename T>
cublasStatus_t SetConfig(cublasLtMatmulAlgo_t* algo,
                         cublasLtMatmulAlgoConfigAttributes_t attr, T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &value,
                                              sizeof(value));
}

// The largest of the algo's minimum A/B/C/D alignments; 256 (what cudaMalloc
// gives) when the algo does not say.
uint32_t MinAlignment(const cublasLtMatmulAlgo_t& algo) {
  uint32_t result = 1;
  for (const auto cap : {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES,
                         CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES,
                         CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES}) {
    uint32_t value = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, cap, &value, sizeof(value),
                                          &written) != CUBLAS_STATUS_SUCCESS) {
      return 256;
    }
    if (value > result) result = value;
  }
  return result;
}

class Preference {
 public:
  Preference() {
    CheckCublas(cublasLtMatmulPreferenceCreate(&pref_),
                "cublasLtMatmulPreferenceCreate");
  }
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref_); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;

  template <typename T>
  void Set(cublasLtMatmulPreferenceAttributes_t attr, T value) {
    CheckCublas(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &value,
                                                     sizeof(value)),
                "cublasLtMatmulPreferenceSetAttribute");
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// Execution params travel as int32 (gputune.v1.Execution): a uint32 config
// value is stored as the int32 with its bits, so values past INT32_MAX
// survive the round trip instead of being cut (U32FromParam reverses it).
int64_t U32Param(uint32_t value) { return static_cast<int32_t>(value); }
uint32_t U32FromParam(int64_t value) {
  return static_cast<uint32_t>(static_cast<uint64_t>(value) & 0xffffffffu);
}

}  // namespace

Execution ToExecution(const LtAlgoConfig& config, uint64_t workspace_bytes) {
  Execution e;
  e.kernel = kCublasLtKernel;
  e.params = {{"algo_id", config.algo_id},
              {"tile", U32Param(config.tile)},
              {"stages", U32Param(config.stages)},
              {"splitk", config.splitk},
              {"reduction_scheme", U32Param(config.reduction_scheme)},
              {"swizzle", U32Param(config.swizzle)},
              {"custom_option", U32Param(config.custom_option)},
              {"inner_shape", config.inner_shape},
              {"cluster_shape", config.cluster_shape}};
  e.workspace_bytes = workspace_bytes;
  return e;
}

StatusOr<LtAlgoConfig> LtAlgoConfigFromExecution(const Execution& execution) {
  if (execution.kernel != kCublasLtKernel) {
    return InvalidArgumentError("not a cuBLASLt execution: " +
                                execution.kernel);
  }
  GPUTUNE_KERNELS_RETURN_IF_ERROR(OnlyKnownParams(
      execution, {"algo_id", "tile", "stages", "splitk", "reduction_scheme",
                  "swizzle", "custom_option", "inner_shape", "cluster_shape"}));
  constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
  // uint32 attributes: their int32 form (U32Param), or the plain value.
  constexpr int64_t kU32Min = std::numeric_limits<int32_t>::min();
  constexpr int64_t kU32 = std::numeric_limits<uint32_t>::max();
  constexpr int64_t kU16 = std::numeric_limits<uint16_t>::max();
  int64_t algo_id, tile, stages, splitk, reduction, swizzle, custom, inner,
      cluster;
  for (const auto& [name, min, max, value] :
       {std::tuple{"algo_id", int64_t{0}, kI32, &algo_id},
        {"tile", kU32Min, kU32, &tile},
        {"stages", kU32Min, kU32, &stages},
        {"splitk", int64_t{1}, kI32, &splitk},
        {"reduction_scheme", kU32Min, kU32, &reduction},
        {"swizzle", kU32Min, kU32, &swizzle},
        {"custom_option", kU32Min, kU32, &custom},
        {"inner_shape", int64_t{0}, kU16, &inner},
        {"cluster_shape", int64_t{0}, kU16, &cluster}}) {
    GPUTUNE_KERNELS_RETURN_IF_ERROR(
        ReadParam(execution, name, min, max, value));
  }
  LtAlgoConfig config;
  config.algo_id = static_cast<int32_t>(algo_id);
  config.tile = U32FromParam(tile);
  config.stages = U32FromParam(stages);
  config.splitk = static_cast<int32_t>(splitk);
  config.reduction_scheme = U32FromParam(reduction);
  config.swizzle = U32FromParam(swizzle);
  config.custom_option = U32FromParam(custom);
  config.inner_shape = static_cast<uint16_t>(inner);
  config.cluster_shape = static_cast<uint16_t>(cluster);
  return config;
}

LtAlgoConfig ReadAlgoConfig(const cublasLtMatmulAlgo_t& algo) {
  LtAlgoConfig c;
  c.algo_id = GetConfig<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  c.tile = GetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  c.stages = GetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  c.splitk = GetConfig<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  c.reduction_scheme =
      GetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  c.swizzle = GetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  c.custom_option =
      GetConfig<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  c.inner_shape =
      GetConfig<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  c.cluster_shape =
      GetConfig<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  return c;
}

CublasLtDense::CublasLtDense(const DenseShape& shape) : shape_(shape) {
  const auto m = static_cast<uint64_t>(shape.m);
  const auto n = static_cast<uint64_t>(shape.n);
  const auto k = static_cast<uint64_t>(shape.k);
  try {
    CheckCublas(cublasLtMatmulDescCreate(&op_, kComputeType, kScaleType),
                "cublasLtMatmulDescCreate");
    const cublasOperation_t transa = CUBLAS_OP_T;
    const cublasOperation_t transb = CUBLAS_OP_N;
    CheckCublas(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA,
                                               &transa, sizeof(transa)),
                "cublasLtMatmulDescSetAttribute(TRANSA)");
    CheckCublas(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB,
                                               &transb, sizeof(transb)),
                "cublasLtMatmulDescSetAttribute(TRANSB)");
    CheckCublas(cublasLtMatrixLayoutCreate(&w_layout_, kDataType, k, n,
                                           static_cast<int64_t>(k)),
                "cublasLtMatrixLayoutCreate(W)");
    CheckCublas(cublasLtMatrixLayoutCreate(&x_layout_, kDataType, k, m,
                                           static_cast<int64_t>(k)),
                "cublasLtMatrixLayoutCreate(x)");
    CheckCublas(cublasLtMatrixLayoutCreate(&y_layout_, kDataType, n, m,
                                           static_cast<int64_t>(n)),
                "cublasLtMatrixLayoutCreate(y)");
  } catch (...) {
    Release();
    throw;
  }
}

CublasLtDense::~CublasLtDense() { Release(); }

void CublasLtDense::Release() {
  if (y_layout_ != nullptr) cublasLtMatrixLayoutDestroy(y_layout_);
  if (x_layout_ != nullptr) cublasLtMatrixLayoutDestroy(x_layout_);
  if (w_layout_ != nullptr) cublasLtMatrixLayoutDestroy(w_layout_);
  if (op_ != nullptr) cublasLtMatmulDescDestroy(op_);
  y_layout_ = x_layout_ = w_layout_ = nullptr;
  op_ = nullptr;
}

std::vector<cublasLtMatmulHeuristicResult_t> CublasLtDense::Heuristics(
    cublasLtHandle_t handle, int count, uint64_t workspace_limit,
    uint32_t alignment_bytes) const {
  Preference pref;
  pref.Set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_limit);
  for (const auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    pref.Set(attr, alignment_bytes);
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(count > 0 ? count : 1);
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, op_, w_layout_, x_layout_, y_layout_, y_layout_, pref.get(),
      static_cast<int>(results.size()), results.data(), &returned);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return {};
  CheckCublas(status, "cublasLtMatmulAlgoGetHeuristic");
  std::vector<cublasLtMatmulHeuristicResult_t> usable;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS &&
        results[i].workspaceSize <= workspace_limit) {
      usable.push_back(results[i]);
    }
  }
  return usable;
}

StatusOr<LtPlan> CublasLtDense::BuildAlgo(cublasLtHandle_t handle,
                                          const LtAlgoConfig& config) const {
  cublasLtMatmulAlgo_t algo{};
  cublasStatus_t status = cublasLtMatmulAlgoInit(
      handle, kComputeType, kScaleType, kDataType, kDataType, kDataType,
      kDataType, config.algo_id, &algo);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return FailedPreconditionError(
        CublasErrorMessage(status, "cublasLtMatmulAlgoInit") +
        " (algo_id=" + std::to_string(config.algo_id) + ")");
  }
  const struct {
    const char* name;
    cublasStatus_t status;
  } sets[] = {
      {"tile", SetConfig(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, config.tile)},
      {"stages",
       SetConfig(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, config.stages)},
      {"splitk",
       SetConfig(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, config.splitk)},
      {"reduction_scheme",
       SetConfig(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                 config.reduction_scheme)},
      {"swizzle",
       SetConfig(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, config.swizzle)},
      {"custom_option", SetConfig(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                  config.custom_option)},
      {"inner_shape", SetConfig(&algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
                                config.inner_shape)},
      {"cluster_shape", SetConfig(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                  config.cluster_shape)},
  };
  for (const auto& set : sets) {
    if (set.status != CUBLAS_STATUS_SUCCESS) {
      return FailedPreconditionError(
          CublasErrorMessage(set.status,
                             "cublasLtMatmulAlgoConfigSetAttribute") +
          " (" + set.name + ")");
    }
  }
  cublasLtMatmulHeuristicResult_t check{};
  status = cublasLtMatmulAlgoCheck(handle, op_, w_layout_, x_layout_, y_layout_,
                                   y_layout_, &algo, &check);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return FailedPreconditionError(
        CublasErrorMessage(status, "cublasLtMatmulAlgoCheck"));
  }
  LtPlan plan;
  plan.algo = algo;
  plan.workspace_bytes = check.workspaceSize;
  plan.min_alignment = MinAlignment(algo);
  return plan;
}

StatusOr<LtPlan> CublasLtDense::PlanFromHeuristic(
    const cublasLtMatmulHeuristicResult_t& heuristic) const {
  if (heuristic.state != CUBLAS_STATUS_SUCCESS) {
    return FailedPreconditionError(
        CublasErrorMessage(heuristic.state, "heuristic result"));
  }
  LtPlan plan;
  plan.algo = heuristic.algo;
  plan.workspace_bytes = heuristic.workspaceSize;
  plan.min_alignment = MinAlignment(heuristic.algo);
  return plan;
}

void CublasLtDense::Matmul(cublasLtHandle_t handle,
                           const cublasLtMatmulAlgo_t& algo, const void* x,
                           const void* w, void* y, void* workspace,
                           uint64_t workspace_bytes,
                           cudaStream_t stream) const {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  CheckCublas(cublasLtMatmul(handle, op_, &alpha, w, w_layout_, x, x_layout_,
                             &beta, y, y_layout_, y, y_layout_, &algo,
                             workspace, workspace_bytes, stream),
              "cublasLtMatmul");
}

}  // namespace gputune::kernels
