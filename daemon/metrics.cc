#include "daemon/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "daemon/arbiter.h"
#include "daemon/change_feed.h"
#include "daemon/fleet_hooks.h"
#include "daemon/job_queue.h"
#include "google/protobuf/descriptor.h"
#include "gputune/v1/tune.pb.h"
#include "proto/proto_time.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

bool ValidName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

[[noreturn]] void Misuse(const char* what, absl::string_view name) {
  spdlog::critical("metrics: {}: {}", what, std::string(name));
  std::abort();
}

// Prometheus numbers: integers as integers, others with 15 digits.
std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    return absl::StrFormat("%.0f", v);
  }
  return absl::StrFormat("%.15g", v);
}

std::string EscapeLabel(absl::string_view v) {
  return absl::StrReplaceAll(v,
                             {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string EscapeHelp(absl::string_view v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\n", "\\n"}});
}

// {a="1",b="2"} of constant labels, the series' labels and `extra` (le=).
std::string LabelText(const MetricLabels& constant, const MetricLabels& own,
                      const MetricLabels& extra = {}) {
  std::string out;
  for (const MetricLabels* list : {&constant, &own, &extra}) {
    for (const auto& [name, value] : *list) {
      absl::StrAppend(&out, out.empty() ? "{" : ",", name, "=\"",
                      EscapeLabel(value), "\"");
    }
  }
  if (!out.empty()) out += "}";
  return out;
}

const std::vector<double>& JobBounds() {
  static const auto* bounds =
      new std::vector<double>{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return *bounds;
}

const std::vector<double>& RpcBounds() {
  static const auto* bounds = new std::vector<double>{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5};
  return *bounds;
}

// The size of a file, 0 when it is missing.
double FileBytes(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<double>(size);
}

}  // namespace

// --- Histogram -------------------------------------------------------------

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())) {
    Misuse("histogram bounds not ascending", "");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

// --- MetricsRegistry --------------------------------------------------------

MetricsRegistry::MetricsRegistry(MetricLabels constant_labels)
    : constant_labels_(std::move(constant_labels)) {}

MetricsRegistry::Series& MetricsRegistry::AddSeries(const std::string& name,
                                                    const std::string& help,
                                                    Kind kind,
                                                    MetricLabels labels) {
  // Registration is code, not input: a bad name is a bug, stopped at once.
  bool valid = ValidName(name);
  for (const auto& label : labels) valid = valid && ValidName(label.first);
  if (!valid) Misuse("invalid metric or label name", name);
  Family* family = nullptr;
  for (const auto& f : families_) {
    if (f->name == name) family = f.get();
  }
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>(Family{name, help, kind, {}}));
    family = families_.back().get();
  }
  if (family->kind != kind || family->help != help) {
    Misuse("registered again with another type or help", name);
  }
  family->series.push_back(Series{std::move(labels), {}, {}, {}, {}});
  return family->series.back();
}

Counter* MetricsRegistry::AddCounter(const std::string& name,
                                     const std::string& help,
                                     MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help, Kind::kCounter, std::move(labels));
  s.counter = std::make_unique<Counter>();
  return s.counter.get();
}

Gauge* MetricsRegistry::AddGauge(const std::string& name,
                                 const std::string& help, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help, Kind::kGauge, std::move(labels));
  s.gauge = std::make_unique<Gauge>();
  return s.gauge.get();
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name,
                                         const std::string& help,
                                         std::vector<double> bounds,
                                         MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help, Kind::kHistogram, std::move(labels));
  s.histogram = std::make_unique<Histogram>(std::move(bounds));
  return s.histogram.get();
}

void MetricsRegistry::AddCallback(const std::string& name,
                                  const std::string& help, Type type,
                                  std::function<double()> read,
                                  MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help,
                        type == Type::kCounter ? Kind::kCounter : Kind::kGauge,
                        std::move(labels));
  s.read = std::move(read);
}

std::string MetricsRegistry::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& family : families_) {
    const char* type = family->kind == Kind::kCounter ? "counter"
                       : family->kind == Kind::kGauge ? "gauge"
                                                      : "histogram";
    absl::StrAppend(&out, "# HELP ", family->name, " ",
                    EscapeHelp(family->help), "\n# TYPE ", family->name, " ",
                    type, "\n");
    for (const Series& s : family->series) {
      if (s.histogram) {
        const Histogram& h = *s.histogram;
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          cumulative += h.bucket(i);
          const std::string le = i < h.bounds().size() ? Number(h.bounds()[i])
                                                       : std::string("+Inf");
          absl::StrAppend(&out, family->name, "_bucket",
                          LabelText(constant_labels_, s.labels, {{"le", le}}),
                          " ", cumulative, "\n");
        }
        const std::string labels = LabelText(constant_labels_, s.labels);
        absl::StrAppend(&out, family->name, "_sum", labels, " ",
                        Number(h.sum()), "\n", family->name, "_count", labels,
                        " ", cumulative, "\n");
        continue;
      }
      const double value = s.read      ? s.read()
                           : s.counter ? static_cast<double>(s.counter->value())
                                       : s.gauge->value();
      absl::StrAppend(&out, family->name, LabelText(constant_labels_, s.labels),
                      " ", Number(value), "\n");
    }
  }
  return out;
}

// --- DaemonMetrics ---------------------------------------------------------

struct DaemonMetrics::Method {
  std::string name;  // "Lookup"
  bool streaming = false;
  bool watch = false;  // TuneService.Watch (gputune_watch_streams)
  Counter* calls = nullptr;
  Counter* errors = nullptr;
  Histogram* seconds = nullptr;  // unary calls only
};

DaemonMetrics::DaemonMetrics(const Identity& identity)
    : registry_([&] {
        MetricLabels labels = {{"device", identity.device}};
        if (!identity.uuid.empty()) labels.push_back({"uuid", identity.uuid});
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
      MetricsRegistry::Type::kGauge, [this] {
        double all = 0;
        for (int s = v1::KEY_STATE_MISS; s <= v1::KEY_STATE_BACKOFF; ++s) {
          all += static_cast<double>(lookups_[s]->value());
        }
        return all == 0
                   ? 0.0
                   : static_cast<double>(lookups_[v1::KEY_STATE_HIT]->value()) /
                         all;
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
  registry_.AddCallback("gputune_device_busy_seconds_total",
                        "Time the device worker spent running benchmark jobs.",
                        MetricsRegistry::Type::kCounter,
                        [this] { return job_seconds_->sum(); });
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
      const MetricLabels labels = {{"method", m->name()}};
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
  (recorded ? jobs_recorded_ : jobs_failed_)->Add();
  job_seconds_->Observe(absl::ToDoubleSeconds(took));
}

void DaemonMetrics::ReadFrom(const JobQueue* jobs, const Arbiter* arbiter,
                             const std::string& database_path) {
  using Type = MetricsRegistry::Type;
  if (jobs != nullptr) {
    registry_.AddCallback(
        "gputune_tune_queue_depth", "Benchmark jobs waiting.", Type::kGauge,
        [jobs] { return static_cast<double>(jobs->GetStats().queue_depth); });
    registry_.AddCallback(
        "gputune_tune_queue_capacity",
        "Benchmark jobs that may wait (then TuneDense is refused).",
        Type::kGauge,
        [jobs] { return static_cast<double>(jobs->GetStats().capacity); });
    registry_.AddCallback(
        "gputune_tune_job_running", "1 while a benchmark job runs.",
        Type::kGauge, [jobs] { return jobs->GetStats().running ? 1.0 : 0.0; });
    registry_.AddCallback(
        "gputune_device_ready",
        "1 when TuneDense can benchmark (a backend, and the device not lost).",
        Type::kGauge, [jobs] { return jobs->ready() ? 1.0 : 0.0; });
  }
  if (arbiter != nullptr) {
    registry_.AddCallback(
        "gputune_entries", "Entries in the cache.", Type::kGauge,
        [arbiter] { return static_cast<double>(arbiter->GetStats().entries); });
    registry_.AddCallback(
        "gputune_stale_entries",
        "Entries STALE for this daemon's device fingerprint.", Type::kGauge,
        [arbiter] {
          return static_cast<double>(arbiter->GetStats().stale_entries);
        });
    registry_.AddCallback(
        "gputune_claims_live", "Live claims.", Type::kGauge, [arbiter] {
          return static_cast<double>(arbiter->GetStats().claims.size());
        });
    registry_.AddCallback(
        "gputune_backoff_keys", "Keys in BACKOFF now.", Type::kGauge,
        [arbiter] {
          return static_cast<double>(arbiter->GetStats().backoff_keys);
        });
  }
  registry_.AddCallback(
      "gputune_db_size_bytes",
      "Size of the SQLite database: the file and its write-ahead log.",
      Type::kGauge, [database_path] {
        return FileBytes(database_path) + FileBytes(database_path + "-wal");
      });
}

void DaemonMetrics::ReadChangesFrom(const ChangeFeed* feed) {
  using Type = MetricsRegistry::Type;
  registry_.AddCallback(
      "gputune_changes_published_total",
      "Entry changes (records, imports, deletes) numbered on the change "
      "feed since the daemon started.",
      Type::kCounter,
      [feed] { return static_cast<double>(feed->GetStats().head_seq); });
  registry_.AddCallback(
      "gputune_change_subscribers",
      "SubscribeChanges streams open (one per client process with a memo).",
      Type::kGauge,
      [feed] { return static_cast<double>(feed->GetStats().subscribers); });
  registry_.AddCallback("gputune_change_subscribers_cut_off_total",
                        "SubscribeChanges streams ended for falling more than "
                        "--subscriber_max_lag changes behind.",
                        Type::kCounter, [feed] {
                          return static_cast<double>(feed->GetStats().cut_off);
                        });
}

void DaemonMetrics::ReadFleetFrom(const FleetHooks* fleet) {
  using Type = MetricsRegistry::Type;
  // Each series reads the link's status: a few locks per render, none on a
  // serving path.
  auto add = [&](const char* name, const char* help, Type type,
                 double (*field)(const v1::FleetStatus&),
                 MetricLabels labels = {}) {
    registry_.AddCallback(
        name, help, type,
        [fleet, field] {
          v1::FleetStatus status;
          fleet->FillStatus(&status);
          return field(status);
        },
        std::move(labels));
  };
  add("gputune_fleet_connected",
      "1 while the fleet link is connected and following the feed.",
      Type::kGauge,
      [](const v1::FleetStatus& s) { return s.connected() ? 1.0 : 0.0; });
  add("gputune_fleet_outbox_depth",
      "Records waiting in the local outbox to be published to the fleet.",
      Type::kGauge, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.outbox_depth());
      });
  add("gputune_fleet_feed_lag_seconds",
      "From a fleet entry's publish to its adoption here, for the last "
      "entry adopted.",
      Type::kGauge, [](const v1::FleetStatus& s) {
        return absl::ToDoubleSeconds(FromProto(s.feed_lag()));
      });
  add("gputune_fleet_feed_backlog",
      "Feed positions the fleet had when last asked that are not adopted "
      "here yet.",
      Type::kGauge, [](const v1::FleetStatus& s) {
        return s.fleet_seq() > s.feed_seq()
                   ? static_cast<double>(s.fleet_seq() - s.feed_seq())
                   : 0.0;
      });
  add("gputune_fleet_claims_held", "Fleet claims this daemon holds.",
      Type::kGauge, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.claims_held());
      });
  add("gputune_fleet_claims_waited",
      "Keys PENDING here because another daemon of the fleet tunes them.",
      Type::kGauge, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.claims_waited());
      });
  add("gputune_fleet_published_total", "Entries published to the fleet.",
      Type::kCounter, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.published());
      });
  add("gputune_fleet_adopted_total", "Fleet entries adopted from the feed.",
      Type::kCounter, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.adopted());
      });
  add("gputune_fleet_refused_total",
      "Publishes the fleet refused (a superseded fence, or another canonical "
      "entry).",
      Type::kCounter, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.refused());
      });
  add("gputune_fleet_publish_errors_total",
      "Publish statements that failed (retried).", Type::kCounter,
      [](const v1::FleetStatus& s) {
        return static_cast<double>(s.publish_errors());
      });
  add("gputune_fleet_outbox_dropped_total",
      "Outbox records dropped because PostgreSQL refused their data "
      "repeatedly.",
      Type::kCounter, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.outbox_dropped());
      });
  add("gputune_fleet_outbox_overflow_total",
      "Records kept locally only because the outbox was full.", Type::kCounter,
      [](const v1::FleetStatus& s) {
        return static_cast<double>(s.outbox_overflow());
      });
  constexpr char kSkipped[] =
      "Fleet feed rows (and canonical answers) not adopted, by reason: "
      "unparseable (not a valid entry), mismatch (its columns disagree with "
      "its entry), oversized (over 1 MiB: skipped unread).";
  add("gputune_fleet_feed_skipped_total", kSkipped, Type::kCounter,
      [](const v1::FleetStatus& s) {
        return static_cast<double>(s.feed_unparseable());
      },
      {{"reason", "unparseable"}});
  add("gputune_fleet_feed_skipped_total", kSkipped, Type::kCounter,
      [](const v1::FleetStatus& s) {
        return static_cast<double>(s.feed_mismatched());
      },
      {{"reason", "mismatch"}});
  add("gputune_fleet_feed_skipped_total", kSkipped, Type::kCounter,
      [](const v1::FleetStatus& s) {
        return static_cast<double>(s.feed_oversized());
      },
      {{"reason", "oversized"}});
  add("gputune_fleet_local_only_claims_total",
      "Claims made locally only because the fleet was unreachable.",
      Type::kCounter, [](const v1::FleetStatus& s) {
        return static_cast<double>(s.local_only_claims());
      });
}

const DaemonMetrics::Method* DaemonMetrics::FindMethod(
    absl::string_view full_name) const {
  auto it = methods_.find(full_name);
  return it == methods_.end() ? nullptr : it->second.get();
}

void DaemonMetrics::CallStarted(const Method& m) {
  in_flight_->Add(1);
  if (m.watch) watch_streams_->Add(1);
}

void DaemonMetrics::CallEnded(const Method& m, int code, absl::Duration took) {
  in_flight_->Add(-1);
  if (m.watch) watch_streams_->Add(-1);
  m.calls->Add();
  if (code != 0) m.errors->Add();
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
