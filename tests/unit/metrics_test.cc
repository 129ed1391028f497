// The metrics registry's Prometheus text (prometheus-cpp's registry and
// serializer, in the order and with the callbacks daemon/metrics.h adds)
// and the atomic textfile writer. The daemon's own metrics, under a workload,
// are tested in tests/client/metrics_test.cc.
#include "daemon/metrics.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/support/catch.h"
#include "tests/support/metrics_text.h"

namespace gputune {
namespace {

TEST_CASE(
    "the registry writes the Prometheus text format: families in "
    "registration order, series by their labels") {
  MetricsRegistry registry({{"uuid", "GPU-1"}, {"device", "0"}});
  // A gauge first: prometheus-cpp's registry alone would list every counter
  // family before every gauge family.
  prometheus::Gauge* depth =
      registry.AddGauge("test_queue_depth", "Jobs waiting now.");
  // Neither in the order of their labels nor in the reverse.
  prometheus::Counter* hits =
      registry.AddCounter("test_lookups_total", "Lookups.", {{"state", "hit"}});
  prometheus::Counter* misses = registry.AddCounter(
      "test_lookups_total", "Lookups.", {{"state", "miss"}});
  registry.AddCounter("test_lookups_total", "Lookups.", {{"state", "backoff"}});
  prometheus::Histogram* seconds =
      registry.AddHistogram("test_job_seconds", "Job time.", {0.5, 1, 2});
  registry.AddCallback("test_ratio", "A ratio.", prometheus::MetricType::Gauge,
                       [] { return 0.25; }, {{"note", "say \"hi\"\\"}});
  registry.AddCallback("test_build_info", "The build.",
                       prometheus::MetricType::Gauge, [] { return 1.0; },
                       {{"version", "0.1.0"}, {"backend", "host"}});
  hits->Increment(3);
  misses->Increment();
  depth->Set(7);
  depth->Decrement(2);
  for (double v : {0.1, 0.5, 0.75, 3.0}) seconds->Observe(v);

  const std::string text = registry.Render();
  // Buckets are cumulative; an observation on a bound is in its bucket.
  CHECK(text == R"(# HELP test_queue_depth Jobs waiting now.
# TYPE test_queue_depth gauge
test_queue_depth{device="0",uuid="GPU-1"} 5
# HELP test_lookups_total Lookups.
# TYPE test_lookups_total counter
test_lookups_total{device="0",uuid="GPU-1",state="backoff"} 0
test_lookups_total{device="0",uuid="GPU-1",state="hit"} 3
test_lookups_total{device="0",uuid="GPU-1",state="miss"} 1
# HELP test_job_seconds Job time.
# TYPE test_job_seconds histogram
test_job_seconds_count{device="0",uuid="GPU-1"} 4
test_job_seconds_sum{device="0",uuid="GPU-1"} 4.35
test_job_seconds_bucket{device="0",uuid="GPU-1",le="0.5"} 2
test_job_seconds_bucket{device="0",uuid="GPU-1",le="1"} 3
test_job_seconds_bucket{device="0",uuid="GPU-1",le="2"} 3
test_job_seconds_bucket{device="0",uuid="GPU-1",le="+Inf"} 4
# HELP test_ratio A ratio.
# TYPE test_ratio gauge
test_ratio{device="0",uuid="GPU-1",note="say \"hi\"\\"} 0.25
# HELP test_build_info The build.
# TYPE test_build_info gauge
test_build_info{device="0",uuid="GPU-1",backend="host",version="0.1.0"} 1
)");
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("gputune_metrics_text_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  CHECK(testing::Promtool(dir, text) == "");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a callback series is read at every render, not before") {
  MetricsRegistry registry(prometheus::Labels{{"device", "0"}});
  int reads = 0;
  registry.AddCallback("test_reads_total", "Renders.",
                       prometheus::MetricType::Counter,
                       [&reads] { return static_cast<double>(++reads); });
  CHECK(reads == 0);
  CHECK(registry.Render().find("test_reads_total{device=\"0\"} 1\n") !=
        std::string::npos);
  CHECK(registry.Render().find("test_reads_total{device=\"0\"} 2\n") !=
        std::string::npos);
  CHECK(registry.Render().find("# TYPE test_reads_total counter\n") !=
        std::string::npos);
}

TEST_CASE("the textfile is replaced atomically and errors name the file") {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("gputune_metrics_file_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/gputune.prom";
  REQUIRE(MetricsTextfileWriter::WriteAtomically(path, "a 1\n").ok());
  REQUIRE(MetricsTextfileWriter::WriteAtomically(path, "a 2\n").ok());
  REQUIRE(testing::ReadFile(path) == "a 2\n");
  REQUIRE(!std::filesystem::exists(path + ".tmp"));
  absl::Status missing =
      MetricsTextfileWriter::WriteAtomically(dir + "/none/x.prom", "a 1\n");
  REQUIRE(!missing.ok());
  REQUIRE(missing.message().find(dir + "/none/x.prom.tmp") !=
          absl::string_view::npos);
  REQUIRE(missing.message().find("does the directory exist") !=
          absl::string_view::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gputune
