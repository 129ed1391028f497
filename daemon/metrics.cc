#include "daemon/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/arbiter.h"
#include "daemon/change_feed.h"
#include "daemon/fleet_hooks.h"
#include "daemon/job_queue.h"
#include "google/protobuf/descriptor.h"
#include "gputune/v1/tune.pb.h"
#include "prometheus/check_names.h"
#include "prometheus/client_metric.h"
#include "prometheus/family.h"
#include "prometheus/text_serializer.h"
#include "proto/proto_time.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

[[noreturn]] void Misuse(absl::string_view what, absl::string_view name) {
  spdlog::critical("metrics: {}: {}", std::string(what), std::string(name));
  std::abort();
}

const prometheus::Histogram::BucketBoundaries& JobBounds() {
  static const auto* bounds = new prometheus::Histogram::BucketBoundaries{
      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return *bounds;
}

const prometheus::Histogram::BucketBoundaries& RpcBounds() {
  static const auto* bounds = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5};
  return *bounds;
}

// The size of a file, 0 when it is missing.
double FileBytes(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<double>(size);
}

// A series' labels as prometheus-cpp's families list them: the constant
// ones, then its own, each by name.
std::vector<prometheus::ClientMetric::Label> LabelList(
    const prometheus::Labels& constant, const prometheus::Labels& own) {
  std::vector<prometheus::ClientMetric::Label> out;
  for (const prometheus::Labels* list : {&constant, &own}) {
    for (const auto& [name, value] : *list) out.push_back({name, value});
  }
  return out;
}

// prometheus-cpp's family `name` in `registry`, with `constant` labels
// (made on first use; the same name and labels give the same family).
template <typename T>
prometheus::Family<T>& FamilyIn(prometheus::detail::Builder<T> builder,
                                const std::string& name,
                                const std::string& help,
                                const prometheus::Labels& constant,
                                prometheus::Registry& registry) {
  return builder.Name(name).Help(help).Labels(constant).Register(registry);
}

}  // namespace

// --- MetricsRegistry --------------------------------------------------------

MetricsRegistry::MetricsRegistry(prometheus::Labels constant_labels)
    : constant_labels_(std::move(constant_labels)),
      registry_(prometheus::Registry::InsertBehavior::Merge) {}

MetricsRegistry::Family& MetricsRegistry::Declare(
    const std::string& name, const std::string& help,
    prometheus::MetricType type, bool callbacks,
    const prometheus::Labels& labels) {
  bool valid = prometheus::CheckMetricName(name) &&
               help.find_first_of("\\\n") == std::string::npos;
  for (const auto& [label, value] : labels) {
    valid = valid && prometheus::CheckLabelName(label) && label != "le" &&
            !constant_labels_.contains(label);
  }
  if (!valid) Misuse("invalid name, label or help", name);
  for (Family& f : families_) {
    if (f.name != name) continue;
    if (f.type != type || f.help != help || f.callbacks != callbacks) {
      Misuse("registered again with another type, help or kind", name);
    }
    return f;
  }
  families_.push_back(Family{name, help, type, callbacks, {}});
  return families_.back();
}

prometheus::Counter* MetricsRegistry::AddCounter(
    const std::string& name, const std::string& help,
    const prometheus::Labels& labels) {
  absl::MutexLock lock(&mu_);
  Declare(name, help, prometheus::MetricType::Counter, false, labels);
  return &FamilyIn(prometheus::BuildCounter(), name, help, constant_labels_,
                   registry_)
              .Add(labels);
}

prometheus::Gauge* MetricsRegistry::AddGauge(const std::string& name,
                                             const std::string& help,
                                             const prometheus::Labels& labels) {
  absl::MutexLock lock(&mu_);
  Declare(name, help, prometheus::MetricType::Gauge, false, labels);
  return &FamilyIn(prometheus::BuildGauge(), name, help, constant_labels_,
                   registry_)
              .Add(labels);
}

prometheus::Histogram* MetricsRegistry::AddHistogram(
    const std::string& name, const std::string& help,
    const prometheus::Histogram::BucketBoundaries& bounds,
    const prometheus::Labels& labels) {
  absl::MutexLock lock(&mu_);
  Declare(name, help, prometheus::MetricType::Histogram, false, labels);
  if (!std::is_sorted(bounds.begin(), bounds.end()) ||
      std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end()) {
    Misuse("histogram bounds not strictly ascending", name);
  }
  return &FamilyIn(prometheus::BuildHistogram(), name, help, constant_labels_,
                   registry_)
              .Add(labels, bounds);
}

void MetricsRegistry::AddCallback(const std::string& name,
                                  const std::string& help,
                                  prometheus::MetricType type,
                                  std::function<double()> read,
                                  const prometheus::Labels& labels) {
  if (type != prometheus::MetricType::Counter &&
      type != prometheus::MetricType::Gauge) {
    Misuse("a callback is a counter or a gauge", name);
  }
  absl::MutexLock lock(&mu_);
  Declare(name, help, type, true, labels)
      .reads.push_back(Callback{labels, std::move(read)});
}

std::vector<prometheus::MetricFamily> MetricsRegistry::Collect() const {
  std::vector<prometheus::MetricFamily> registered = registry_.Collect();
  absl::MutexLock lock(&mu_);
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families_.size());
  for (const Family& f : families_) {
    if (!f.callbacks) {
      // Registered under this name once (the constant labels are always the
      // same): move it here, in registration order.
      auto it = std::find_if(
          registered.begin(), registered.end(),
          [&](const prometheus::MetricFamily& r) { return r.name == f.name; });
      if (it == registered.end()) continue;
      out.push_back(std::move(*it));
    } else {
      prometheus::MetricFamily family{f.name, f.help, f.type, {}};
      for (const Callback& c : f.reads) {
        prometheus::ClientMetric& m = family.metric.emplace_back();
        m.label = LabelList(constant_labels_, c.labels);
        const double value = c.read();
        if (f.type == prometheus::MetricType::Counter) {
          m.counter.value = value;
        } else {
          m.gauge.value = value;
        }
      }
      out.push_back(std::move(family));
    }
    // A family keeps its series in a hash map: sort them, so that the text
    // is the same from one render to the next.
    std::sort(
        out.back().metric.begin(), out.back().metric.end(),
        [](const prometheus::ClientMetric& a,
           const prometheus::ClientMetric& b) { return a.label < b.label; });
  }
  return out;
}

std::string MetricsRegistry::Render() const {
  return prometheus::TextSerializer().Serialize(Collect());
}

// --- DaemonMetrics ---------------------------------------------------------

struct DaemonMetrics::Method {
  std::string name;  // "Lookup"
  bool streaming = false;
  bool watch = false;  // TuneService.Watch (gputune_watch_streams)
  prometheus::Counter* calls = nullptr;
  prometheus::Counter* errors = nullptr;
  prometheus::Histogram* seconds = nullptr;  // unary calls only
};

DaemonMetrics::DaemonMetrics(const Identity& identity)
    : registry_([&] {
        prometheus::Labels labels = {{"device", identity.device}};
        if (!identity.uuid.empty()) labels.emplace("uuid", identity.uuid);
        return labels;
      }()) {
  registry_
      .AddGauge("gputune_info",
                "Always 1; the labels say which gputuned this is.",
                {{"version", identity.version},
                 {"revision", identity.revision},
                 {"backend", identity.backend}})
      ->Set(1);
  registry_
      .AddGauge("gputune_start_time_seconds",
                "When this gputuned started (Unix time).")
      ->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));

  const char* kLookupHelp =
      "Keys answered by Lookup and BatchLookup, by the state they were in.";
  for (int state = v1::KEY_STATE_MISS; state <= v1::KEY_STATE_BACKOFF;
       ++state) {
    std::string name = absl::AsciiStrToLower(v1::KeyState_Name(state));
    name.erase(0, std::strlen("key_state_"));
    lookups_[state] = registry_.AddCounter("gputune_lookups_total", kLookupHelp,
                                           {{"state", name}});
  }
  registry_.AddCallback(
      "gputune_lookup_hit_ratio",
      "HITs among the keys looked up since start (0 before the first).",
      prometheus::MetricType::Gauge, [this] {
        double all = 0;
        for (int s = v1::KEY_STATE_MISS; s <= v1::KEY_STATE_BACKOFF; ++s) {
          all += lookups_[s]->Value();
        }
        return all == 0 ? 0.0 : lookups_[v1::KEY_STATE_HIT]->Value() / all;
      });

  const char* kClaimHelp = "Claim calls answered, by outcome.";
  for (int outcome = v1::CLAIM_OUTCOME_GRANTED;
       outcome <= v1::CLAIM_OUTCOME_BACKOFF; ++outcome) {
    std::string name = absl::AsciiStrToLower(v1::ClaimOutcome_Name(outcome));
    name.erase(0, std::strlen("claim_outcome_"));
    claims_[outcome] = registry_.AddCounter("gputune_claims_total", kClaimHelp,
                                            {{"outcome", name}});
  }
  claims_abandoned_ = registry_.AddCounter("gputune_claims_abandoned_total",
                                           "Claims abandoned by clients.");
  claims_expired_ = registry_.AddCounter(
      "gputune_claims_expired_total",
      "Claims whose lease ran out (ended by the 100 ms sweeper).");
  backoffs_ = registry_.AddCounter(
      "gputune_backoffs_total",
      "Times a key entered BACKOFF after repeated abandons.");

  const char* kJobsHelp = "TuneDense benchmark jobs finished, by outcome.";
  jobs_recorded_ = registry_.AddCounter("gputune_tune_jobs_total", kJobsHelp,
                                        {{"outcome", "recorded"}});
  jobs_failed_ = registry_.AddCounter("gputune_tune_jobs_total", kJobsHelp,
                                      {{"outcome", "failed"}});
  job_seconds_ = registry_.AddHistogram(
      "gputune_tune_job_duration_seconds",
      "Time TuneDense jobs spent on the device worker.", JobBounds());
  device_busy_seconds_ = registry_.AddCounter(
      "gputune_device_busy_seconds_total",
      "Time the device worker spent running benchmark jobs.");
  quarantines_ = registry_.AddCounter(
      "gputune_db_quarantine_events_total",
      "Corrupt databases moved aside at start (since this start: 0 or 1).");

  in_flight_ = registry_.AddGauge(
      "gputune_rpcs_in_flight",
      "gputune RPCs being served now, streams included (each client "
      "connection has at least one while it waits on the daemon).");
  watch_streams_ = registry_.AddGauge("gputune_watch_streams",
                                      "Watch streams open: clients waiting "
                                      "for a key to change.");
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* service :
       {"gputune.v1.TuneService", "gputune.v1.AdminService"}) {
    const google::protobuf::ServiceDescriptor* s =
        pool->FindServiceByName(service);
    if (s == nullptr) continue;
    for (int i = 0; i < s->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = s->method(i);
      auto method = std::make_unique<Method>();
      method->name = m->name();
      method->streaming = m->server_streaming() || m->client_streaming();
      // SubscribeChanges streams have their own gauge
      // (gputune_change_subscribers).
      method->watch = m->name() == "Watch";
      const prometheus::Labels labels = {{"method", m->name()}};
      method->calls = registry_.AddCounter(
          "gputune_rpcs_total", "gputune RPCs finished, by method.", labels);
      method->errors = registry_.AddCounter(
          "gputune_rpc_errors_total",
          "gputune RPCs that ended with an error status, by method.", labels);
      if (!method->streaming) {
        method->seconds = registry_.AddHistogram(
            "gputune_rpc_duration_seconds",
            "Time from a unary call's arrival to its status, by method. "
            "Record, DeleteEntries and ImportEntries are database writes "
            "and their commit: their series is the write latency.",
            RpcBounds(), labels);
      }
      methods_[absl::StrCat("/", service, "/", m->name())] = std::move(method);
    }
  }
}

DaemonMetrics::~DaemonMetrics() = default;

void DaemonMetrics::JobFinished(bool recorded, absl::Duration took) {
  (recorded ? jobs_recorded_ : jobs_failed_)->Increment();
  const double seconds = absl::ToDoubleSeconds(took);
  job_seconds_->Observe(seconds);
  device_busy_seconds_->Increment(seconds);
}

void DaemonMetrics::ReadFrom(const JobQueue* jobs, const Arbiter* arbiter,
                             const std::string& database_path) {
  constexpr auto kGauge = prometheus::MetricType::Gauge;
  if (jobs != nullptr) {
    registry_.AddCallback(
        "gputune_tune_queue_depth", "Benchmark jobs waiting.", kGauge,
        [jobs] { return static_cast<double>(jobs->GetStats().queue_depth); });
    registry_.AddCallback(
        "gputune_tune_queue_capacity",
        "Benchmark jobs that may wait (then TuneDense is refused).", kGauge,
        [jobs] { return static_cast<double>(jobs->GetStats().capacity); });
    registry_.AddCallback(
        "gputune_tune_job_running", "1 while a benchmark job runs.", kGauge,
        [jobs] { return jobs->GetStats().running ? 1.0 : 0.0; });
    registry_.AddCallback(
        "gputune_device_ready",
        "1 when TuneDense can benchmark (a backend, and the device not lost).",
        kGauge, [jobs] { return jobs->ready() ? 1.0 : 0.0; });
  }
  if (arbiter != nullptr) {
    registry_.AddCallback(
        "gputune_entries", "Entries in the cache.", kGauge,
        [arbiter] { return static_cast<double>(arbiter->GetStats().entries); });
    registry_.AddCallback(
        "gputune_stale_entries",
        "Entries STALE for this daemon's device fingerprint.", kGauge,
        [arbiter] {
          return static_cast<double>(arbiter->GetStats().stale_entries);
        });
    registry_.AddCallback(
        "gputune_claims_live", "Live claims.", kGauge, [arbiter] {
          return static_cast<double>(arbiter->GetStats().claims.size());
        });
    registry_.AddCallback(
        "gputune_backoff_keys", "Keys in BACKOFF now.", kGauge, [arbiter] {
          return static_cast<double>(arbiter->GetStats().backoff_keys);
        });
  }
  registry_.AddCallback(
      "gputune_db_size_bytes",
      "Size of the SQLite database: the file and its write-ahead log.", kGauge,
      [database_path] {
        return FileBytes(database_path) + FileBytes(database_path + "-wal");
      });
}

void DaemonMetrics::ReadChangesFrom(const ChangeFeed* feed) {
  constexpr auto kCounter = prometheus::MetricType::Counter;
  registry_.AddCallback(
      "gputune_changes_published_total",
      "Entry changes (records, imports, deletes) numbered on the change "
      "feed since the daemon started.",
      kCounter,
      [feed] { return static_cast<double>(feed->GetStats().head_seq); });
  registry_.AddCallback(
      "gputune_change_subscribers",
      "SubscribeChanges streams open (one per client process with a memo).",
      prometheus::MetricType::Gauge,
      [feed] { return static_cast<double>(feed->GetStats().subscribers); });
  registry_.AddCallback("gputune_change_subscribers_cut_off_total",
                        "SubscribeChanges streams ended for falling more than "
                        "--subscriber_max_lag changes behind.",
                        kCounter, [feed] {
                          return static_cast<double>(feed->GetStats().cut_off);
                        });
}

namespace {

// A gputune_fleet_* series: a field of the fleet link's status.
struct FleetSeries {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  double (*read)(const v1::FleetStatus&);
  const char* reason;  // gputune_fleet_feed_skipped_total's label; else null
};

// A count the status holds as it is.
template <auto kField>
double Count(const v1::FleetStatus& s) {
  return static_cast<double>((s.*kField)());
}

constexpr auto kFleetGauge = prometheus::MetricType::Gauge;
constexpr auto kFleetCounter = prometheus::MetricType::Counter;
constexpr char kFleetSkippedHelp[] =
    "Fleet feed rows (and canonical answers) not adopted, by reason: "
    "unparseable (not a valid entry), mismatch (its columns disagree with "
    "its entry), oversized (over 1 MiB: skipped unread).";

constexpr FleetSeries kFleetSeries[] = {
    {"gputune_fleet_connected",
     "1 while the fleet link is connected and following the feed.", kFleetGauge,
     [](const v1::FleetStatus& s) { return s.connected() ? 1.0 : 0.0; },
     nullptr},
    {"gputune_fleet_outbox_depth",
     "Records waiting in the local outbox to be published to the fleet.",
     kFleetGauge, Count<&v1::FleetStatus::outbox_depth>, nullptr},
    {"gputune_fleet_feed_lag_seconds",
     "From a fleet entry's publish to its adoption here, for the last "
     "entry adopted.",
     kFleetGauge,
     [](const v1::FleetStatus& s) {
       return absl::ToDoubleSeconds(FromProto(s.feed_lag()));
     },
     nullptr},
    {"gputune_fleet_feed_backlog",
     "Feed positions the fleet had when last asked that are not adopted "
     "here yet.",
     kFleetGauge,
     [](const v1::FleetStatus& s) {
       return s.fleet_seq() > s.feed_seq()
                  ? static_cast<double>(s.fleet_seq() - s.feed_seq())
                  : 0.0;
     },
     nullptr},
    {"gputune_fleet_claims_held", "Fleet claims this daemon holds.",
     kFleetGauge, Count<&v1::FleetStatus::claims_held>, nullptr},
    {"gputune_fleet_claims_waited",
     "Keys PENDING here because another daemon of the fleet tunes them.",
     kFleetGauge, Count<&v1::FleetStatus::claims_waited>, nullptr},
    {"gputune_fleet_published_total", "Entries published to the fleet.",
     kFleetCounter, Count<&v1::FleetStatus::published>, nullptr},
    {"gputune_fleet_adopted_total", "Fleet entries adopted from the feed.",
     kFleetCounter, Count<&v1::FleetStatus::adopted>, nullptr},
    {"gputune_fleet_refused_total",
     "Publishes the fleet refused (a superseded fence, or another canonical "
     "entry).",
     kFleetCounter, Count<&v1::FleetStatus::refused>, nullptr},
    {"gputune_fleet_publish_errors_total",
     "Publish statements that failed (retried).", kFleetCounter,
     Count<&v1::FleetStatus::publish_errors>, nullptr},
    {"gputune_fleet_outbox_dropped_total",
     "Outbox records dropped because PostgreSQL refused their data "
     "repeatedly.",
     kFleetCounter, Count<&v1::FleetStatus::outbox_dropped>, nullptr},
    {"gputune_fleet_outbox_overflow_total",
     "Records kept locally only because the outbox was full.", kFleetCounter,
     Count<&v1::FleetStatus::outbox_overflow>, nullptr},
    {"gputune_fleet_feed_skipped_total", kFleetSkippedHelp, kFleetCounter,
     Count<&v1::FleetStatus::feed_unparseable>, "unparseable"},
    {"gputune_fleet_feed_skipped_total", kFleetSkippedHelp, kFleetCounter,
     Count<&v1::FleetStatus::feed_mismatched>, "mismatch"},
    {"gputune_fleet_feed_skipped_total", kFleetSkippedHelp, kFleetCounter,
     Count<&v1::FleetStatus::feed_oversized>, "oversized"},
    {"gputune_fleet_local_only_claims_total",
     "Claims made locally only because the fleet was unreachable.",
     kFleetCounter, Count<&v1::FleetStatus::local_only_claims>, nullptr},
};

}  // namespace

void DaemonMetrics::ReadFleetFrom(const FleetHooks* fleet) {
  // Each series reads the link's status: a few locks per render, none on a
  // serving path.
  for (const FleetSeries& series : kFleetSeries) {
    prometheus::Labels labels;
    if (series.reason != nullptr) labels.emplace("reason", series.reason);
    registry_.AddCallback(
        series.name, series.help, series.type,
        [fleet, read = series.read] {
          v1::FleetStatus status;
          fleet->FillStatus(&status);
          return read(status);
        },
        labels);
  }
}

const DaemonMetrics::Method* DaemonMetrics::FindMethod(
    absl::string_view full_name) const {
  auto it = methods_.find(full_name);
  return it == methods_.end() ? nullptr : it->second.get();
}

void DaemonMetrics::CallStarted(const Method& m) {
  in_flight_->Increment();
  if (m.watch) watch_streams_->Increment();
}

void DaemonMetrics::CallEnded(const Method& m, int code, absl::Duration took) {
  in_flight_->Decrement();
  if (m.watch) watch_streams_->Decrement();
  m.calls->Increment();
  if (code != 0) m.errors->Increment();
  if (m.seconds != nullptr) m.seconds->Observe(absl::ToDoubleSeconds(took));
}

namespace {

// One per call: counts it when it starts and ends.
class CallInterceptor final : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(DaemonMetrics* metrics, const DaemonMetrics::Method* method)
      : metrics_(metrics), method_(method), start_(absl::Now()) {
    metrics_->CallStarted(*method_);
  }
  ~CallInterceptor() override {
    // A call cancelled before its status still ends here.
    if (!ended_) metrics_->CallEnded(*method_, 1, absl::Now() - start_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* batch) override {
    using grpc::experimental::InterceptionHookPoints;
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      ended_ = true;
      metrics_->CallEnded(*method_, batch->GetSendStatus().error_code(),
                          absl::Now() - start_);
    }
    batch->Proceed();
  }

 private:
  DaemonMetrics* const metrics_;
  const DaemonMetrics::Method* const method_;
  const absl::Time start_;
  bool ended_ = false;
};

class InterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit InterceptorFactory(DaemonMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const DaemonMetrics::Method* method = metrics_->FindMethod(info->method());
    // Health checks and reflection are not counted.
    return method == nullptr ? nullptr : new CallInterceptor(metrics_, method);
  }

 private:
  DaemonMetrics* const metrics_;
};

}  // namespace

std::vector<
    std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
DaemonMetrics::InterceptorFactories() {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      out;
  out.push_back(std::make_unique<InterceptorFactory>(this));
  return out;
}

// --- MetricsTextfileWriter ---------------------------------------------------

MetricsTextfileWriter::MetricsTextfileWriter(const DaemonMetrics* metrics,
                                             std::string path,
                                             absl::Duration interval)
    : metrics_(metrics),
      path_(std::move(path)),
      interval_(std::max(interval, absl::Milliseconds(100))) {
  thread_ = std::thread([this] {
    do {
      WriteOnce();
    } while (!stop_.WaitForNotificationWithTimeout(interval_));
    WriteOnce();  // the last values, as the daemon stops
  });
}

MetricsTextfileWriter::~MetricsTextfileWriter() {
  stop_.Notify();
  thread_.join();
}

void MetricsTextfileWriter::WriteOnce() {
  const absl::Status s = WriteAtomically(path_, metrics_->Render());
  if (!s.ok() && !last_failed_) {
    spdlog::warn("metrics: {} (retrying every {})", std::string(s.message()),
                 absl::FormatDuration(interval_));
  } else if (s.ok() && last_failed_) {
    spdlog::info("metrics: writing {} works again", path_);
  }
  last_failed_ = !s.ok();
}

absl::Status MetricsTextfileWriter::WriteAtomically(const std::string& path,
                                                    const std::string& text) {
  // Not "<path>.prom.tmp" with .prom last: node_exporter reads only *.prom,
  // so it never reads the file being written.
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write ", tmp, ": ", std::strerror(errno),
        " (does the directory exist, and may the daemon's user write it?)"));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::DataLossError(
          absl::StrCat("writing ", tmp, ": ", std::strerror(error)));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat("replacing ", path, " with ", tmp,
                                            ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace gputune
