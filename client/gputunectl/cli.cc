#include "client/gputunectl/cli.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gputune::ctl {
namespace {

const std::set<std::string>& BoolFlags() {
  static const auto* flags = new std::set<std::string>{
      "json", "help", "all", "no-wait", "with-measurements"};
  return *flags;
}

const std::set<std::string>& ValueFlags() {
  static const auto* flags = new std::set<std::string>{
      "endpoint", "device", "timeout",      "op",         "phase",
      "role",     "state",  "limit",        "page-token", "ttl",
      "holder",   "reason", "autotune-log", "poll",       "fleet"};
  return *flags;
}

}  // namespace

ExitCode ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalid;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kResourceExhausted:
      return kExitConflict;
    case absl::StatusCode::kAborted:
      return kExitTuneFailed;
    default:
      return kExitError;
  }
}

std::string CommandLine::Get(const std::string& name,
                             const std::string& fallback) const {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

absl::StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& argv) {
  CommandLine cl;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h") {
      cl.flags["help"] = "";
      continue;
    }
    if (!absl::StartsWith(arg, "--") || arg == "--") {
      if (cl.command.empty()) {
        cl.command = arg;
      } else {
        cl.args.push_back(arg);
      }
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (BoolFlags().count(name)) {
      if (value) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " takes no value"));
      }
      cl.flags[name] = "";
    } else if (ValueFlags().count(name)) {
      if (!value) {
        if (i + 1 >= argv.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--", name, " needs a value"));
        }
        value = argv[++i];
      }
      cl.flags[name] = *value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see gputunectl --help)"));
    }
  }
  return cl;
}

absl::StatusOr<absl::Duration> DurationFlag(const CommandLine& cl,
                                            const std::string& name,
                                            absl::Duration fallback) {
  if (!cl.Has(name)) return fallback;
  absl::Duration d;
  if (!absl::ParseDuration(cl.Get(name), &d) || d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", cl.Get(name),
                     ": expected a positive duration like 300ms, 30s, 5m"));
  }
  return d;
}

absl::StatusOr<int> IntFlag(const CommandLine& cl, const std::string& name,
                            int fallback) {
  if (!cl.Has(name)) return fallback;
  int v = 0;
  if (!absl::SimpleAtoi(cl.Get(name), &v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, "=", cl.Get(name), ": expected a non-negative integer"));
  }
  return v;
}

std::string Usage() {
  return R"(gputunectl: inspect and operate gputuned, the per-GPU tuning daemon.

usage: gputunectl [global flags] COMMAND [args] [flags]

commands:
  status                        the daemon: device, database, claims, queue
  list                          entries, a page at a time
      [--op=OP] [--phase=prefill|decode] [--role=ROLE] [--state=hit|stale]
      [--limit=N] [--page-token=T] [--all] [--with-measurements]
  get KEY                       one entry with every candidate's measurements
  delete KEY... | --op/--phase/--role/--state filters | --all
      [--fleet=CONNINFO]  also delete the KEYs (or, with --all, every entry
                          of this daemon's fingerprint) from the fleet, as
                          the PostgreSQL role CONNINFO names: every daemon
                          of the fleet drops them and re-tunes on demand
  export FILE                   every entry (with its provenance) as JSON
                                lines; FILE '-' is stdout; filters as in list
  import FILE                   entries from an export; every line is checked
                                first, nothing is imported if one is bad
  claim KEY [--ttl=30s] [--holder=TEXT]
                                hold a key (nobody tunes it) until the lease
                                runs out or `abandon`
  abandon CLAIM_ID [--reason=TEXT]
  tune KEY [--no-wait] [--poll=250ms]
                                let the daemon benchmark a dense_bf16 key;
                                progress on stderr, then the entry
  backup PATH                   consistent copy of the database (absolute
                                path, must not exist)
  log-level LEVEL [--autotune-log=disabled|minimal|full]
                                LEVEL: trace debug info warn error critical off

global flags:
  --endpoint=E    unix:///path, /path or host:port (default: $GPUTUNE_ENDPOINT,
                  else unix:///run/gputuned/gpu<device>.sock)
  --device=N      device ordinal for the default endpoint (default 0)
  --json          protobuf JSON on stdout instead of tables
  --timeout=D     deadline of each call (default 30s; tune: the whole run)

KEY: dense_bf16/<prefill|decode>/<role>/m=<M>/k=<K>/n=<N>@<candidate_set>
     or <op>/<params>@<candidate_set>,
     e.g. dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1

exit codes: 0 ok, 1 error, 2 usage, 3 gputuned unreachable or too slow,
  4 not found, 5 invalid input, 6 refused by the key's state (pending,
  backoff, already tuned, queue full), 7 tuning failed
)";
}

}  // namespace gputune::ctl
