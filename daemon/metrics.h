// gputuned's metrics: prometheus-cpp's registry of counters, gauges and
// histograms (Debian's prometheus-cpp-dev), series read from the daemon's
// state when the text is rendered, the Prometheus text exposition format
// (0.0.4, prometheus-cpp's TextSerializer) that `gputunectl metrics`, the
// GetMetrics RPC and --metrics_textfile share, and DaemonMetrics, the
// daemon's own set with the hooks the arbiter, the job queue and the gRPC
// server call. The text is checked with `promtool check metrics` in the
// tests.
//
// Nothing here is global: the Daemon owns its DaemonMetrics and hands
// pointers to what reports into it.
#ifndef GPUTUNE_DAEMON_METRICS_H_
#define GPUTUNE_DAEMON_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "prometheus/registry.h"

namespace gputune {

class Arbiter;
class ChangeFeed;
class FleetHooks;
class JobQueue;

// Named metrics and their text: a prometheus::Registry that puts constant
// labels on every family, keeps the families in registration order, and adds
// series whose value a callback gives when the text is rendered (as a
// prometheus::Collectable, so it also serves any prometheus-cpp exposer).
//
// Register at start-up (registration takes locks; updating a counter or a
// gauge does not, a histogram's Observe takes its own short one). A name
// registered twice must have the same type and help, and gets another series
// (labels that differ; the same labels give the same series). A family holds
// either registered series or callbacks, not both. Names and label names
// must match [a-zA-Z_][a-zA-Z0-9_]*; a series' label names must not start
// with "__", nor be "le" or a constant label's; help must not hold a
// backslash or a newline (prometheus-cpp writes it unescaped). Registration
// is code, not input: breaking these rules aborts.
class MetricsRegistry final : public prometheus::Collectable {
 public:
  // `constant_labels` go on every series (e.g. device="0").
  explicit MetricsRegistry(prometheus::Labels constant_labels);

  // The returned pointers live as long as the registry.
  prometheus::Counter* AddCounter(const std::string& name,
                                  const std::string& help,
                                  const prometheus::Labels& labels = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::Gauge* AddGauge(const std::string& name, const std::string& help,
                              const prometheus::Labels& labels = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  // `bounds`: the buckets' upper bounds, strictly ascending (+Inf is added).
  prometheus::Histogram* AddHistogram(
      const std::string& name, const std::string& help,
      const prometheus::Histogram::BucketBoundaries& bounds,
      const prometheus::Labels& labels = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // A counter or gauge (`type`) whose value `read` gives when the text is
  // rendered (e.g. a queue's depth). `read` must not call the registry.
  void AddCallback(const std::string& name, const std::string& help,
                   prometheus::MetricType type, std::function<double()> read,
                   const prometheus::Labels& labels = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every family, in registration order; the series of a family in the
  // order of their labels.
  std::vector<prometheus::MetricFamily> Collect() const override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Collect() in the Prometheus text format: each family with its # HELP and
  // # TYPE lines.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Callback {
    prometheus::Labels labels;
    std::function<double()> read;
  };
  struct Family {
    std::string name;
    std::string help;
    prometheus::MetricType type;
    bool callbacks;               // its series are `read`, not registered
    std::vector<Callback> reads;  // when `callbacks`
  };
  // The family `name`, made on first use; aborts on a rule broken.
  Family& Declare(const std::string& name, const std::string& help,
                  prometheus::MetricType type, bool callbacks,
                  const prometheus::Labels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const prometheus::Labels constant_labels_;
  prometheus::Registry registry_;  // locks itself
  mutable absl::Mutex mu_;
  std::vector<Family> families_ ABSL_GUARDED_BY(mu_);  // registration order
};

// The daemon's metrics (docs/metrics.md lists them). Every series carries
// device="<--device>" and, when the backend knows it, uuid="<GPU UUID>".
class DaemonMetrics {
 public:
  struct Identity {
    std::string device;   // --device
    std::string uuid;     // fingerprint.device_uuid; may be empty
    std::string backend;  // "cuda", "host", "none", "fault"
    std::string version;
    std::string revision;  // git revision of the build
  };
  explicit DaemonMetrics(const Identity& identity);
  ~DaemonMetrics();
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // --- Hooks: thread-safe; call them from anywhere. JobFinished and
  // CallEnded take a histogram's short lock, the others are lock-free. ---
  // The sweeper ended an expired lease.
  void ClaimExpired() { claims_expired_->Increment(); }
  // A key entered BACKOFF.
  void BackoffEntered() { backoffs_->Increment(); }
  // A TuneDense job ended: recorded an entry, or failed (abandoned);
  // `took` is its time on the device worker.
  void JobFinished(bool recorded, absl::Duration took);
  // Start-up moved a corrupt database aside.
  void DatabaseQuarantined() { quarantines_->Increment(); }
  // Lookup or BatchLookup answered a key in `state` (a v1::KeyState).
  void KeyLookedUp(int state) {
    if (state > 0 && state < kKeyStates) lookups_[state]->Increment();
  }
  // Claim answered with `outcome` (a v1::ClaimOutcome).
  void ClaimAnswered(int outcome) {
    if (outcome > 0 && outcome < kClaimOutcomes) claims_[outcome]->Increment();
  }
  // Abandon ended a claim.
  void ClaimAbandoned() { claims_abandoned_->Increment(); }

  // Values read when the text is rendered: the queue, the claims and the
  // entries, and the size of the database files. Every pointer must outlive
  // this object; call once, before serving.
  void ReadFrom(const JobQueue* jobs, const Arbiter* arbiter,
                const std::string& database_path);
  // The fleet link's state (gputune_fleet_*: connected, outbox depth, feed
  // lag and backlog, fleet claims held and waited on, publishes, adoptions,
  // refusals and errors), read when the text is rendered. `fleet` must
  // outlive this object; call once, before serving, and only with a fleet.
  void ReadFleetFrom(const FleetHooks* fleet);
  // The change feed's state (gputune_change_*: changes published,
  // SubscribeChanges streams open, subscribers cut off for falling behind),
  // read when the text is rendered. `feed` must outlive this object; call
  // once, before serving.
  void ReadChangesFrom(const ChangeFeed* feed);

  // Interceptors that count every RPC of the gputune services (by method
  // and status code, and how long it took), the calls in flight and the
  // Watch streams open; what the calls answered is counted by the service
  // (the hooks above). For grpc::ServerBuilder::experimental().
  // SetInterceptorCreators; this object must outlive the server.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  InterceptorFactories();

  // The text of GetMetrics and the textfile.
  std::string Render() const { return registry_.Render(); }

  // For the interceptors: a method by its full name
  // ("/gputune.v1.TuneService/Lookup").
  struct Method;
  const Method* FindMethod(absl::string_view full_name) const;
  void CallStarted(const Method& m);
  void CallEnded(const Method& m, int code, absl::Duration took);

 private:
  MetricsRegistry registry_;
  static constexpr int kKeyStates = 6;      // v1::KeyState's values
  static constexpr int kClaimOutcomes = 5;  // v1::ClaimOutcome's values
  prometheus::Counter* lookups_[kKeyStates] = {};
  prometheus::Counter* claims_[kClaimOutcomes] = {};
  prometheus::Counter* claims_abandoned_ = nullptr;
  prometheus::Counter* claims_expired_ = nullptr;
  prometheus::Counter* backoffs_ = nullptr;
  prometheus::Counter* jobs_recorded_ = nullptr;
  prometheus::Counter* jobs_failed_ = nullptr;
  prometheus::Histogram* job_seconds_ = nullptr;
  prometheus::Counter* device_busy_seconds_ = nullptr;  // job_seconds_' sum
  prometheus::Counter* quarantines_ = nullptr;
  prometheus::Gauge* in_flight_ = nullptr;
  prometheus::Gauge* watch_streams_ = nullptr;
  // Built in the constructor, read-only after: no lock.
  absl::flat_hash_map<std::string, std::unique_ptr<Method>> methods_;
};

// Writes metrics to `path` every `interval` (and once more when destroyed),
// each time to "<path>.tmp" and renamed over `path`, so that a reader
// (node_exporter) never sees a half-written file.
class MetricsTextfileWriter {
 public:
  MetricsTextfileWriter(const DaemonMetrics* metrics, std::string path,
                        absl::Duration interval);
  ~MetricsTextfileWriter();
  MetricsTextfileWriter(const MetricsTextfileWriter&) = delete;
  MetricsTextfileWriter& operator=(const MetricsTextfileWriter&) = delete;

  // `text` to `path` through "<path>.tmp" + rename. The error names the
  // file and what to check.
  static absl::Status WriteAtomically(const std::string& path,
                                      const std::string& text);

 private:
  void WriteOnce();

  const DaemonMetrics* const metrics_;
  const std::string path_;
  const absl::Duration interval_;
  absl::Notification stop_;
  bool last_failed_ = false;  // the writer thread's: log a failure once
  std::thread thread_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_METRICS_H_
