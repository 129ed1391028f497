#include "daemon/config.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/device_identity.h"
#include "proto/validation.h"

namespace gputune {
namespace {

using Setter = std::function<absl::Status(Config&, absl::string_view)>;

struct Option {
  const char* name;
  const char* help;
  Setter set;
  std::function<std::string(const Config&)> show;
};

absl::Status Bad(absl::string_view name, absl::string_view value,
                 absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", value, ": expected ", expected));
}

Option Text(const char* name, const char* help, std::string Config::*field) {
  return {name, help,
          [field](Config& c, absl::string_view v) {
            c.*field = std::string(v);
            return absl::OkStatus();
          },
          [field](const Config& c) { return c.*field; }};
}

Option Int(const char* name, const char* help, int Config::*field, int lo,
           int hi) {
  return {name, help,
          [=](Config& c, absl::string_view v) {
            int x = 0;
            if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
              return Bad(name, v, absl::StrCat("an integer in ", lo, "..", hi));
            }
            c.*field = x;
            return absl::OkStatus();
          },
          [field](const Config& c) { return absl::StrCat(c.*field); }};
}

Option Dur(const char* name, const char* help, absl::Duration Config::*field) {
  return {name, help,
          [=](Config& c, absl::string_view v) {
            absl::Duration d;
            if (!absl::ParseDuration(v, &d) || d < absl::ZeroDuration()) {
              return Bad(name, v, "a duration such as 30s, 500ms or 5m");
            }
            c.*field = d;
            return absl::OkStatus();
          },
          [field](const Config& c) { return absl::FormatDuration(c.*field); }};
}

Option Bool(const char* name, const char* help, bool Config::*field) {
  return {name, help,
          [=](Config& c, absl::string_view v) {
            if (v == "true" || v == "1" || v.empty()) {
              c.*field = true;
            } else if (v == "false" || v == "0") {
              c.*field = false;
            } else {
              return Bad(name, v, "true or false");
            }
            return absl::OkStatus();
          },
          [field](const Config& c) { return c.*field ? "true" : "false"; }};
}

Option OneOf(const char* name, const char* help, std::string Config::*field,
             std::vector<std::string> allowed) {
  return {name, help,
          [=](Config& c, absl::string_view v) {
            for (const auto& a : allowed) {
              if (v == a) {
                c.*field = std::string(v);
                return absl::OkStatus();
              }
            }
            std::string list;
            for (const auto& a : allowed)
              absl::StrAppend(&list, list.empty() ? "" : ", ", a);
            return Bad(name, v, absl::StrCat("one of: ", list));
          },
          [field](const Config& c) { return c.*field; }};
}

const std::vector<Option>& Options() {
  static const auto* options = new std::vector<Option>{
      Text("config", "config file with 'name = value' lines",
           &Config::config_file),
      Text("listen",
           "unix:///path, or host:port for TCP (default: "
           "$RUNTIME_DIRECTORY/gpu<device>.sock, else ./var/gpu<device>.sock)",
           &Config::listen),
      Text("db",
           "SQLite database (default: $STATE_DIRECTORY/gpu<device>.db, else "
           "./var/gpu<device>.db)",
           &Config::db),
      Text("device", "device ordinal or GPU UUID", &Config::device),
      Text("device_uuid",
           "the device UUID to report and link by-uuid/<UUID>.sock as, for "
           "backends without a GPU (default: host backend HOST-<digest of "
           "/etc/machine-id and --device>); must match the GPU's with cuda",
           &Config::device_uuid),
      OneOf("backend",
            "auto | cuda | host | none (cache only) | fault (tests only)",
            &Config::backend, {"auto", "cuda", "host", "none", "fault"}),
      Text("fault_candidates",
           "--backend=fault only (tests): candidates as "
           "'kernel(a=1);kernel(b=2)'",
           &Config::fault_candidates),
      Int("cublaslt_candidates", "cuBLASLt heuristic algorithms per key (CUDA)",
          &Config::cublaslt_candidates, 1, 64),
      {"socket_mode", "unix socket file mode (octal)",
       [](Config& c, absl::string_view v) {
         uint32_t mode = 0;
         const auto [end, ec] =
             std::from_chars(v.data(), v.data() + v.size(), mode, 8);
         if (ec != std::errc() || end != v.data() + v.size() || v.empty() ||
             mode > 0777) {
           return Bad("socket_mode", v, "an octal mode such as 0660");
         }
         c.socket_mode = mode;
         return absl::OkStatus();
       },
       [](const Config& c) {
         std::ostringstream out;
         out << "0" << std::oct << c.socket_mode;
         return out.str();
       }},
      Text("admin_group",
           "group allowed operator calls (delete, import, backup, log level) "
           "besides root and the daemon's user",
           &Config::admin_group),
      Text("tls_cert_file", "TLS certificate chain (PEM) for a TCP --listen",
           &Config::tls_cert_file),
      Text("tls_key_file", "TLS private key (PEM) for a TCP --listen",
           &Config::tls_key_file),
      Bool("allow_insecure_tcp",
           "serve a non-loopback TCP --listen without TLS (anyone on the "
           "network may then call)",
           &Config::allow_insecure_tcp),
      Dur("max_connection_idle",
          "close connections without calls for this long (0: never)",
          &Config::max_connection_idle),
      Dur("lease_ttl", "default claim lease", &Config::lease_ttl),
      Dur("max_lease_ttl", "longest lease a client may ask for",
          &Config::max_lease_ttl),
      Int("backoff_abandons",
          "abandons within backoff_window that trip BACKOFF",
          &Config::backoff_abandons, 1, 1000),
      Dur("backoff_window", "window for counting abandons",
          &Config::backoff_window),
      Dur("backoff_cooldown", "how long a key stays in BACKOFF",
          &Config::backoff_cooldown),
      Int("subscriber_max_lag",
          "changes a SubscribeChanges stream may fall behind before it is "
          "cut off",
          &Config::subscriber_max_lag, 1, 1 << 20),
      Int("queue_capacity",
          "benchmark jobs that may wait (then RESOURCE_EXHAUSTED)",
          &Config::queue_capacity, 1, 1 << 20),
      Dur("tune_budget", "timing budget per key", &Config::tune_budget),
      Int("min_improvement_bps",
          "the winner must beat the default by this many basis points",
          &Config::min_improvement_bps, 0, 10000),
      Int("max_candidates", "candidates per key", &Config::max_candidates, 1,
          256),
      Dur("job_timeout", "a benchmark job running longer is cancelled",
          &Config::job_timeout),
      OneOf("autotune_log", "disabled | minimal | full", &Config::autotune_log,
            {"disabled", "minimal", "full"}),
      OneOf("stale_while_revalidate",
            "fingerprint (serve entries of this device model from older "
            "software as stale-but-usable and re-tune them when idle) | off",
            &Config::stale_while_revalidate, {"fingerprint", "off"}),
      Dur("revalidate_idle",
          "how long the benchmark queue must be empty before a background "
          "re-tune of a stale-but-usable key",
          &Config::revalidate_idle),
      Bool("db_sync_full",
           "SQLite synchronous=FULL (survives power loss) rather than NORMAL "
           "(survives a process crash)",
           &Config::db_sync_full),
      Text("fleet",
           "fleet tier: a libpq connection string or postgresql:// URI "
           "(empty: no fleet); passwords from PGPASSFILE or ~/.pgpass",
           &Config::fleet),
      Dur("fleet_lease_ttl",
          "lease of a fleet claim (renewed while tuning; a holder silent "
          "this long is taken over)",
          &Config::fleet_lease_ttl),
      Dur("fleet_claim_timeout",
          "a fleet claim's round trip at most; past it (a slow or stopped "
          "PostgreSQL) Claims are decided locally for a while",
          &Config::fleet_claim_timeout),
      Dur("fleet_poll_interval",
          "how often the fleet feed is read when no NOTIFY came",
          &Config::fleet_poll_interval),
      Int("fleet_outbox_limit",
          "records waiting to be published to the fleet, at most (then kept "
          "locally only)",
          &Config::fleet_outbox_limit, 1, 1 << 30),
      Int("max_message_bytes", "largest gRPC message",
          &Config::max_message_bytes, 4096, 1 << 30),
      Dur("shutdown_grace", "how long SIGTERM waits for calls in flight",
          &Config::shutdown_grace),
      Dur("watchdog_interval",
          "sd_notify WATCHDOG=1 period (0: half of systemd's WatchdogSec)",
          &Config::watchdog_interval),
      Text("metrics_textfile",
           "write Prometheus metrics to this file (atomically) every "
           "metrics_interval, e.g. /var/lib/prometheus/node-exporter/"
           "gputune-gpu0.prom; empty: none",
           &Config::metrics_textfile),
      Dur("metrics_interval", "how often metrics_textfile is rewritten",
          &Config::metrics_interval),
      {"redis_listen",
       "Redis-protocol front door: address(es), comma-separated or the flag "
       "repeated, e.g. 127.0.0.1:6390 or unix:/run/gputuned/redis.sock "
       "(empty: off)",
       [](Config& c, absl::string_view v) {
         if (!c.redis_listen.empty() && !v.empty()) c.redis_listen += ",";
         c.redis_listen += std::string(v);
         return absl::OkStatus();
       },
       [](const Config& c) { return c.redis_listen; }},
      Text("redis_password_file",
           "file whose first line is the password Redis clients must AUTH "
           "with (empty: none)",
           &Config::redis_password_file),
      Dur("redis_claim_ttl",
          "lease of the first reader's claim on a missed tuned key (held "
          "while its connection is open)",
          &Config::redis_claim_ttl),
      Dur("redis_wait",
          "how long other readers of a tuned key wait for the holder's SET "
          "before they get nil",
          &Config::redis_wait),
      Text("redis_tuned_keys",
           "comma-separated fnmatch patterns of single-flighted keys (empty: "
           "Inductor's and Triton's autotune keys)",
           &Config::redis_tuned_keys),
      Int("redis_max_value",
          "largest value a Redis SET stores, in bytes (a larger one gets an "
          "error); with --fleet, values over 1 MiB stay on this daemon",
          &Config::redis_max_value, 1, static_cast<int>(kMaxRedisValueBytes)),
      OneOf("log_level", "trace | debug | info | warn | error | critical | off",
            &Config::log_level,
            {"trace", "debug", "info", "warn", "error", "critical", "off"}),
  };
  return *options;
}

const Option* Find(absl::string_view name) {
  for (const Option& o : Options()) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

absl::Status ApplyFile(const std::string& path, Config& config,
                       bool runtime_only) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config=", path, ": cannot open the file"));
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", number, ": expected 'name = value', got '", text, "'"));
    }
    absl::string_view name = absl::StripAsciiWhitespace(text.substr(0, eq));
    absl::string_view value = absl::StripAsciiWhitespace(text.substr(eq + 1));
    const Option* option = Find(name);
    if (option == nullptr || name == "config") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": unknown setting '", name, "'"));
    }
    if (runtime_only && name != "log_level" && name != "autotune_log") continue;
    if (absl::Status s = option->set(config, value); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(
    const std::vector<std::string>& args,
    const std::function<const char*(const char*)>& getenv) {
  Config config;
  // Flags are applied after the file, so find --config first.
  std::vector<std::pair<const Option*, std::string>> flags;
  for (const std::string& arg : args) {
    absl::string_view a = arg;
    if (a == "--help" || a == "-h") {
      config.help = true;
      continue;
    }
    if (!absl::ConsumePrefix(&a, "--")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument '", arg, "': flags look like --name=value"));
    }
    const size_t eq = a.find('=');
    std::string name(a.substr(0, eq));
    std::replace(name.begin(), name.end(), '-', '_');
    const Option* option = Find(name);
    if (option == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, " (gputuned --help lists them)"));
    }
    flags.emplace_back(option, eq == absl::string_view::npos
                                   ? std::string()
                                   : std::string(a.substr(eq + 1)));
  }
  for (const auto& [option, value] : flags) {
    if (absl::string_view(option->name) == "config") config.config_file = value;
  }
  if (!config.config_file.empty()) {
    if (auto s = ApplyFile(config.config_file, config, false); !s.ok())
      return s;
  }
  for (const auto& [option, value] : flags) {
    if (auto s = option->set(config, value); !s.ok()) return s;
  }
  const char* runtime_dir = getenv("RUNTIME_DIRECTORY");
  const char* state_dir = getenv("STATE_DIRECTORY");
  const std::string base = absl::StrCat("gpu", config.device);
  if (config.listen.empty()) {
    config.listen = absl::StrCat(
        "unix://", runtime_dir && *runtime_dir ? runtime_dir : "var", "/", base,
        ".sock");
  }
  if (config.db.empty()) {
    config.db = absl::StrCat(state_dir && *state_dir ? state_dir : "var", "/",
                             base, ".db");
  }
  // gRPC reads "unix://x/y" as authority x: make socket paths absolute.
  absl::string_view socket = config.listen;
  if (absl::ConsumePrefix(&socket, "unix://") ||
      absl::ConsumePrefix(&socket, "unix:")) {
    if (socket.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen=", config.listen,
          ": a unix socket needs a path (unix:///run/gputuned/gpu0.sock)"));
    }
    config.listen = absl::StrCat(
        "unix://", std::filesystem::absolute(std::string(socket)).string());
  }
  config.db = std::filesystem::absolute(config.db).string();  // never empty
  if (!config.device_uuid.empty()) {
    if (auto s = ValidateDeviceUuid(config.device_uuid, "--device_uuid");
        !s.ok()) {
      return s;
    }
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both or "
        "neither");
  }
  if (config.fleet_claim_timeout < absl::Milliseconds(100) ||
      config.fleet_claim_timeout > absl::Minutes(1)) {
    return absl::InvalidArgumentError(
        "--fleet_claim_timeout: must lie within 100ms..1m");
  }
  if (config.fleet_lease_ttl < absl::Milliseconds(300)) {
    return absl::InvalidArgumentError(
        "--fleet_lease_ttl: at least 300ms (it is renewed every third)");
  }
  if (config.redis_claim_ttl > config.max_lease_ttl ||
      config.redis_claim_ttl < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        "--redis_claim_ttl: must lie within 100ms..--max_lease_ttl");
  }
  if (config.lease_ttl > config.max_lease_ttl) {
    return absl::InvalidArgumentError(
        "--lease_ttl: must not exceed --max_lease_ttl");
  }
  return config;
}

absl::StatusOr<Config> ReloadConfig(const Config& current) {
  Config config = current;
  if (config.config_file.empty()) return config;
  if (auto s = ApplyFile(config.config_file, config, true); !s.ok()) return s;
  return config;
}

std::string ConfigHelp() {
  const Config defaults;
  std::string out =
      "usage: gputuned [--name=value ...] | --help | --version\n"
      "  --help\n"
      "      print this list (after reading --config) and exit\n"
      "  --version\n"
      "      print the version, the git revision and the backends built, "
      "and exit\n"
      "Settings (also accepted as 'name = value' lines in --config=FILE):\n";
  for (const Option& o : Options()) {
    absl::StrAppend(&out, "  --", o.name, "\n      ", o.help);
    const std::string def = o.show(defaults);
    if (!def.empty()) absl::StrAppend(&out, " [default: ", def, "]");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace gputune
