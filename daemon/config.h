// Config: every setting of gputuned, with its default, in one place.
//
// Settings come from (later wins): the defaults below, a config file
// (--config=FILE, lines "name = value", '#' comments), then command-line flags
// (--name=value). `gputuned --help` prints this table.
//
//   absl::StatusOr<Config> config = ParseConfig(argc, argv, getenv);
#ifndef GPUTUNE_DAEMON_CONFIG_H_
#define GPUTUNE_DAEMON_CONFIG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gputune {

struct Config {
  // Where to listen: unix:///path or (only when asked) host:port. Default:
  // $RUNTIME_DIRECTORY/gpu<device>.sock under systemd, else
  // var/gpu<device>.sock under the working directory. Relative socket paths
  // are made absolute.
  std::string listen;
  // SQLite database. Default: $STATE_DIRECTORY/gpu<device>.db under systemd,
  // else var/gpu<device>.db under the working directory.
  std::string db;
  // Device ordinal (or GPU UUID for the CUDA backend).
  std::string device = "0";
  // The identity reported (GetStatus.device_uuid) and linked as
  // <socket dir>/by-uuid/<UUID>.sock by a daemon without a GPU (host
  // backend: default HOST-<digest of the machine id and device>); gives
  // two host daemons chosen identities in tests. With the CUDA backend it
  // must be the GPU's own UUID (daemon/device_identity.h).
  std::string device_uuid;
  // Benchmark backend: auto (cuda when a device is usable, else host), cuda,
  // host, none (serve the cache only), fault (test-only host + injected
  // faulty candidates).
  std::string backend = "auto";
  // With --backend=fault (tests only): the candidate list, as
  // "kernel(a=1);kernel(b=2)"; empty: FaultBackend's default list.
  std::string fault_candidates;
  // CUDA backend: heuristic candidates and workspace limit.
  int cublaslt_candidates = 8;
  uint64_t workspace_bytes = 32u << 20;
  // Socket file mode for a unix listener (octal); the socket has it from the
  // moment it appears.
  uint32_t socket_mode = 0660;
  // Group whose members (primary or supplementary) may make operator calls
  // (DeleteEntries, ImportEntries, Backup, SetLogLevel) on the unix socket,
  // besides root and the daemon's own user. Empty: none.
  std::string admin_group;
  // TCP: a --listen address that is not loopback needs TLS (both files, PEM)
  // or allow_insecure_tcp.
  std::string tls_cert_file;
  std::string tls_key_file;
  bool allow_insecure_tcp = false;
  // A connection with no call for this long is closed (GOAWAY; clients
  // reconnect when they next call), so idle connections cannot hold the
  // descriptors forever. Zero: never.
  absl::Duration max_connection_idle = absl::Minutes(10);
  std::string config_file;

  // Leases and backoff.
  absl::Duration lease_ttl = absl::Seconds(30);
  absl::Duration max_lease_ttl = absl::Hours(1);
  int backoff_abandons = 3;
  absl::Duration backoff_window = absl::Minutes(5);
  absl::Duration backoff_cooldown = absl::Minutes(1);

  // Benchmarking.
  int queue_capacity = 256;
  absl::Duration tune_budget = absl::Seconds(2);
  int min_improvement_bps = 200;
  int max_candidates = 16;
  absl::Duration job_timeout = absl::Minutes(2);  // a job past it is cancelled
  std::string autotune_log = "minimal";           // disabled | minimal | full
  // Stale-while-revalidate: "fingerprint" serves an entry of the same
  // device model measured with other software (a driver, CUDA, cuBLASLt or
  // gputune upgrade) as stale-but-usable and re-tunes its dense keys in the
  // background once the benchmark queue has been empty for
  // revalidate_idle, most looked-up first; "off": such entries are plainly
  // STALE. Never for a candidate-set change.
  std::string stale_while_revalidate = "fingerprint";
  absl::Duration revalidate_idle = absl::Seconds(2);

  // Storage.
  bool db_sync_full = true;  // synchronous=FULL (else NORMAL)

  // The fleet tier: a libpq connection string or postgresql:// URI; empty:
  // no fleet. The password is best kept in PGPASSFILE / ~/.pgpass.
  std::string fleet;
  absl::Duration fleet_lease_ttl = absl::Seconds(30);     // fleet claim lease
  absl::Duration fleet_poll_interval = absl::Seconds(1);  // feed without NOTIFY
  // A fleet claim's round trip at most; past it the Claim is decided locally
  // (under libgputune's 2 s default deadline, so clients never wait it out).
  absl::Duration fleet_claim_timeout = absl::Seconds(1);
  int fleet_outbox_limit = 100000;  // records waiting to be published, at most

  // Server.
  int max_message_bytes = 64 << 20;
  // Changes the feed keeps (SubscribeChanges): how far a subscriber may fall
  // behind before it is cut off.
  int subscriber_max_lag = 4096;
  // How long SIGTERM lets calls in flight finish. gRPC's Server::Shutdown
  // waits this long whenever a client keeps an idle connection open (every
  // inference server does), and our unary calls finish in milliseconds once
  // the job queue has stopped, so it is short.
  absl::Duration shutdown_grace = absl::Seconds(1);
  absl::Duration watchdog_interval = absl::ZeroDuration();  // 0: from systemd

  // Metrics (daemon/metrics.h): the Prometheus text file written every
  // metrics_interval, for node_exporter's textfile collector; empty: none.
  std::string metrics_textfile;
  absl::Duration metrics_interval = absl::Seconds(15);

  // The Redis front door (docs/integrations.md): addresses (comma list, or
  // the flag repeated) such as 127.0.0.1:6390 or unix:/run/gputuned/redis.sock;
  // empty: off. A non-loopback address needs redis_password_file and
  // allow_insecure_tcp.
  std::string redis_listen;
  std::string redis_password_file;  // AUTH password (first line); empty: none
  // Single flight: the lease of the claim a first reader of a tuned key holds
  // (while its connection is open), and how long other readers wait for it.
  absl::Duration redis_claim_ttl = absl::Minutes(10);
  absl::Duration redis_wait = absl::Minutes(10);
  // Comma list of fnmatch(3) patterns of tuned keys; empty: the defaults
  // (Inductor's and Triton's autotune keys, daemon/redis/redis_keys.h).
  std::string redis_tuned_keys;
  // The largest value a SET stores, in bytes (at most kMaxRedisValueBytes,
  // 32 MiB): Triton's remote cache keeps compiled kernels there.
  int redis_max_value = 8 << 20;

  // Logging: trace, debug, info, warn, error, critical, off.
  std::string log_level = "info";

  bool help = false;
};

// Parses flags (and the config file they name). `getenv` supplies
// RUNTIME_DIRECTORY / STATE_DIRECTORY for the defaults. INVALID_ARGUMENT
// names the bad flag or file line.
absl::StatusOr<Config> ParseConfig(
    const std::vector<std::string>& args,
    const std::function<const char*(const char*)>& getenv);

// Re-reads the config file for the settings that may change at runtime
// (log_level, autotune_log) and returns the updated config.
absl::StatusOr<Config> ReloadConfig(const Config& current);

// The --help text: every setting, its default and meaning.
std::string ConfigHelp();

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_CONFIG_H_
