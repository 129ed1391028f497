#include "daemon/daemon.h"

#include <malloc.h>
#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/backend_factory.h"
#include "daemon/fleet/fleet_link.h"
#include "daemon/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "proto/execution_convert.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

// The filesystem path of a unix: address, or empty.
std::string UnixPath(absl::string_view address) {
  if (absl::ConsumePrefix(&address, "unix://")) return std::string(address);
  if (absl::ConsumePrefix(&address, "unix:")) return std::string(address);
  return "";
}

kernels::AutotuneLog AutotuneLevel(const std::string& name) {
  bool ok = false;
  kernels::AutotuneLog level = kernels::ParseAutotuneLog(name, &ok);
  return ok ? level : kernels::AutotuneLog::kMinimal;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Config& config) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->config_ = config;
  DaemonInfo& info = d->info_;
  info.version = kVersion;
  info.started_at = d->clock_.Now();
  info.listen_address = config.listen;
  info.database_path = config.db;

  // Storage first: nothing is served before the cache is loaded.
  std::error_code ec;
  const std::filesystem::path db_dir =
      std::filesystem::path(config.db).parent_path();
  if (!db_dir.empty()) std::filesystem::create_directories(db_dir, ec);
  const absl::Time open_start = absl::Now();
  storage::OpenReport report;
  absl::StatusOr<std::unique_ptr<storage::TuneStore>> store =
      storage::TuneStore::Open({config.db, config.db_sync_full}, &report);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("cannot open the database ", config.db,
                                     ": ", store.status().message()));
  }
  d->store_ = std::move(*store);
  if (!report.quarantined_to.empty()) {
    info.database_quarantined_to = report.quarantined_to;
    spdlog::critical(
        "database {} was corrupt ({}): moved aside to {} and started with an "
        "empty cache; inspect or delete the old file",
        config.db, report.quarantine_reason, report.quarantined_to);
  }

  BackendChoice choice = MakeBackend(config);
  if (!choice.warning.empty()) spdlog::warn("{}", choice.warning);
  if (!choice.error.empty()) spdlog::warn("{}", choice.error);
  info.backend = choice.backend ? choice.name : "none";
  if (choice.backend) {
    info.fingerprint = ToProto(choice.backend->GetFingerprint());
    info.fingerprint_digest = FingerprintDigest(info.fingerprint);
  } else {
    info.fingerprint.set_backend(choice.name);
    info.fingerprint.set_device_name("unavailable");
  }
  d->backend_ = std::move(choice.backend);

  ArbiterOptions arbiter_options;
  arbiter_options.default_ttl = config.lease_ttl;
  arbiter_options.max_ttl = config.max_lease_ttl;
  arbiter_options.backoff_abandons = config.backoff_abandons;
  arbiter_options.backoff_window = config.backoff_window;
  arbiter_options.backoff_cooldown = config.backoff_cooldown;
  storage::TuneStore* raw_store = d->store_.get();
  d->arbiter_ = std::make_unique<Arbiter>(
      arbiter_options, &d->clock_,
      [raw_store](uint64_t n) { return raw_store->ReserveClaimIds(n); },
      info.fingerprint_digest);
  const absl::Time load_start = absl::Now();
  int64_t loaded = 0;
  if (absl::Status s = d->store_->ForEachSummary(
          [&](std::string key_id, std::string summary, std::string cs,
              std::string fingerprint) {
            d->arbiter_->LoadSummary(key_id, std::move(summary), std::move(cs),
                                     fingerprint);
            ++loaded;
          });
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("loading ", config.db, ": ", s.message()));
  }

  spdlog::info("database {} opened and checked in {}, {} entries indexed in {}",
               config.db, absl::FormatDuration(load_start - open_start), loaded,
               absl::FormatDuration(absl::Now() - load_start));
  malloc_trim(0);  // hand loading's transient pages back to the system
  d->store_executor_ = std::make_unique<SerialExecutor>();
  JobQueueOptions job_options;
  job_options.capacity = config.queue_capacity;
  job_options.job_timeout = config.job_timeout;
  job_options.lease_ttl = config.max_lease_ttl;
  job_options.tune.budget_seconds = absl::ToDoubleSeconds(config.tune_budget);
  job_options.tune.min_improvement_bps = config.min_improvement_bps;
  job_options.tune.max_candidates = config.max_candidates;
  job_options.tune.log = AutotuneLevel(config.autotune_log);
  d->jobs_ = std::make_unique<JobQueue>(job_options, d->arbiter_.get(),
                                        d->store_.get(), d->backend_.get(),
                                        choice.error, &d->clock_);
  d->tune_service_ = std::make_unique<TuneServiceImpl>(
      info, d->arbiter_.get(), d->store_.get(), d->jobs_.get(),
      d->store_executor_.get(), &d->clock_);
  if (!config.fleet.empty()) {
    if (!info.fingerprint_digest) {
      spdlog::warn(
          "--fleet is set but this daemon's device is unknown (no backend): "
          "without a fingerprint it cannot join a fleet; serving locally");
    } else {
      fleet::FleetOptions fleet_options;
      fleet_options.conninfo = config.fleet;
      fleet_options.lease_ttl = config.fleet_lease_ttl;
      fleet_options.poll_interval = config.fleet_poll_interval;
      fleet_options.outbox_limit =
          static_cast<uint64_t>(config.fleet_outbox_limit);
      absl::StatusOr<std::unique_ptr<fleet::FleetLink>> link =
          fleet::FleetLink::Create(
              fleet_options,
              fleet::MakeIdentity(info.fingerprint, config.device),
              *info.fingerprint_digest, d->store_.get(), d->arbiter_.get(),
              &d->clock_);
      if (!link.ok()) {
        return absl::Status(link.status().code(),
                            absl::StrCat("--fleet: ", link.status().message()));
      }
      d->fleet_ = std::move(*link);
      d->jobs_->set_fleet(d->fleet_.get());
      d->tune_service_->set_fleet(d->fleet_.get());
      d->fleet_->Start();
    }
  }
  d->admin_service_ = std::make_unique<AdminServiceImpl>(
      d->store_.get(), d->jobs_.get(), d->store_executor_.get());

  const std::string socket_path = UnixPath(config.listen);
  if (!socket_path.empty()) {
    const std::filesystem::path dir =
        std::filesystem::path(socket_path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  builder.RegisterService(d->tune_service_.get());
  builder.RegisterService(d->admin_service_.get());
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || (socket_path.empty() && port == 0)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config.listen,
        ": is another gputuned running there, or is the directory not "
        "writable?"));
  }
  if (!socket_path.empty() &&
      chmod(socket_path.c_str(), static_cast<mode_t>(config.socket_mode)) !=
          0) {
    spdlog::warn("cannot set mode {:o} on {}", config.socket_mode, socket_path);
  }
  if (d->server_->GetHealthCheckService())
    d->server_->GetHealthCheckService()->SetServingStatus(true);

  Daemon* raw = d.get();
  d->sweeper_ = std::thread([raw] {
    while (!raw->stopping_.load()) {
      raw->arbiter_->Sweep();
      raw->sweeps_.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  spdlog::info(
      "gputuned {} serving on {} (database {}, {} entries, backend {}{})",
      kVersion, config.listen, config.db, loaded, info.backend,
      d->backend_ ? "" : ": cache only");
  return d;
}

Daemon::~Daemon() { Shutdown(); }

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("gputuned shutting down");
  if (server_ && server_->GetHealthCheckService())
    server_->GetHealthCheckService()->SetServingStatus(false);
  if (jobs_) jobs_->Stop();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(config_.shutdown_grace));
    server_->Wait();
  }
  stopping_.store(true);
  if (sweeper_.joinable()) sweeper_.join();
  store_executor_.reset();     // runs what was queued
  if (fleet_) fleet_->Stop();  // the outbox keeps what was not published
  jobs_.reset();
  const std::string socket_path = UnixPath(config_.listen);
  if (!socket_path.empty()) std::filesystem::remove(socket_path);
  store_.reset();
  spdlog::info("gputuned stopped");
}

bool Daemon::Alive() {
  if (server_ == nullptr || stopping_.load()) return false;
  // A lost device needs a new process (a new CUDA context): let systemd's
  // watchdog restart us.
  if (jobs_->device_lost()) return false;
  if (!jobs_->WorkerAlive()) return false;
  // The sweeper must have run since the last check...
  const int64_t sweeps = sweeps_.load();
  const bool sweeping = sweeps != last_alive_sweeps_;
  last_alive_sweeps_ = sweeps;
  if (!sweeping) return false;
  // ...and the server must answer a health check through its own queue.
  auto stub = grpc::health::v1::Health::NewStub(
      server_->InProcessChannel(grpc::ChannelArguments()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

std::string Daemon::StatusLine() {
  const Arbiter::Stats a = arbiter_->GetStats();
  const JobQueue::Stats j = jobs_->GetStats();
  return absl::StrCat(a.entries, " entries (", a.stale_entries, " stale), ",
                      a.claims.size(), " claims, queue ", j.queue_depth, "/",
                      j.capacity, j.running ? ", tuning" : "", ", backend ",
                      info_.backend);
}

void Daemon::ApplyRuntimeConfig(const Config& config) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  jobs_->SetAutotuneLog(AutotuneLevel(config.autotune_log));
  config_.log_level = config.log_level;
  config_.autotune_log = config.autotune_log;
  spdlog::info("configuration reloaded: log_level={} autotune_log={}",
               config.log_level, config.autotune_log);
}

}  // namespace gputune
