#include "client/gputunectl/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/gputunectl/entry_io.h"
#include "client/gputunectl/table.h"
#include "proto/key_format.h"
#include "version/build_info.h"

namespace gputune::ctl {
namespace {

using CommandFn = int (*)(Context&);

// The bodies of the commands in cli.cc's table.
const std::map<std::string, CommandFn>& Bodies() {
  static const auto* commands = new std::map<std::string, CommandFn>{
      {"status", RunStatus},
      {"list", RunList},
      {"get", RunGet},
      {"delete", RunDelete},
      {"export", RunExport},
      {"import", RunImport},
      {"claim", RunClaim},
      {"abandon", RunAbandon},
      {"tune", RunTune},
      {"backup", RunBackup},
      {"log-level", RunLogLevel},
      {"metrics", RunMetrics},
  };
  return *commands;
}

}  // namespace

int Fail(Context& ctx, absl::string_view doing, const absl::Status& status) {
  // gRPC says only "failed to connect" when the socket refuses this user:
  // check the socket ourselves.
  absl::string_view path = ctx.client.endpoint();
  if (status.code() == absl::StatusCode::kUnavailable &&
      absl::ConsumePrefix(&path, "unix://") &&
      access(std::string(path).c_str(), R_OK | W_OK) != 0 && errno == EACCES) {
    ctx.err << "gputunectl: " << doing << ": permission denied: join group "
            << "gputune to use " << path
            << " (sudo usermod -aG gputune $USER, then log in again)\n";
    return kExitError;
  }
  ctx.err << "gputunectl: " << doing << ": " << status.message() << "\n";
  return ExitCodeFor(status);
}

int UsageError(Context& ctx, absl::string_view message) {
  ctx.err << "gputunectl: " << message << "\n(gputunectl help "
          << ctx.cl.command << " shows its arguments and flags)\n";
  return kExitUsage;
}

absl::StatusOr<v1::EntryFilter> FilterFromFlags(const CommandLine& cl) {
  v1::EntryFilter filter;
  filter.set_op(cl.Get("op"));
  filter.set_role(cl.Get("role"));
  if (cl.Has("phase")) {
    const std::string phase = absl::AsciiStrToLower(cl.Get("phase"));
    if (phase == "prefill") {
      filter.set_phase(v1::PHASE_PREFILL);
    } else if (phase == "decode") {
      filter.set_phase(v1::PHASE_DECODE);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--phase=", cl.Get("phase"), ": expected prefill or decode"));
    }
  }
  if (cl.Has("state")) {
    const std::string state = absl::AsciiStrToLower(cl.Get("state"));
    if (state == "hit") {
      filter.set_state(v1::KEY_STATE_HIT);
    } else if (state == "stale") {
      filter.set_state(v1::KEY_STATE_STALE);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state=", cl.Get("state"),
          ": expected hit or stale (entries are one or the other)"));
    }
  }
  return filter;
}

int ExplainPending(Context& ctx, const v1::Key& key) {
  absl::StatusOr<LookupResult> now = ctx.client.Lookup(key);
  if (!now.ok() || now->state() != v1::KEY_STATE_PENDING) return -1;
  const v1::ClaimInfo& claim = now->status().claim();
  if (ctx.json) {
    ctx.out << ToJson(now->status(), /*pretty=*/true) << "\n";
  } else {
    ctx.err << "gputunectl: " << KeyText(key)
            << ": PENDING, no entry yet: being tuned by '" << claim.holder()
            << "' (claim " << claim.claim_id() << ", lease until "
            << ShortTime(claim.lease_deadline())
            << " UTC); gputunectl status shows the progress\n";
  }
  return kExitConflict;
}

void PrintEntry(Context& ctx, const v1::GetEntryResponse& got) {
  if (ctx.json) {
    ctx.out << ToJson(got, /*pretty=*/true) << "\n";
    return;
  }
  const v1::Entry& e = got.entry();
  const v1::Fingerprint& fp = e.fingerprint();
  Table about({"FIELD", "VALUE"});
  about.HideHeader();
  about.AddRow({"key", KeyText(e.key())});
  about.AddRow(
      {"state",
       absl::StrCat(got.stale_usable() ? absl::string_view("stale-but-usable")
                                       : KeyStateName(got.state()),
                    got.stale_reason().empty()
                        ? ""
                        : absl::StrCat(" (", got.stale_reason(), ")"))});
  about.AddRow({"kernel", absl::StrCat(e.execution().kernel(), " ",
                                       ShortParams(e.execution()))});
  about.AddRow(
      {"workspace", absl::StrCat(e.execution().workspace_bytes(), " bytes")});
  about.AddRow({"chosen time", ShortDuration(e.chosen_time())});
  about.AddRow({"default time", ShortDuration(e.default_time())});
  about.AddRow({"speedup", ShortSpeedup(e.speedup())});
  about.AddRow({"reason", e.reason().empty() ? "-" : e.reason()});
  for (const std::string& note : e.notes()) about.AddRow({"note", note});
  about.AddRow({"source", SourceName(e.source())});
  if (e.has_fleet()) {
    about.AddRow(
        {"from fleet",
         absl::StrCat("published by role ",
                      e.fleet().role().empty() ? "(unknown)" : e.fleet().role(),
                      " (says ", e.fleet().host(), " ", e.fleet().gpu(), "; ",
                      SourceName(e.fleet().published_source()),
                      "-measured; fleet claim ", e.fleet().fence(),
                      ", feed position ", e.fleet().seq(), ")")});
  }
  about.AddRow({"measured at", ShortTime(e.measured_at()) + " UTC"});
  about.AddRow(
      {"recorded by", e.recorded_by().empty() ? "-" : e.recorded_by()});
  about.AddRow(
      {"device", absl::StrCat(fp.backend(), ": ", fp.device_name(), " (",
                              fp.processor_count(), " processors)")});
  about.AddRow(
      {"software",
       absl::StrCat("kernels ", fp.kernel_version(),
                    fp.driver_version().empty()
                        ? ""
                        : absl::StrCat(", driver ", fp.driver_version()),
                    fp.cublaslt_version().empty()
                        ? ""
                        : absl::StrCat(", cublasLt ", fp.cublaslt_version()),
                    fp.build().empty() ? "" : ", build " + fp.build())});
  about.Print(ctx.out);
  if (e.measurements_size() == 0) {
    ctx.out << "\nno measurements recorded\n";
    return;
  }
  ctx.out << "\n";
  Table m({"#", "KERNEL", "PARAMS", "VALID", "MAX_ERR", "P20", "MEDIAN", "P80",
           "DISP", "SPREAD", "SAMPLES", "NOTE"});
  for (size_t c : {0, 4, 5, 6, 7, 8, 9, 10}) m.AlignRight(c);
  for (int i = 0; i < e.measurements_size(); ++i) {
    const v1::CandidateMeasurement& c = e.measurements(i);
    std::string note;
    if (c.chosen()) note = "chosen";
    if (c.is_default()) note += note.empty() ? "default" : ", default";
    if (!c.error().empty()) note += (note.empty() ? "" : "; ") + c.error();
    std::string valid = absl::AsciiStrToLower(
        absl::StripPrefix(v1::Validation_Name(c.validation()), "VALIDATION_"));
    m.AddRow({absl::StrCat(i), c.execution().kernel(),
              ShortParams(c.execution()), valid,
              absl::StrFormat("%.3g", c.max_abs_error()),
              ShortDuration(c.p20()), ShortDuration(c.median()),
              ShortDuration(c.p80()),
              c.samples() > 0 ? absl::StrFormat("%.1f%%", 100 * c.dispersion())
                              : "-",
              ShortDuration(c.spread()), absl::StrCat(c.samples()), note});
  }
  m.Print(ctx.out);
}

Terminal Terminal::Process() {
  return Terminal{&std::cin, isatty(STDIN_FILENO) == 1,
                  isatty(STDERR_FILENO) == 1};
}

absl::StatusOr<Target> ResolveTarget(const CommandLine& cl, const char* env) {
  const std::string endpoint = cl.Get("endpoint");
  if (static_cast<int>(!endpoint.empty()) + cl.Has("device") + cl.Has("gpu") >
      1) {
    return absl::InvalidArgumentError(
        "--endpoint, --device and --gpu each name a daemon: give one");
  }
  if (!endpoint.empty()) return Target{endpoint, "--endpoint", ""};
  if (cl.Has("gpu")) {
    // By UUID, in $GPUTUNE_SOCKET_DIR or /run/gputuned; NOT_FOUND names
    // the directory searched.
    ClientOptions by_uuid;
    by_uuid.gpu_uuid = cl.Get("gpu");
    if (by_uuid.gpu_uuid.empty()) {
      return absl::InvalidArgumentError(
          "--gpu needs a GPU UUID (--gpu=GPU-8f3c..., as nvidia-smi -L prints "
          "it)");
    }
    absl::StatusOr<DaemonTarget> found =
        FindDaemon(by_uuid, [](const char* name) -> const char* {
          // Only the socket directory: --gpu wins over $GPUTUNE_ENDPOINT.
          return absl::string_view(name) == "GPUTUNE_SOCKET_DIR"
                     ? std::getenv(name)
                     : nullptr;
        });
    if (!found.ok()) return found.status();
    return Target{found->endpoint, absl::StrCat("--gpu=", found->gpu_uuid),
                  found->gpu_uuid};
  }
  if (cl.Has("device")) {
    absl::StatusOr<int> device = IntFlag(cl, "device", 0);
    if (!device.ok()) return device.status();
    return Target{DefaultEndpoint(*device), absl::StrCat("--device=", *device),
                  ""};
  }
  if (env != nullptr && *env != '\0')
    return Target{env, "$GPUTUNE_ENDPOINT", ""};
  return Target{DefaultEndpoint(0), "the default (GPU 0)", ""};
}

namespace {

// "gputuned at unix:///run/gputuned/gpu1.sock (chosen by --device=1): device
// NVIDIA H200 GPU-..., 120 entries"; asks the daemon.
absl::StatusOr<std::string> DescribeDaemon(Context& ctx) {
  absl::StatusOr<v1::GetStatusResponse> s = ctx.client.GetStatus();
  if (!s.ok()) return s.status();
  const v1::Fingerprint& fp = s->fingerprint();
  return absl::StrCat(
      "gputuned at ", ctx.client.endpoint(), " (chosen by ",
      ctx.target.chosen_by, "): device ",
      fp.device_name().empty() ? s->backend() : fp.device_name(),
      s->device_uuid().empty() ? "" : " " + s->device_uuid(), ", ",
      s->entries(), s->entries() == 1 ? " entry" : " entries");
}

// Names the daemon a destructive command acts on, and for `delete --all`
// asks on a terminal (and wants --yes otherwise). Returns an exit code to
// stop with, or -1 to go on.
int BeforeDestructive(Context& ctx) {
  absl::StatusOr<std::string> daemon = DescribeDaemon(ctx);
  if (!daemon.ok()) return Fail(ctx, ctx.cl.command, daemon.status());
  ctx.err << "gputunectl: " << ctx.cl.command << " on " << *daemon << "\n";
  const bool delete_all =
      ctx.cl.command == "delete" && ctx.cl.Has("all") && ctx.cl.args.empty();
  if (!delete_all || ctx.cl.Has("yes")) return -1;
  if (ctx.terminal.in == nullptr || !ctx.terminal.in_is_terminal) {
    return UsageError(ctx,
                      "delete --all deletes every entry of that daemon: add "
                      "--yes to confirm (stdin is not a terminal, so "
                      "gputunectl cannot ask)");
  }
  ctx.err << "delete every entry? [y/N] " << std::flush;
  std::string answer;
  std::getline(*ctx.terminal.in, answer);
  answer = absl::AsciiStrToLower(absl::StripAsciiWhitespace(answer));
  if (answer != "y" && answer != "yes") {
    ctx.err << "nothing deleted\n";
    return kExitError;
  }
  return -1;
}

}  // namespace

int Main(const std::vector<std::string>& argv, std::ostream& out,
         std::ostream& err) {
  return Main(argv, out, err, Terminal::Process());
}

int Main(const std::vector<std::string>& argv, std::ostream& out,
         std::ostream& err, const Terminal& terminal) {
  absl::StatusOr<CommandLine> cl = ParseCommandLine(argv);
  if (!cl.ok()) {
    err << "gputunectl: " << cl.status().message() << "\n";
    return kExitUsage;
  }
  if (cl->version) {
    out << VersionLine("gputunectl") << "\n";
    return kExitOk;
  }
  if (cl->help) {
    const CommandSpec* command = FindCommand(cl->command);
    out << (command != nullptr ? CommandHelp(*command) : Usage());
    return kExitOk;
  }
  if (cl->command.empty()) {
    err << Usage();
    return kExitUsage;
  }
  auto command = Bodies().find(cl->command);
  if (command == Bodies().end()) {  // in the table but not implemented
    err << "gputunectl: command '" << cl->command << "' is not available\n";
    return kExitUsage;
  }
  ClientOptions options;
  absl::StatusOr<Target> target =
      ResolveTarget(*cl, std::getenv("GPUTUNE_ENDPOINT"));
  absl::StatusOr<absl::Duration> timeout =
      DurationFlag(*cl, "timeout", absl::Seconds(30));
  absl::StatusOr<absl::Duration> ttl =
      DurationFlag(*cl, "ttl", absl::Seconds(30));
  for (const absl::Status& s :
       {target.status(), timeout.status(), ttl.status()}) {
    if (!s.ok()) {
      err << "gputunectl: " << s.message() << "\n";
      // --gpu naming a GPU no daemon is linked for.
      return s.code() == absl::StatusCode::kNotFound ? kExitNotFound
                                                     : kExitUsage;
    }
  }
  // Resolved here, so the library never falls back to the environment.
  options.endpoint = target->endpoint;
  options.gpu_uuid = target->gpu_uuid;  // TuneDense says which GPU is meant
  options.deadline = *timeout;
  options.lookup_deadline = *timeout;
  options.tune_deadline = *timeout;
  options.memo_capacity = 0;  // a CLI asks the daemon every time
  options.lease_ttl = *ttl;
  options.holder = cl->Get("holder");
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) {
    err << "gputunectl: " << client.status().message() << "\n";
    return kExitUsage;
  }
  Context ctx{*cl,      **client, out,     err, cl->Has("json"),
              *timeout, *target,  terminal};
  if (FindCommand(cl->command)->names_daemon) {
    if (const int stop = BeforeDestructive(ctx); stop >= 0) return stop;
  }
  return command->second(ctx);
}

}  // namespace gputune::ctl
