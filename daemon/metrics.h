// gputuned's metrics: a small registry of counters, gauges and histograms
// (lock-free to update), the Prometheus text exposition format (0.0.4) that
// `gputunectl metrics`, the GetMetrics RPC and --metrics_textfile share, and
// DaemonMetrics, the daemon's own set with the hooks the arbiter, the job
// queue and the gRPC server call.
//
// The text format is written here, checked with `promtool check metrics` in
// the tests. Debian 12 does package prometheus-cpp (prometheus-cpp-dev
// 1.0.1); moving onto its registry and serializer is issue 28, item 3.
//
// Nothing here is global: the Daemon owns its DaemonMetrics and hands
// pointers to what reports into it.
#ifndef GPUTUNE_DAEMON_METRICS_H_
#define GPUTUNE_DAEMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"

namespace gputune {

class Arbiter;
class ChangeFeed;
class FleetHooks;
class JobQueue;

// Label name/value pairs, in the order they are printed.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count. Thread-safe, lock-free.
class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down. Thread-safe, lock-free.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets (upper bounds, ascending), with
// their sum. Thread-safe, lock-free; a reader may see a sum and counts from
// slightly different moments, as Prometheus clients allow.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds()[i] (not cumulative); the last is +Inf.
  uint64_t bucket(size_t i) const {
    return buckets_[i].load(std::memory_order_relaxed);
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Named metrics and their text. Register at start-up (registration takes a
// lock; updates do not); a name registered twice must have the same type
// and help, and gets a new series (its labels must differ). Names and label
// names must match [a-zA-Z_][a-zA-Z0-9_]*.
class MetricsRegistry {
 public:
  // `constant_labels` go on every series (e.g. device="0").
  explicit MetricsRegistry(MetricLabels constant_labels);

  // The returned pointers live as long as the registry.
  Counter* AddCounter(const std::string& name, const std::string& help,
                      MetricLabels labels = {}) ABSL_LOCKS_EXCLUDED(mu_);
  Gauge* AddGauge(const std::string& name, const std::string& help,
                  MetricLabels labels = {}) ABSL_LOCKS_EXCLUDED(mu_);
  Histogram* AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> bounds, MetricLabels labels = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  // A counter or gauge whose value `read` gives when the text is rendered
  // (e.g. a queue's depth). `read` must not call the registry.
  enum class Type { kCounter, kGauge };
  void AddCallback(const std::string& name, const std::string& help, Type type,
                   std::function<double()> read, MetricLabels labels = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every metric in the Prometheus text format, families in registration
  // order, each with its # HELP and # TYPE lines.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::function<double()> read;
  };
  struct Family {
    std::string name;
    std::string help;
    Kind kind;
    std::vector<Series> series;
  };
  Series& AddSeries(const std::string& name, const std::string& help, Kind kind,
                    MetricLabels labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MetricLabels constant_labels_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
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

  // --- Hooks: thread-safe and lock-free; call them from anywhere. ---
  // The sweeper ended an expired lease.
  void ClaimExpired() { claims_expired_->Add(); }
  // A key entered BACKOFF.
  void BackoffEntered() { backoffs_->Add(); }
  // A TuneDense job ended: recorded an entry, or failed (abandoned);
  // `took` is its time on the device worker.
  void JobFinished(bool recorded, absl::Duration took);
  // Start-up moved a corrupt database aside.
  void DatabaseQuarantined() { quarantines_->Add(); }
  // Lookup or BatchLookup answered a key in `state` (a v1::KeyState).
  void KeyLookedUp(int state) {
    if (state > 0 && state < kKeyStates) lookups_[state]->Add();
  }
  // Claim answered with `outcome` (a v1::ClaimOutcome).
  void ClaimAnswered(int outcome) {
    if (outcome > 0 && outcome < kClaimOutcomes) claims_[outcome]->Add();
  }
  // Abandon ended a claim.
  void ClaimAbandoned() { claims_abandoned_->Add(); }

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
  Counter* lookups_[kKeyStates] = {};
  Counter* claims_[kClaimOutcomes] = {};
  Counter* claims_abandoned_ = nullptr;
  Counter* claims_expired_ = nullptr;
  Counter* backoffs_ = nullptr;
  Counter* jobs_recorded_ = nullptr;
  Counter* jobs_failed_ = nullptr;
  Histogram* job_seconds_ = nullptr;
  Counter* quarantines_ = nullptr;
  Gauge* in_flight_ = nullptr;
  Gauge* watch_streams_ = nullptr;
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
