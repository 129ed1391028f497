// The benchmark engine over the CUDA backend: what it chooses is never slower
// than cuBLASLt's default beyond noise. Skips (and says so) without a device.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/engine.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

using testing::MakeBackend;
using testing::Must;
using testing::ShapeName;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST_CASE(
    "the engine's choice is never slower than cuBLASLt's default beyond "
    "noise") {
  GPUTUNE_SKIP_WITHOUT_GPU();
  auto backend = MakeBackend();
  for (const DenseShape shape : {DenseShape{.m = 1, .n = 4096, .k = 4096},
                                 DenseShape{.m = 16, .n = 4096, .k = 14336},
                                 DenseShape{.m = 128, .n = 6144, .k = 4096}}) {
    INFO(ShapeName(shape));
    TuneOptions options;
    options.budget_seconds = 0.5;
    const TuneReport report = TuneDense(*backend, shape, options);
    INFO(report.status.message());
    REQUIRE(report.status.ok());
    const Execution& by_default = report.candidates.front().execution;
    INFO("chosen " << report.chosen.ToString() << ", default "
                   << by_default.ToString());

    // Measure both again, interleaved so drift hits both alike, with enough
    // reps per sample to be well above event resolution.
    auto workload = Must(backend->Prepare(shape, 11));
    const double once = Must(backend->TimeSample(*workload, by_default, 1));
    const int reps = std::clamp(static_cast<int>(200e-6 / once), 1, 1000);
    std::vector<double> chosen, baseline;
    for (int i = 0; i < 15; ++i) {
      baseline.push_back(
          Must(backend->TimeSample(*workload, by_default, reps)));
      chosen.push_back(
          Must(backend->TimeSample(*workload, report.chosen, reps)));
    }
    const double chosen_s = Median(chosen);
    const double default_s = Median(baseline);
    INFO("chosen " << chosen_s * 1e6 << " us, default " << default_s * 1e6
                   << " us");
    CHECK(chosen_s <= default_s * 1.05);
  }
}

}  // namespace
}  // namespace gputune::kernels
