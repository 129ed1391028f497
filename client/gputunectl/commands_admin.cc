// status, backup, log-level.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/gputunectl/commands.h"
#include "client/gputunectl/entry_io.h"
#include "client/gputunectl/table.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"

namespace gputune::ctl {

int RunStatus(Context& ctx) {
  if (!ctx.cl.args.empty()) return UsageError(ctx, "status takes no arguments");
  absl::StatusOr<v1::GetStatusResponse> s = ctx.client.GetStatus();
  if (!s.ok()) return Fail(ctx, "status", s.status());
  if (ctx.json) {
    ctx.out << ToJson(*s, /*pretty=*/true) << "\n";
    return kExitOk;
  }
  const absl::Duration up =
      absl::Trunc(absl::Now() - FromProto(s->started_at()), absl::Seconds(1));
  const v1::Fingerprint& fp = s->fingerprint();
  Table t({"FIELD", "VALUE"});
  t.HideHeader();
  t.AddRow({"gputuned", absl::StrCat(s->version(), " on ", s->listen_address(),
                                     ", up ", absl::FormatDuration(up))});
  t.AddRow({"backend",
            absl::StrCat(s->backend(), s->backend_ready() ? ", ready" : "",
                         s->backend_error().empty()
                             ? ""
                             : absl::StrCat(": ", s->backend_error()))});
  t.AddRow({"device", absl::StrFormat("%s (%u processors, %.1f GiB)",
                                      fp.device_name(), fp.processor_count(),
                                      static_cast<double>(fp.memory_bytes()) /
                                          (1ull << 30))});
  if (!s->device_uuid().empty()) {
    t.AddRow({"gpu", absl::StrCat(s->device_uuid(),
                                  s->pci_bus_id().empty() ? "" : " at PCI ",
                                  s->pci_bus_id())});
  }
  t.AddRow(
      {"database", absl::StrCat(s->database_path(), ": ", s->entries(),
                                " entries, ", s->stale_entries(), " stale")});
  if (!s->database_quarantined_to().empty()) {
    t.AddRow({"QUARANTINED", absl::StrCat("a corrupt database was moved to ",
                                          s->database_quarantined_to(),
                                          ": inspect or delete it")});
  }
  if (s->quarantined_entries() > 0) {
    std::string keys;
    for (const std::string& id : s->quarantined_key_ids()) {
      absl::StrAppend(&keys, keys.empty() ? "" : ", ", id);
    }
    t.AddRow({"DAMAGED",
              absl::StrCat(s->quarantined_entries(),
                           " entries had damaged bytes and were moved to the "
                           "database's quarantine table (MISS now, "
                           "re-tunable)",
                           keys.empty() ? "" : absl::StrCat(": ", keys))});
  }
  t.AddRow({"queue", absl::StrCat(s->queue_depth(), " of ", s->queue_capacity(),
                                  " waiting; ", s->jobs_completed(), " done, ",
                                  s->jobs_failed(), " failed since start")});
  if (s->has_running_job()) {
    const v1::JobInfo& job = s->running_job();
    t.AddRow(
        {"tuning", absl::StrCat(KeyText(job.key()), ": ", job.candidates_done(),
                                "/", job.candidates_total(), " candidates, ",
                                job.waiters(), " waiting")});
  }
  t.AddRow({"backoff", absl::StrCat(s->backoff_keys(), " keys")});
  t.AddRow({"claims", absl::StrCat(s->claims_size(), " live")});
  if (s->has_fleet()) {
    const v1::FleetStatus& f = s->fleet();
    t.AddRow(
        {"fleet",
         absl::StrCat(f.connected() ? "connected to "
                                    : "NOT CONNECTED (serving locally) to ",
                      f.target(),
                      f.error().empty() ? "" : absl::StrCat(": ", f.error()))});
    t.AddRow(
        {"fleet feed",
         absl::StrCat(
             "at ", f.feed_seq(), " of ", f.fleet_seq(), ", lag ",
             absl::FormatDuration(FromProto(f.feed_lag())), "; ", f.adopted(),
             " adopted",
             f.feed_unparseable() + f.feed_mismatched() + f.feed_oversized() ==
                     0
                 ? ""
                 : absl::StrCat("; skipped ", f.feed_unparseable(),
                                " unparseable, ", f.feed_mismatched(),
                                " not matching their row, ", f.feed_oversized(),
                                " oversized"))});
    t.AddRow(
        {"fleet outbox",
         absl::StrCat(
             f.outbox_depth(), " waiting",
             f.outbox_overflow() == 0 ? ""
                                      : absl::StrCat(", ", f.outbox_overflow(),
                                                     " kept local only (full)"),
             "; ", f.published(), " published, ", f.refused(), " refused",
             f.publish_errors() == 0 && f.outbox_dropped() == 0
                 ? ""
                 : absl::StrCat("; ", f.publish_errors(), " publish errors, ",
                                f.outbox_dropped(),
                                " dropped after repeated "
                                "refusals (kept locally)"))});
    t.AddRow({"fleet claims",
              absl::StrCat(f.claims_held(), " held, ", f.claims_waited(),
                           " waited on, ", f.local_only_claims(),
                           " taken locally while unreachable")});
  }
  t.Print(ctx.out);
  if (s->claims_size() > 0) {
    ctx.out << "\n";
    Table claims({"CLAIM", "KEY", "HOLDER", "LEASE_LEFT"});
    claims.AlignRight(0);
    claims.AlignRight(3);
    for (int i = 0; i < s->claims_size(); ++i) {
      const v1::ClaimInfo& c = s->claims(i);
      const absl::Duration left = FromProto(c.lease_deadline()) - absl::Now();
      claims.AddRow({absl::StrCat(c.claim_id()),
                     i < s->claim_keys_size() ? KeyText(s->claim_keys(i)) : "?",
                     c.holder(),
                     absl::FormatDuration(
                         absl::Trunc(std::max(left, absl::ZeroDuration()),
                                     absl::Milliseconds(100)))});
    }
    claims.Print(ctx.out);
  }
  return kExitOk;
}

int RunBackup(Context& ctx) {
  if (ctx.cl.args.size() != 1) return UsageError(ctx, "backup takes one PATH");
  // The daemon resolves paths itself, in its own working directory: a
  // relative path would not mean what the operator typed.
  const std::filesystem::path given(ctx.cl.args[0]);
  if (!given.is_absolute()) {
    return UsageError(
        ctx, absl::StrCat("backup PATH must be absolute (the daemon writes "
                          "it, not gputunectl): e.g. gputunectl backup ",
                          std::filesystem::absolute(given).string()));
  }
  const std::string path = given.lexically_normal().string();
  // On this machine's socket the daemon shares the filesystem: say plainly
  // when the directory is missing.
  std::error_code ec;
  if (absl::StartsWith(ctx.client.endpoint(), "unix:") &&
      !std::filesystem::is_directory(given.parent_path(), ec)) {
    return Fail(ctx, absl::StrCat("backup to ", path),
                absl::NotFoundError(absl::StrCat(
                    "the directory ", given.parent_path().string(),
                    " does not exist: create it (writable by the daemon's "
                    "user, gputune) first")));
  }
  absl::StatusOr<uint64_t> bytes = ctx.client.Backup(path);
  if (!bytes.ok()) {
    return Fail(
        ctx, absl::StrCat("backup to ", path),
        bytes.status().code() == absl::StatusCode::kAlreadyExists
            ? absl::AlreadyExistsError(absl::StrCat(
                  bytes.status().message(), " (choose a new file name)"))
            : bytes.status());
  }
  if (ctx.json) {
    v1::BackupResponse response;
    response.set_bytes(*bytes);
    ctx.out << ToJson(response, /*pretty=*/false) << "\n";
  } else {
    ctx.out << "backed up the database to " << path << " (" << *bytes
            << " bytes)\n";
  }
  return kExitOk;
}

int RunLogLevel(Context& ctx) {
  if (ctx.cl.args.size() > 1 ||
      (ctx.cl.args.empty() && !ctx.cl.Has("autotune-log"))) {
    return UsageError(ctx,
                      "log-level takes LEVEL (trace, debug, info, warn, "
                      "error, critical, off) and/or --autotune-log");
  }
  v1::SetLogLevelRequest request;
  if (!ctx.cl.args.empty()) request.set_level(ctx.cl.args[0]);
  request.set_autotune_log(ctx.cl.Get("autotune-log"));
  absl::StatusOr<v1::SetLogLevelResponse> r = ctx.client.SetLogLevel(request);
  if (!r.ok()) return Fail(ctx, "log-level", r.status());
  if (ctx.json) {
    ctx.out << ToJson(*r, /*pretty=*/false) << "\n";
  } else {
    ctx.out << "log level " << r->level() << ", autotune log "
            << (r->autotune_log().empty() ? "-" : r->autotune_log()) << "\n";
  }
  return kExitOk;
}

}  // namespace gputune::ctl
