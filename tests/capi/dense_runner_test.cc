// gputune::DenseRunner (libgputune_dense.so) where no CUDA device is
// usable: Create says which CUDA call failed and what to check. (On a GPU
// the replay itself is exercised by python/tests/test_torch.py.)
#include "gputune/dense_runner.h"

#include <string>

#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

TEST_CASE("a dense runner without a usable device says why") {
  absl::StatusOr<std::unique_ptr<DenseRunner>> runner = DenseRunner::Create();
  if (runner.ok()) {
    SUCCEED("skipped: a CUDA device is usable here");
    DenseArgs args;  // M = N = K = 0
    absl::StatusOr<DenseRun> run = (*runner)->Run(v1::Execution(), args);
    REQUIRE(run.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  REQUIRE(runner.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string why(runner.status().message());
  REQUIRE(why.find("cannot run dense executions here") != std::string::npos);
  REQUIRE(why.find("cudaGetDevice") != std::string::npos);
  REQUIRE(why.find("CUDA_VISIBLE_DEVICES") != std::string::npos);
}

}  // namespace
}  // namespace gputune::testing
