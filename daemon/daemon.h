// Daemon: gputuned assembled — store, arbiter, backend, job queue and the gRPC
// server — with an orderly start and shutdown.
//
//   absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(config);
//   ... (*d)->Shutdown();
//
// Start returns once the database is open and loaded, the backend chosen and
// the socket bound: the daemon is serving (what READY=1 means to systemd).
#ifndef GPUTUNE_DAEMON_DAEMON_H_
#define GPUTUNE_DAEMON_DAEMON_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/arbiter.h"
#include "daemon/authority.h"
#include "daemon/clock.h"
#include "daemon/config.h"
#include "daemon/device_identity.h"
#include "daemon/fleet/fleet_link.h"
#include "daemon/instance_lock.h"
#include "daemon/job_queue.h"
#include "daemon/listener.h"
#include "daemon/metrics.h"
#include "daemon/redis/redis_server.h"
#include "daemon/revalidator.h"
#include "daemon/serial_executor.h"
#include "daemon/tune_service.h"
#include "grpcpp/server.h"
#include "kernels/backend.h"
#include "storage/tune_store.h"

namespace gputune {

class Daemon {
 public:
  // Fails (with a message for the operator) when the database cannot be
  // opened, another daemon holds the database or the socket (naming its
  // pid), the address cannot be bound, or a TCP address is not loopback and
  // has neither TLS nor --allow_insecure_tcp. A corrupt database is not a
  // failure: it is quarantined and reported in GetStatus. Raises the soft
  // RLIMIT_NOFILE to the hard limit.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const Config& config);
  // Shuts down if Shutdown was not called.
  ~Daemon();

  // Health NOT_SERVING, stop the job queue (abandoning its jobs), stop the
  // server (calls in flight get shutdown_grace to finish), drain the store
  // executor, close the database. Idempotent.
  void Shutdown();

  // Whether the lease sweeper ran since the last call, the daemon answers a
  // health check over a fresh connection through its own socket (so a
  // listener that stopped accepting is caught), the device worker is not
  // stuck, and the device (if any) was not lost: what the watchdog reports.
  // Call from one thread, at intervals above 100 ms; takes up to 2 s.
  bool Alive();

  // One line for sd_notify STATUS= and logs: entries, claims, queue, backend.
  std::string StatusLine();

  // Applies runtime-changeable settings (log level, autotune log).
  void ApplyRuntimeConfig(const Config& config);

  const DaemonInfo& info() const { return info_; }

 private:
  Daemon() = default;

  Config config_;
  DaemonInfo info_;
  // Held for the daemon's life: released by the kernel however it ends.
  std::optional<InstanceLock> db_lock_;
  std::optional<InstanceLock> socket_lock_;
  std::vector<InstanceLock> redis_socket_locks_;  // --redis_listen unix:
  PeerTable peers_;
  std::unique_ptr<Authority> authority_;
  std::unique_ptr<Listener> listener_;
  std::optional<ByUuidLink> by_uuid_link_;  // unix sockets with a known UUID
  RealClock clock_;
  // Before everything that reports into it (destroyed after them).
  std::unique_ptr<DaemonMetrics> metrics_;
  std::unique_ptr<storage::TuneStore> store_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<ChangeFeed> change_feed_;  // outlives the arbiter's use
  std::unique_ptr<Arbiter> arbiter_;
  std::unique_ptr<SerialExecutor> store_executor_;
  std::unique_ptr<JobQueue> jobs_;
  std::unique_ptr<fleet::FleetLink> fleet_;  // null without --fleet
  // Stale-while-revalidate's background re-tunes; null when off or without
  // a backend.
  std::unique_ptr<Revalidator> revalidator_;
  std::unique_ptr<TuneServiceImpl> tune_service_;
  std::unique_ptr<AdminServiceImpl> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<redis::RedisServer> redis_;  // null without --redis_listen
  std::thread sweeper_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> sweeps_{0};
  int64_t last_alive_sweeps_ = -1;
  bool shut_down_ = false;
  std::unique_ptr<MetricsTextfileWriter> metrics_writer_;  // reads the rest
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_DAEMON_H_
