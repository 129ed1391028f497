// The metrics registry's Prometheus text and the atomic textfile writer
// (daemon/metrics.h). The daemon's own metrics, under a workload, are tested
// in tests/client/metrics_test.cc.
#include "daemon/metrics.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/catch.h"

namespace gputune {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("the registry writes the Prometheus text format") {
  MetricsRegistry registry({{"device", "0"}, {"uuid", "GPU-1"}});
  Counter* hits =
      registry.AddCounter("test_lookups_total", "Lookups.", {{"state", "hit"}});
  Counter* misses = registry.AddCounter("test_lookups_total", "Lookups.",
                                        {{"state", "miss"}});
  Gauge* depth = registry.AddGauge("test_queue_depth", "Jobs\\waiting\nnow.");
  Histogram* seconds =
      registry.AddHistogram("test_job_seconds", "Job time.", {0.5, 1, 2});
  registry.AddCallback("test_ratio", "A ratio.", MetricsRegistry::Type::kGauge,
                       [] { return 0.25; }, {{"note", "say \"hi\"\\"}});
  hits->Add(3);
  misses->Add();
  depth->Set(7);
  depth->Add(-2);
  for (double v : {0.1, 0.5, 0.75, 3.0}) seconds->Observe(v);

  const std::string text = registry.Render();
  INFO(text);
  REQUIRE(text.find("# HELP test_lookups_total Lookups.\n"
                    "# TYPE test_lookups_total counter\n"
                    "test_lookups_total{device=\"0\",uuid=\"GPU-1\","
                    "state=\"hit\"} 3\n"
                    "test_lookups_total{device=\"0\",uuid=\"GPU-1\","
                    "state=\"miss\"} 1\n") != std::string::npos);
  REQUIRE(text.find("# HELP test_queue_depth Jobs\\\\waiting\\nnow.\n") !=
          std::string::npos);
  REQUIRE(text.find("test_queue_depth{device=\"0\",uuid=\"GPU-1\"} 5\n") !=
          std::string::npos);
  // Buckets are cumulative; an observation on a bound is in its bucket.
  const std::string base = "{device=\"0\",uuid=\"GPU-1\"";
  REQUIRE(text.find("# TYPE test_job_seconds histogram\n"
                    "test_job_seconds_bucket" +
                    base +
                    ",le=\"0.5\"} 2\n"
                    "test_job_seconds_bucket" +
                    base +
                    ",le=\"1\"} 3\n"
                    "test_job_seconds_bucket" +
                    base +
                    ",le=\"2\"} 3\n"
                    "test_job_seconds_bucket" +
                    base +
                    ",le=\"+Inf\"} 4\n"
                    "test_job_seconds_sum" +
                    base +
                    "} 4.35\n"
                    "test_job_seconds_count" +
                    base + "} 4\n") != std::string::npos);
  REQUIRE(text.find("note=\"say \\\"hi\\\"\\\\\"} 0.25\n") !=
          std::string::npos);
}

TEST_CASE("the textfile is replaced atomically and errors name the file") {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("gputune_metrics_file_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/gputune.prom";
  REQUIRE(MetricsTextfileWriter::WriteAtomically(path, "a 1\n").ok());
  REQUIRE(MetricsTextfileWriter::WriteAtomically(path, "a 2\n").ok());
  REQUIRE(ReadFile(path) == "a 2\n");
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
