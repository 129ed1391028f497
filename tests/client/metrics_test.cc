// gputuned's metrics under a scripted workload against the real daemon: the
// counters must move exactly as the script says, in `gputunectl metrics`
// (GetMetrics) and in the --metrics_textfile written for node_exporter.
// `promtool check metrics` (Debian's prometheus package) checks every text it
// can.
#include <filesystem>
#include <map>
#include <sstream>

#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"
#include "tests/support/metrics_text.h"

namespace gputune::testing {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          (name + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

TEST_CASE("metrics count a scripted workload, in the file and via gputunectl") {
  const std::string dir = TempDir("gputune_metrics_workload");
  const std::string file = dir + "/gputune-gpu0.prom";
  DaemonProcess daemon({"--backend=host", "--tune_budget=100ms",
                        "--backoff_abandons=2", "--metrics_interval=100ms",
                        "--metrics_textfile=" + file});
  ClientOptions options;
  options.memo_capacity = 0;  // every lookup reaches the daemon
  auto client = ClientOf(daemon, options);

  auto metrics = [&] {
    CtlResult r = RunCtl(daemon, {"metrics"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return r.out;
  };
  const auto before = Samples(metrics());
  auto moved = [&](const std::map<std::string, double>& now,
                   const std::string& series) {
    const std::string name = series.substr(0, series.find('{'));
    std::string labels = series.substr(name.size());
    labels =
        labels.empty() ? "{device=\"0\"}" : "{device=\"0\"," + labels.substr(1);
    INFO(series);
    const double was =
        before.count(name + labels) ? before.at(name + labels) : 0;
    REQUIRE(now.count(name + labels) == 1);
    return now.at(name + labels) - was;
  };

  // The script.
  const v1::Key a = CustomKey("a=1"), b = CustomKey("b=1"),
                c = CustomKey("c=1");
  REQUIRE(client->BatchLookup({a, b, c}).ok());  // 3 MISS
  MakeHit(*client, a);                           // claim granted + record
  REQUIRE(client->Lookup(a)->state() == v1::KEY_STATE_HIT);
  {
    absl::StatusOr<ClaimGuard> held = client->Claim(b);  // granted
    REQUIRE(held.ok());
    REQUIRE(client->Lookup(b)->state() == v1::KEY_STATE_PENDING);
    auto other = ClientOf(daemon, options);
    REQUIRE(other->Claim(b)->outcome() == v1::CLAIM_OUTCOME_PENDING);
    REQUIRE(held->Abandon("test").ok());  // abandoned 1
  }
  {
    absl::StatusOr<ClaimGuard> again = client->Claim(b);  // granted
    REQUIRE(again->Abandon("test").ok());  // abandoned 2: BACKOFF
  }
  REQUIRE(client->Lookup(b)->state() == v1::KEY_STATE_BACKOFF);
  {
    ClientOptions short_lease = options;
    short_lease.lease_ttl = absl::Milliseconds(200);
    auto brief = ClientOf(daemon, short_lease);
    absl::StatusOr<ClaimGuard> lapsing = brief->Claim(c);  // granted
    REQUIRE(lapsing->granted());
    lapsing->Release();  // nobody renews it: it expires
    REQUIRE(Eventually(
        [&] { return client->Lookup(c)->state() == v1::KEY_STATE_MISS; }));
    // Lookups see the lapse at once; the sweeper ends the claim (and counts
    // it) within 100 ms.
    REQUIRE(Eventually([&] {
      return moved(Samples(metrics()), "gputune_claims_expired_total") == 1;
    }));
  }
  // Lookups of c while waiting: counted as MISS or PENDING, read below.
  absl::StatusOr<v1::KeyStatus> tuned =
      client->TuneDense(DenseKey(1, 256, 512, "cs1"), /*wait=*/true);
  REQUIRE(tuned.ok());
  // A client with its memo on follows the change feed.
  auto following = ClientOf(daemon);
  REQUIRE(Eventually([&] {
    return Samples(metrics()).at("gputune_change_subscribers{device=\"0\"}") ==
           1;
  }));
  std::vector<v1::KeyStatus> seen;
  absl::StatusOr<std::unique_ptr<WatchStream>> watch =
      client->Watch(b, [&](const v1::KeyStatus& s) { seen.push_back(s); });
  REQUIRE(watch.ok());
  REQUIRE(Eventually([&] {
    return Samples(metrics()).at("gputune_watch_streams{device=\"0\"}") == 1;
  }));

  const auto now = Samples(metrics());
  const double c_lookups_miss_or_pending =
      moved(now, "gputune_lookups_total{state=\"miss\"}") +
      moved(now, "gputune_lookups_total{state=\"pending\"}") - 3 - 1;
  REQUIRE(c_lookups_miss_or_pending >= 1);  // the Eventually loop above
  REQUIRE(moved(now, "gputune_lookups_total{state=\"hit\"}") == 1);
  REQUIRE(moved(now, "gputune_lookups_total{state=\"backoff\"}") == 1);
  REQUIRE(moved(now, "gputune_claims_total{outcome=\"granted\"}") == 4);
  REQUIRE(moved(now, "gputune_claims_total{outcome=\"pending\"}") == 1);
  REQUIRE(moved(now, "gputune_claims_abandoned_total") == 2);
  REQUIRE(moved(now, "gputune_backoffs_total") == 1);
  REQUIRE(moved(now, "gputune_claims_expired_total") == 1);
  REQUIRE(moved(now, "gputune_tune_jobs_total{outcome=\"recorded\"}") == 1);
  REQUIRE(moved(now, "gputune_tune_jobs_total{outcome=\"failed\"}") == 0);
  REQUIRE(moved(now, "gputune_tune_job_duration_seconds_count") == 1);
  REQUIRE(moved(now, "gputune_device_busy_seconds_total") > 0);
  REQUIRE(moved(now, "gputune_rpcs_total{method=\"Record\"}") == 1);
  REQUIRE(moved(now, "gputune_rpcs_total{method=\"BatchLookup\"}") == 1);
  REQUIRE(moved(now, "gputune_rpc_duration_seconds_count{method=\"Record\"}") ==
          1);
  REQUIRE(now.at("gputune_entries{device=\"0\"}") == 2);
  // Two records: a's and the tuned dense key's.
  REQUIRE(moved(now, "gputune_changes_published_total") == 2);
  REQUIRE(now.at("gputune_change_subscribers_cut_off_total{device=\"0\"}") ==
          0);
  REQUIRE(now.at("gputune_backoff_keys{device=\"0\"}") == 1);
  REQUIRE(now.at("gputune_tune_queue_depth{device=\"0\"}") == 0);
  REQUIRE(now.at("gputune_db_size_bytes{device=\"0\"}") > 0);
  REQUIRE(now.at("gputune_rpcs_in_flight{device=\"0\"}") >= 2);  // Watch + us
  const double hits =
      now.at("gputune_lookups_total{device=\"0\",state=\"hit\"}");
  double all = 0;
  for (const char* s : {"miss", "pending", "hit", "stale", "backoff"}) {
    all += now.at(std::string("gputune_lookups_total{device=\"0\",state=\"") +
                  s + "\"}");
  }
  REQUIRE(now.at("gputune_lookup_hit_ratio{device=\"0\"}") ==
          Approx(hits / all));

  // The file says the same within an interval, and passes promtool.
  REQUIRE(Eventually(
      [&] {
        auto in_file = Samples(ReadFile(file));
        return in_file.count("gputune_backoffs_total{device=\"0\"}") == 1 &&
               in_file.at("gputune_backoffs_total{device=\"0\"}") ==
                   now.at("gputune_backoffs_total{device=\"0\"}") &&
               in_file.at(
                   "gputune_tune_jobs_total{device=\"0\",outcome="
                   "\"recorded\"}") == 1;
      },
      std::chrono::milliseconds(5000)));
  const std::string text = ReadFile(file);
  // A series' own labels follow device (and uuid) by name.
  REQUIRE(text.find("gputune_info{device=\"0\",backend=\"host\",revision=\"") !=
          std::string::npos);
  REQUIRE(Promtool(dir, text) == "");
  REQUIRE(Promtool(dir, metrics()) == "");
  watch->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gputune::testing
