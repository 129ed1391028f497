#include "daemon/daemon.h"

#include <grp.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/backend_factory.h"
#include "daemon/fleet/fleet_link.h"
#include "daemon/logging.h"
#include "daemon/metrics.h"
#include "daemon/redis/redis_keys.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "proto/execution_convert.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "spdlog/spdlog.h"
#include "version/build_info.h"

namespace gputune {
namespace {

std::string UnixPath(absl::string_view address) {
  return UnixSocketPath(address);
}

// The admin group's id; nullopt for none. INVALID_ARGUMENT for an unknown
// group.
absl::StatusOr<std::optional<gid_t>> AdminGroup(const std::string& name) {
  if (name.empty()) return std::optional<gid_t>();
  group grp{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(name.c_str(), &grp, buf.data(), buf.size(), &found) != 0 ||
      found == nullptr) {
    gid_t gid = 0;
    if (absl::SimpleAtoi(name, &gid)) return std::optional<gid_t>(gid);
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin_group=", name, ": no such group (give a name or a number)"));
  }
  return std::optional<gid_t>(found->gr_gid);
}

// FAILED_PRECONDITION for a TCP address that would expose the daemon to the
// network without TLS, unless the operator said so.
absl::Status CheckTcpExposure(const Config& config) {
  if (!UnixPath(config.listen).empty()) return absl::OkStatus();
  if (!config.tls_cert_file.empty() || config.allow_insecure_tcp ||
      IsLoopbackAddress(config.listen)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--listen=", config.listen,
      " is not a loopback address: anyone on the network could call the "
      "daemon. Use a unix socket or 127.0.0.1, give --tls_cert_file and "
      "--tls_key_file, or pass --allow_insecure_tcp if the network is "
      "trusted"));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

kernels::AutotuneLog AutotuneLevel(const std::string& name) {
  const kernels::StatusOr<kernels::AutotuneLog> level =
      kernels::ParseAutotuneLog(name);
  return level.ok() ? *level : kernels::AutotuneLog::kMinimal;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Config& config) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->config_ = config;
  DaemonInfo& info = d->info_;
  info.version = std::string(BuildVersion());
  info.started_at = d->clock_.Now();
  info.listen_address = config.listen;
  info.database_path = config.db;

  if (auto s = CheckTcpExposure(config); !s.ok()) return s;
  // The Redis front door's settings, checked before anything is touched.
  redis::RedisServerOptions ro;
  if (!config.redis_listen.empty()) {
    ro.addresses = absl::StrSplit(config.redis_listen, ',', absl::SkipEmpty());
    ro.socket_mode = config.socket_mode;
    if (!config.redis_password_file.empty()) {
      absl::StatusOr<std::string> pw = ReadFile(config.redis_password_file);
      if (!pw.ok()) return pw.status();
      ro.password = std::string(absl::StripAsciiWhitespace(
          absl::string_view(*pw).substr(0, pw->find('\n'))));
      if (ro.password.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--redis_password_file=", config.redis_password_file,
                         ": the file's first line is empty"));
      }
    }
    ro.allow_insecure_tcp = config.allow_insecure_tcp;
    ro.claim_ttl = config.redis_claim_ttl;
    ro.wait = config.redis_wait;
    ro.max_value = static_cast<size_t>(config.redis_max_value);
    ro.limits = redis::LimitsFor(ro.max_value);
    ro.idle_timeout = config.max_connection_idle;
    ro.tuned_patterns =
        config.redis_tuned_keys.empty()
            ? redis::DefaultTunedPatterns()
            : std::vector<std::string>(absl::StrSplit(config.redis_tuned_keys,
                                                      ',', absl::SkipEmpty()));
    if (auto s = redis::CheckExposure(ro); !s.ok()) return s;
  }
  absl::StatusOr<std::optional<gid_t>> admin_group =
      AdminGroup(config.admin_group);
  if (!admin_group.ok()) return admin_group.status();
  const int files = RaiseFileLimit();
  spdlog::debug("file descriptor limit {}", files);

  // One daemon per database and per socket: the locks come before anything
  // is touched, so a second daemon changes nothing (not the socket of the
  // first).
  std::error_code ec;
  const std::filesystem::path db_dir =
      std::filesystem::path(config.db).parent_path();
  if (!db_dir.empty()) std::filesystem::create_directories(db_dir, ec);
  absl::StatusOr<InstanceLock> db_lock = InstanceLock::Acquire(
      config.db + ".lock", absl::StrCat("database ", config.db));
  if (!db_lock.ok()) return db_lock.status();
  d->db_lock_.emplace(std::move(*db_lock));
  // Socket activation (gputuned@.socket): the socket systemd passed wins over
  // --listen; it is locked like one of ours.
  absl::StatusOr<int> inherited_fd = InheritedListenFd();
  if (!inherited_fd.ok()) return inherited_fd.status();
  std::string socket_path = UnixPath(config.listen);
  if (*inherited_fd >= 0) {
    if (!config.tls_cert_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert_file: TLS needs gputuned to bind its own socket; it "
          "cannot serve one passed by systemd (gputuned@.socket)");
    }
    absl::StatusOr<std::string> inherited_path =
        ListeningUnixSocketPath(*inherited_fd);
    if (!inherited_path.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the socket passed by systemd (LISTEN_FDS): ",
                       inherited_path.status().message()));
    }
    socket_path = *inherited_path;
  }
  if (!socket_path.empty()) {
    const std::filesystem::path dir =
        std::filesystem::path(socket_path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    absl::StatusOr<InstanceLock> socket_lock = InstanceLock::Acquire(
        socket_path + ".lock", absl::StrCat("socket ", socket_path));
    if (!socket_lock.ok()) return socket_lock.status();
    d->socket_lock_.emplace(std::move(*socket_lock));
  }
  // Each Redis unix socket too: a second daemon must not replace it.
  for (const std::string& address : ro.addresses) {
    const std::string path = UnixPath(address);
    if (path.empty()) continue;
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    absl::StatusOr<InstanceLock> lock =
        InstanceLock::Acquire(path + ".lock", absl::StrCat("socket ", path));
    if (!lock.ok()) return lock.status();
    d->redis_socket_locks_.push_back(std::move(*lock));
  }

  // Storage first: nothing is served before the cache is loaded.
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
  absl::StatusOr<DeviceIdentity> identity =
      ChooseIdentity(info.backend, info.fingerprint.device_uuid(),
                     choice.backend ? choice.backend->PciBusId() : "",
                     config.device_uuid, config.device, MachineId());
  if (!identity.ok()) return identity.status();
  info.device_uuid = identity->uuid;
  info.pci_bus_id = identity->pci_bus_id;
  d->backend_ = std::move(choice.backend);

  d->metrics_ = std::make_unique<DaemonMetrics>(DaemonMetrics::Identity{
      config.device, info.fingerprint.device_uuid(), info.backend,
      std::string(BuildVersion()), std::string(BuildRevision())});
  if (!info.database_quarantined_to.empty()) d->metrics_->DatabaseQuarantined();
  ArbiterOptions arbiter_options;
  arbiter_options.metrics = d->metrics_.get();
  arbiter_options.default_ttl = config.lease_ttl;
  arbiter_options.max_ttl = config.max_lease_ttl;
  arbiter_options.backoff_abandons = config.backoff_abandons;
  arbiter_options.backoff_window = config.backoff_window;
  arbiter_options.backoff_cooldown = config.backoff_cooldown;
  arbiter_options.stale_while_revalidate =
      config.stale_while_revalidate == "fingerprint";
  arbiter_options.device_model = DeviceModel(info.fingerprint);
  storage::TuneStore* raw_store = d->store_.get();
  d->arbiter_ = std::make_unique<Arbiter>(
      arbiter_options, &d->clock_,
      [raw_store](uint64_t n) { return raw_store->ReserveClaimIds(n); },
      info.fingerprint_digest);
  const absl::Time load_start = absl::Now();
  int64_t loaded = 0;
  // Whether each fingerprint digest other than ours names our device model
  // (stale-while-revalidate): summaries carry no fingerprint, so one entry
  // per digest is read; there are a handful (one per software version).
  absl::flat_hash_map<std::string, bool> same_model;
  absl::Status load_error;
  if (absl::Status s = d->store_->ForEachSummary(
          [&](std::string key_id, std::string summary, std::string cs,
              std::string fingerprint) {
            if (!load_error.ok()) return;
            bool model = false;
            if (info.fingerprint_digest &&
                fingerprint != *info.fingerprint_digest) {
              auto known = same_model.find(fingerprint);
              if (known != same_model.end()) {
                model = known->second;
              } else {
                absl::StatusOr<std::optional<v1::Entry>> entry =
                    d->store_->Get(key_id);
                if (!entry.ok()) {
                  load_error = entry.status();
                  return;
                }
                if (!entry->has_value()) return;  // damaged: quarantined
                model = DeviceModel((*entry)->fingerprint()) ==
                        arbiter_options.device_model;
                same_model.emplace(fingerprint, model);
              }
            }
            d->arbiter_->LoadSummary(key_id, std::move(summary), std::move(cs),
                                     fingerprint, model);
            ++loaded;
          });
      !s.ok() || !load_error.ok()) {
    if (s.ok()) s = load_error;
    return absl::Status(s.code(),
                        absl::StrCat("loading ", config.db, ": ", s.message()));
  }

  spdlog::info("database {} opened and checked in {}, {} entries indexed in {}",
               config.db, absl::FormatDuration(load_start - open_start), loaded,
               absl::FormatDuration(absl::Now() - load_start));
  malloc_trim(0);  // hand loading's transient pages back to the system
  ChangeFeedOptions feed_options;
  feed_options.max_lag = static_cast<size_t>(config.subscriber_max_lag);
  d->change_feed_ = std::make_unique<ChangeFeed>(feed_options);
  d->arbiter_->set_change_feed(d->change_feed_.get());
  d->store_executor_ = std::make_unique<SerialExecutor>();
  JobQueueOptions job_options;
  job_options.metrics = d->metrics_.get();
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
  d->authority_ =
      std::make_unique<Authority>(&d->peers_, geteuid(), *admin_group);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const bool tls = !config.tls_cert_file.empty();
  int port = 0;
  if (tls) {
    // gRPC's own listener (TLS needs its handshake); see listener.h for
    // what that listener does when out of descriptors.
    absl::StatusOr<std::string> cert = ReadFile(config.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(config.tls_key_file);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    builder.AddListeningPort(config.listen, grpc::SslServerCredentials(ssl),
                             &port);
  } else {
    ListenerOptions listener_options;
    listener_options.address = config.listen;
    listener_options.socket_mode = config.socket_mode;
    absl::StatusOr<std::unique_ptr<Listener>> listener =
        *inherited_fd >= 0 ? Listener::Adopt(*inherited_fd, listener_options)
                           : Listener::Bind(listener_options);
    if (!listener.ok()) {
      return absl::Status(
          listener.status().code(),
          absl::StrCat("cannot listen on ",
                       *inherited_fd >= 0 ? "the socket passed by systemd"
                                          : config.listen,
                       ": ", listener.status().message()));
    }
    if (*inherited_fd >= 0) {
      spdlog::info("socket-activated: serving {} (passed by systemd)",
                   (*listener)->address());
    }
    d->listener_ = std::move(*listener);
    d->info_.listen_address = d->listener_->address();
  }
  // Findable by GPU UUID next to the index name (daemon/device_identity.h);
  // a daemon that cannot make its link still serves by its socket's name.
  if (!info.device_uuid.empty() && !socket_path.empty()) {
    absl::StatusOr<ByUuidLink> link =
        ByUuidLink::Create(socket_path, info.device_uuid);
    if (link.ok()) {
      spdlog::info("device {}{}{}: linked {}", info.device_uuid,
                   info.pci_bus_id.empty() ? "" : " at PCI ", info.pci_bus_id,
                   link->path());
      d->by_uuid_link_.emplace(std::move(*link));
    } else {
      spdlog::warn("{}: clients cannot find this daemon by GPU UUID",
                   link.status().message());
    }
  }
  // After the bind: GetStatus reports the address as bound (a TCP port 0
  // becomes the port chosen).
  d->tune_service_ = std::make_unique<TuneServiceImpl>(
      info, d->arbiter_.get(), d->store_.get(), d->jobs_.get(),
      d->store_executor_.get(), &d->clock_, d->authority_.get());
  d->admin_service_ = std::make_unique<AdminServiceImpl>(
      d->store_.get(), d->jobs_.get(), d->store_executor_.get(),
      d->authority_.get());
  d->metrics_->ReadFrom(d->jobs_.get(), d->arbiter_.get(), config.db);
  d->metrics_->ReadChangesFrom(d->change_feed_.get());
  d->admin_service_->set_metrics(d->metrics_.get());
  d->tune_service_->set_metrics(d->metrics_.get());
  d->tune_service_->set_change_feed(d->change_feed_.get());
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
      fleet_options.claim_timeout = config.fleet_claim_timeout;
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
      d->metrics_->ReadFleetFrom(d->fleet_.get());
      d->fleet_->Start();
    }
  }
  if (arbiter_options.stale_while_revalidate && d->backend_ &&
      info.fingerprint_digest) {
    d->revalidator_ = std::make_unique<Revalidator>(
        d->arbiter_.get(), d->jobs_.get(), &d->clock_, config.revalidate_idle);
    d->tune_service_->set_revalidator(d->revalidator_.get());
  }
  if (config.max_connection_idle > absl::ZeroDuration()) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_IDLE_MS,
        static_cast<int>(std::min<int64_t>(
            absl::ToInt64Milliseconds(config.max_connection_idle), INT32_MAX)));
  }
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxStreamsPerConnection);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  // Bounds the memory of the calls in flight (see kCallMemoryQuotaBytes).
  grpc::ResourceQuota quota("gputuned-calls");
  quota.Resize(kCallMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  builder.RegisterService(d->tune_service_.get());
  builder.RegisterService(d->admin_service_.get());
  builder.experimental().SetInterceptorCreators(
      d->metrics_->InterceptorFactories());
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || (tls && port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen,
                     ": is the address in use, or the certificate unusable?"));
  }
  if (tls) {
    // The port gRPC bound: the one asked for, or the kernel's for port 0.
    d->info_.listen_address = absl::StrCat(
        config.listen.substr(0, config.listen.rfind(':') + 1), port);
  }
  if (d->listener_) d->listener_->Start(d->server_.get(), &d->peers_);
  if (d->server_->GetHealthCheckService())
    d->server_->GetHealthCheckService()->SetServingStatus(true);

  if (!config.redis_listen.empty()) {
    redis::RedisServerDeps deps;
    deps.arbiter = d->arbiter_.get();
    deps.store = d->store_.get();
    deps.executor = d->store_executor_.get();
    deps.fleet = d->fleet_.get();
    deps.authority = d->authority_.get();
    deps.clock = &d->clock_;
    deps.fingerprint = info.fingerprint;
    deps.version = std::string(BuildVersion());
    absl::StatusOr<std::unique_ptr<redis::RedisServer>> redis =
        redis::RedisServer::Start(ro, deps);
    if (!redis.ok()) return redis.status();
    d->redis_ = std::move(*redis);
  }
  if (!config.metrics_textfile.empty()) {
    d->metrics_writer_ = std::make_unique<MetricsTextfileWriter>(
        d->metrics_.get(), config.metrics_textfile, config.metrics_interval);
  }
  Daemon* raw = d.get();
  d->sweeper_ = std::thread([raw] {
    while (!raw->stopping_.load()) {
      raw->arbiter_->Sweep();
      raw->sweeps_.fetch_add(1);
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  spdlog::info(
      "gputuned {} serving on {} (database {}, {} entries, backend {}{}; "
      "up to {} connections)",
      std::string(BuildVersion()), d->info_.listen_address, config.db, loaded,
      info.backend, d->backend_ ? "" : ": cache only",
      d->listener_ ? d->listener_->connection_limit() : files);
  return d;
}

Daemon::~Daemon() { Shutdown(); }

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("gputuned shutting down");
  metrics_writer_.reset();  // writes the last values while all is there
  if (server_ && server_->GetHealthCheckService())
    server_->GetHealthCheckService()->SetServingStatus(false);
  if (jobs_) jobs_->Stop();
  if (revalidator_) revalidator_->Stop();      // its re-tune was answered
  if (by_uuid_link_) by_uuid_link_->Remove();  // before the socket goes
  if (listener_) listener_->Stop();  // no new connections; removes the socket
  if (redis_) redis_->Stop();  // abandons its claims, waits for its writes
  // Change streams never end by themselves: end them so that the server's
  // shutdown does not wait out its grace for them.
  if (change_feed_) change_feed_->Close();
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
  // ...and the server must answer a health check through the socket
  // clients use, over a connection of its own (a local subchannel pool: not
  // one shared with an earlier check): the accept loop, gRPC and the
  // handlers all work. A TLS listener is checked in process.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = grpc::health::v1::Health::NewStub(
      listener_
          ? grpc::CreateCustomChannel(listener_->address(),
                                      grpc::InsecureChannelCredentials(), args)
          : server_->InProcessChannel(args));
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
