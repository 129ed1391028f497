// list, get, delete, export, import.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/gputunectl/commands.h"
#include "client/gputunectl/entry_io.h"
#include "client/gputunectl/table.h"
#include "client/gputunectl/tool_files.h"
#include "client/gputunectl/tool_formats.h"
#include "daemon/fleet/fleet_store.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"

namespace gputune::ctl {
namespace {

// Calls fn for each page of entries matching the command line's filter;
// stops at the first page when `all` is false. Returns the next page token
// (empty after the last page).
absl::StatusOr<std::string> ForEachPage(
    Context& ctx, bool all, bool with_measurements, int page_size,
    const std::function<void(v1::ListEntriesResponse&)>& fn) {
  absl::StatusOr<v1::EntryFilter> filter = FilterFromFlags(ctx.cl);
  if (!filter.ok()) return filter.status();
  v1::ListEntriesRequest request;
  *request.mutable_filter() = *filter;
  request.set_page_size(page_size);
  request.set_page_token(ctx.cl.Get("page-token"));
  request.set_with_measurements(with_measurements);
  return ForEachEntryPage(ctx.client, std::move(request), all, fn);
}

// Imports `entries` (validated already) and returns how many went in; on
// failure the message (and how far it got) was printed.
absl::StatusOr<size_t> ImportAll(Context& ctx,
                                 const std::vector<v1::Entry>& entries) {
  absl::StatusOr<size_t> imported = ImportInChunks(ctx.client, entries);
  if (!imported.ok()) {
    ctx.err << "gputunectl: import: " << imported.status().message() << "\n";
  }
  return imported;
}

int PrintImported(Context& ctx, size_t imported, const std::string& path) {
  if (ctx.json) {
    v1::ImportEntriesResponse response;
    response.set_imported(static_cast<uint32_t>(imported));
    ctx.out << ToJson(response, /*pretty=*/false) << "\n";
  } else {
    ctx.out << "imported " << imported
            << (imported == 1 ? " entry" : " entries") << " from " << path
            << "\n";
  }
  return kExitOk;
}

// export --format: the entries of the format's op and one candidate set
// (that of --match's file, or the only one there is), in the tool's format.
int RunExportTool(Context& ctx, const std::string& format) {
  const std::string& path = ctx.cl.args[0];
  std::string want;  // candidate set; empty: the only one
  if (ctx.cl.Has("match")) {
    absl::StatusOr<std::string> text = ReadWholeFile(ctx.cl.Get("match"));
    if (!text.ok()) return Fail(ctx, "export", text.status());
    absl::StatusOr<ToolFile> like =
        ReadToolFile(format, *text, ctx.cl.Get("match"));
    if (!like.ok()) return Fail(ctx, "export --match", like.status());
    want = like->candidate_set;
  }
  absl::StatusOr<ToolEntries> held = ListToolEntries(ctx.client, format);
  if (!held.ok()) return Fail(ctx, "export", held.status());
  absl::StatusOr<std::vector<v1::Entry>> entries =
      PickCandidateSet(*held, want);
  if (absl::IsFailedPrecondition(entries.status())) {
    return UsageError(ctx, entries.status().message());
  }
  if (absl::IsNotFound(entries.status())) {
    ctx.err << "gputunectl: export: no " << format << " entries"
            << (held->empty() ? "" : " for the versions of --match's file")
            << ": nothing was written\n";
    return kExitNotFound;
  }
  if (!entries.ok()) return Fail(ctx, "export", entries.status());
  absl::StatusOr<std::string> text = WriteToolFile(format, *entries);
  if (!text.ok()) return Fail(ctx, "export", text.status());
  if (path == "-") {
    ctx.out << *text;
    ctx.out.flush();
  } else if (absl::Status s = WriteFileAtomically(path, *text); !s.ok()) {
    return Fail(ctx, "export", s);
  }
  const size_t count = entries->size();
  ctx.err << "exported " << count << (count == 1 ? " entry" : " entries")
          << " (" << entries->front().key().candidate_set() << ")"
          << (path == "-" ? "" : " to " + path) << "\n";
  return kExitOk;
}

// import --format: every row of the tool's file, in one all-or-nothing
// import; rows that do not parse are listed, and refuse the import unless
// --skip-bad is given.
int RunImportTool(Context& ctx, const std::string& format) {
  const std::string& path = ctx.cl.args[0];
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return Fail(ctx, "import", text.status());
  absl::StatusOr<ToolFile> file =
      ReadToolFile(format, *text, path == "-" ? "<stdin>" : path);
  if (!file.ok()) {
    ctx.err << "gputunectl: import: " << file.status().message()
            << "\nnothing was imported\n";
    return ExitCodeFor(file.status());
  }
  for (const std::string& bad : file->bad_rows) {
    ctx.err << "gputunectl: import: " << bad << "\n";
  }
  if (!file->bad_rows.empty() && !ctx.cl.Has("skip-bad")) {
    ctx.err << "gputunectl: import: " << file->bad_rows.size()
            << " bad row(s): nothing was imported (--skip-bad imports the "
               "others)\n";
    return kExitInvalid;
  }
  if (file->entries.empty()) {
    ctx.err << "gputunectl: import: no rows to import: nothing was imported\n";
    return kExitInvalid;
  }
  if (absl::Status s = AdoptDaemonFingerprint(ctx.client, file->entries);
      !s.ok()) {
    return Fail(ctx, "import", s);
  }
  absl::StatusOr<size_t> imported = ImportAll(ctx, file->entries);
  if (!imported.ok()) return ExitCodeFor(imported.status());
  if (!file->bad_rows.empty()) {
    ctx.err << "gputunectl: import: skipped " << file->bad_rows.size()
            << " bad row(s)\n";
  }
  return PrintImported(ctx, *imported, path);
}

}  // namespace

int RunList(Context& ctx) {
  absl::StatusOr<int> limit = IntFlag(ctx.cl, "limit", 100);
  if (!limit.ok()) return UsageError(ctx, limit.status().message());
  v1::ListEntriesResponse all;
  Table table({"KEY", "STATE", "KERNEL", "CHOSEN", "DEFAULT", "SPEEDUP",
               "SOURCE", "MEASURED_AT(UTC)"});
  for (size_t c : {3, 4, 5}) table.AlignRight(c);
  absl::StatusOr<std::string> next = ForEachPage(
      ctx, ctx.cl.Has("all"), ctx.cl.Has("with-measurements"), *limit,
      [&](v1::ListEntriesResponse& page) {
        for (int i = 0; i < page.entries_size(); ++i) {
          const v1::Entry& e = page.entries(i);
          table.AddRow(
              {KeyText(e.key()), std::string(KeyStateName(page.states(i))),
               e.execution().kernel(), ShortDuration(e.chosen_time()),
               ShortDuration(e.default_time()), ShortSpeedup(e.speedup()),
               SourceName(e.source()), ShortTime(e.measured_at())});
        }
        all.mutable_entries()->MergeFrom(page.entries());
        all.mutable_states()->MergeFrom(page.states());
      });
  if (!next.ok()) {
    if (next.status().code() == absl::StatusCode::kInvalidArgument &&
        !ctx.cl.Has("page-token")) {
      return UsageError(ctx, next.status().message());
    }
    return Fail(ctx, "list", next.status());
  }
  all.set_next_page_token(*next);
  if (ctx.json) {
    ctx.out << ToJson(all, /*pretty=*/true) << "\n";
    return kExitOk;
  }
  if (table.rows() == 0) {
    ctx.err << "no entries match\n";
    return kExitOk;
  }
  table.Print(ctx.out);
  if (!next->empty()) {
    ctx.err << "more entries: gputunectl list --page-token=" << *next
            << " (or --all)\n";
  }
  return kExitOk;
}

int RunGet(Context& ctx) {
  if (ctx.cl.args.size() != 1) return UsageError(ctx, "get takes one KEY");
  absl::StatusOr<v1::Key> key = ParseKeyText(ctx.cl.args[0]);
  if (!key.ok()) return UsageError(ctx, key.status().message());
  absl::StatusOr<v1::GetEntryResponse> got = ctx.client.GetEntry(*key);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) {
      if (const int pending = ExplainPending(ctx, *key); pending >= 0) {
        return pending;
      }
      return Fail(ctx, ctx.cl.args[0],
                  absl::NotFoundError(
                      "no entry (tune it with gputunectl tune, or list what "
                      "there is with gputunectl list)"));
    }
    return Fail(ctx, "get", got.status());
  }
  PrintEntry(ctx, *got);
  return kExitOk;
}

namespace {

// The fleet side of `delete --fleet`: marks the keys (all of the daemon's
// fingerprint for --all) deleted in the fleet database, connecting as the
// operator's own PostgreSQL role.
int DeleteFromFleet(Context& ctx, const v1::DeleteEntriesRequest& request,
                    uint64_t* deleted) {
  absl::StatusOr<v1::GetStatusResponse> status = ctx.client.GetStatus();
  if (!status.ok()) return Fail(ctx, "delete --fleet", status.status());
  if (status->fingerprint().device_name() == "unavailable") {
    return Fail(ctx, "delete --fleet",
                absl::FailedPreconditionError(
                    "the daemon's device is unknown, so is its fleet "
                    "fingerprint: nothing was deleted"));
  }
  std::vector<std::string> key_ids;
  for (const v1::Key& key : request.keys()) key_ids.push_back(KeyId(key));
  absl::StatusOr<std::unique_ptr<fleet::FleetConnection>> conn =
      fleet::FleetConnection::Connect(ctx.cl.Get("fleet"), absl::Seconds(30));
  if (!conn.ok()) return Fail(ctx, "delete --fleet", conn.status());
  if (absl::StatusOr<std::string> schema = (*conn)->PrepareSchema();
      !schema.ok()) {
    return Fail(ctx, "delete --fleet", schema.status());
  }
  absl::StatusOr<uint64_t> n =
      (*conn)->Delete(FingerprintDigest(status->fingerprint()), key_ids);
  if (!n.ok()) return Fail(ctx, "delete --fleet", n.status());
  *deleted = *n;
  if (!ctx.json) {
    ctx.out << "deleted " << *n << (*n == 1 ? " entry" : " entries")
            << " from the fleet\n";
  }
  return kExitOk;
}

}  // namespace

int RunDelete(Context& ctx) {
  v1::DeleteEntriesRequest request;
  for (const std::string& text : ctx.cl.args) {
    absl::StatusOr<v1::Key> key = ParseKeyText(text);
    if (!key.ok()) return UsageError(ctx, key.status().message());
    *request.add_keys() = *key;
  }
  absl::StatusOr<v1::EntryFilter> filter = FilterFromFlags(ctx.cl);
  if (!filter.ok()) return UsageError(ctx, filter.status().message());
  const bool has_filter = filter->ByteSizeLong() > 0;
  if (request.keys_size() > 0 && (has_filter || ctx.cl.Has("all"))) {
    return UsageError(ctx,
                      "delete takes KEYs or a filter (or --all), not both");
  }
  if (request.keys_size() == 0 && !has_filter && !ctx.cl.Has("all")) {
    return UsageError(ctx,
                      "delete needs KEYs, a filter (--op, --phase, --role, "
                      "--state) or --all");
  }
  if (request.keys_size() == 0) {
    *request.mutable_filter() = *filter;
    request.set_all(!has_filter);
  }
  if (ctx.cl.Has("fleet")) {
    if (has_filter) {
      return UsageError(ctx,
                        "delete --fleet takes KEYs or --all, not a filter");
    }
  }
  absl::StatusOr<uint32_t> deleted = ctx.client.DeleteEntries(request);
  if (!deleted.ok()) return Fail(ctx, "delete", deleted.status());
  if (ctx.json) {
    v1::DeleteEntriesResponse response;
    response.set_deleted(*deleted);
    ctx.out << ToJson(response, /*pretty=*/false) << "\n";
  } else {
    ctx.out << "deleted " << *deleted << (*deleted == 1 ? " entry" : " entries")
            << "\n";
  }
  // Then the fleet's (after the local delete: the fleet's deletion reaches
  // this daemon through the feed too).
  uint64_t fleet_deleted = 0;
  if (ctx.cl.Has("fleet")) {
    if (int code = DeleteFromFleet(ctx, request, &fleet_deleted);
        code != kExitOk) {
      return code;
    }
  }
  // Deleting named keys of which none existed is worth a non-zero exit.
  if (request.keys_size() > 0 && *deleted == 0 && fleet_deleted == 0) {
    ctx.err << "gputunectl: delete: no entry for the given key(s)\n";
    return kExitNotFound;
  }
  return kExitOk;
}

int RunExport(Context& ctx) {
  if (ctx.cl.args.size() != 1) {
    return UsageError(ctx, "export takes one FILE ('-' for stdout)");
  }
  if (ctx.cl.Has("format")) {
    if (ctx.cl.Has("op") || ctx.cl.Has("phase") || ctx.cl.Has("role") ||
        ctx.cl.Has("state")) {
      return UsageError(ctx,
                        "export --format exports the format's own op: it "
                        "takes no filter");
    }
    return RunExportTool(ctx, ctx.cl.Get("format"));
  }
  if (ctx.cl.Has("match")) {
    return UsageError(ctx, "--match needs --format");
  }
  const std::string& path = ctx.cl.args[0];
  const bool to_stdout = path == "-";
  // Written next to the target and renamed: a failed export leaves no
  // half-written file behind.
  const std::string tmp = path + ".partial";
  std::ofstream file;
  if (!to_stdout) {
    file.open(tmp, std::ios::trunc);
    if (!file) {
      return Fail(ctx, "export",
                  absl::PermissionDeniedError(
                      absl::StrCat("cannot write ", tmp,
                                   ": check the directory exists and is "
                                   "writable")));
    }
  }
  std::ostream& out = to_stdout ? ctx.out : file;
  size_t count = 0;
  size_t damaged = 0;
  absl::Status write_error;
  absl::StatusOr<std::string> next =
      ForEachPage(ctx, /*all=*/true, /*with_measurements=*/true,
                  /*page_size=*/1000, [&](v1::ListEntriesResponse& page) {
                    damaged += page.skipped_damaged();
                    for (const v1::Entry& e : page.entries()) {
                      if (!write_error.ok()) return;
                      absl::StatusOr<std::string> line = EntryLine(e);
                      if (!line.ok()) {
                        write_error = line.status();
                        return;
                      }
                      out << *line << "\n";
                      ++count;
                    }
                  });
  if (next.ok() && !write_error.ok()) next = write_error;
  out.flush();
  if (!to_stdout) file.close();
  auto fail = [&](const absl::Status& s) {
    if (!to_stdout) std::remove(tmp.c_str());
    return Fail(ctx, "export", s);
  };
  if (!next.ok()) return fail(next.status());
  if (!out || (!to_stdout && !file)) {
    return fail(absl::DataLossError(
        absl::StrCat("writing ", to_stdout ? std::string("stdout") : tmp,
                     " failed (disk full?): nothing was exported")));
  }
  if (!to_stdout) {
    // Complete and readable, or not at all: read the file back as import
    // would, then make it durable before it takes the name.
    std::ifstream back(tmp);
    absl::StatusOr<std::vector<v1::Entry>> read = ReadEntryLines(back, tmp);
    if (!read.ok()) {
      return fail(absl::DataLossError(absl::StrCat(
          "the written file does not read back: ", read.status().message())));
    }
    if (read->size() != count) {
      return fail(absl::DataLossError(absl::StrCat("the written file holds ",
                                                   read->size(), " entries, ",
                                                   count, " were written")));
    }
    const int fd = open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    const bool synced = fd >= 0 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!synced) {
      return fail(
          absl::DataLossError(absl::StrCat("cannot sync ", tmp, " to disk")));
    }
  }
  if (!to_stdout && std::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail(absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", tmp, " to ", path)));
  }
  ctx.err << "exported " << count << (count == 1 ? " entry" : " entries")
          << (to_stdout ? "" : " to " + path) << "\n";
  if (damaged > 0) {
    ctx.err << "gputunectl: export: skipped " << damaged
            << " damaged entries: the daemon moved them to quarantine "
               "(gputunectl status shows them; they can be tuned again)\n";
  }
  return kExitOk;
}

int RunImport(Context& ctx) {
  if (ctx.cl.args.size() != 1) {
    return UsageError(ctx, "import takes one FILE ('-' for stdin)");
  }
  if (ctx.cl.Has("format")) return RunImportTool(ctx, ctx.cl.Get("format"));
  if (ctx.cl.Has("skip-bad")) {
    return UsageError(ctx, "--skip-bad needs --format");
  }
  const std::string& path = ctx.cl.args[0];
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) {
      return Fail(ctx, "import",
                  absl::NotFoundError(absl::StrCat("cannot read ", path)));
    }
  }
  absl::StatusOr<std::vector<v1::Entry>> entries = ReadEntryLines(
      path == "-" ? std::cin : file, path == "-" ? "<stdin>" : path);
  if (!entries.ok()) {
    ctx.err << "gputunectl: import: " << entries.status().message()
            << "\nnothing was imported\n";
    return ExitCodeFor(entries.status());
  }
  absl::StatusOr<size_t> imported = ImportAll(ctx, *entries);
  if (!imported.ok()) return ExitCodeFor(imported.status());
  return PrintImported(ctx, *imported, path);
}

}  // namespace gputune::ctl
