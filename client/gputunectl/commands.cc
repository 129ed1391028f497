#include "client/gputunectl/commands.h"

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/gputunectl/entry_io.h"
#include "client/gputunectl/table.h"
#include "proto/key_format.h"

namespace gputune::ctl {
namespace {

using CommandFn = int (*)(Context&);

const std::map<std::string, CommandFn>& Commands() {
  static const auto* commands = new std::map<std::string, CommandFn>{
      {"status", RunStatus}, {"list", RunList},          {"get", RunGet},
      {"delete", RunDelete}, {"export", RunExport},      {"import", RunImport},
      {"claim", RunClaim},   {"abandon", RunAbandon},    {"tune", RunTune},
      {"backup", RunBackup}, {"log-level", RunLogLevel},
  };
  return *commands;
}

}  // namespace

int Fail(Context& ctx, absl::string_view doing, const absl::Status& status) {
  ctx.err << "gputunectl: " << doing << ": " << status.message() << "\n";
  return ExitCodeFor(status);
}

int UsageError(Context& ctx, absl::string_view message) {
  ctx.err << "gputunectl: " << message
          << "\n(gputunectl --help lists commands and flags)\n";
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
       absl::StrCat(KeyStateName(got.state()),
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
  about.AddRow({"source", SourceName(e.source())});
  if (e.has_fleet()) {
    about.AddRow(
        {"from fleet",
         absl::StrCat("published by ", e.fleet().host(), " ", e.fleet().gpu(),
                      " (", SourceName(e.fleet().published_source()),
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
  Table m({"#", "KERNEL", "PARAMS", "VALID", "MAX_ERR", "MEDIAN", "SPREAD",
           "SAMPLES", "NOTE"});
  for (size_t c : {0, 4, 5, 6, 7}) m.AlignRight(c);
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
              ShortDuration(c.median()), ShortDuration(c.spread()),
              absl::StrCat(c.samples()), note});
  }
  m.Print(ctx.out);
}

int Main(const std::vector<std::string>& argv, std::ostream& out,
         std::ostream& err) {
  absl::StatusOr<CommandLine> cl = ParseCommandLine(argv);
  if (!cl.ok()) {
    err << "gputunectl: " << cl.status().message() << "\n";
    return kExitUsage;
  }
  if (cl->Has("help") || cl->command.empty() || cl->command == "help") {
    (cl->command.empty() && !cl->Has("help") ? err : out) << Usage();
    return cl->command.empty() && !cl->Has("help") ? kExitUsage : kExitOk;
  }
  auto command = Commands().find(cl->command);
  if (command == Commands().end()) {
    err << "gputunectl: unknown command '" << cl->command
        << "' (gputunectl --help lists them)\n";
    return kExitUsage;
  }
  ClientOptions options;
  options.endpoint = cl->Get("endpoint");
  absl::StatusOr<int> device = IntFlag(*cl, "device", 0);
  absl::StatusOr<absl::Duration> timeout =
      DurationFlag(*cl, "timeout", absl::Seconds(30));
  for (const absl::Status& s : {device.status(), timeout.status()}) {
    if (!s.ok()) {
      err << "gputunectl: " << s.message() << "\n";
      return kExitUsage;
    }
  }
  options.device = *device;
  options.deadline = *timeout;
  options.lookup_deadline = *timeout;
  options.tune_deadline = *timeout;
  options.memo_capacity = 0;  // a CLI asks the daemon every time
  absl::StatusOr<absl::Duration> ttl =
      DurationFlag(*cl, "ttl", absl::Seconds(30));
  if (!ttl.ok()) {
    err << "gputunectl: " << ttl.status().message() << "\n";
    return kExitUsage;
  }
  options.lease_ttl = *ttl;
  options.holder = cl->Get("holder");
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) {
    err << "gputunectl: " << client.status().message() << "\n";
    return kExitUsage;
  }
  Context ctx{*cl, **client, out, err, cl->Has("json"), *timeout};
  return command->second(ctx);
}

}  // namespace gputune::ctl
