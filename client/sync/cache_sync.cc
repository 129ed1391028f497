#include "client/sync/cache_sync.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/gputunectl/tool_files.h"
#include "client/gputunectl/tool_formats.h"
#include "proto/key_format.h"

namespace gputune::sync {

CacheSync::CacheSync(Client& client, std::string format, std::string path,
                     std::string match_path, std::ostream& log)
    : client_(client),
      format_(std::move(format)),
      path_(std::move(path)),
      seen_path_(path_ + ".gputune-sync.seen"),
      match_path_(std::move(match_path)),
      log_(log) {}

std::string CacheSync::Identity(const v1::Entry& entry) const {
  absl::StatusOr<std::string> row = ctl::WriteToolFile(format_, {entry});
  return absl::StrCat(KeyText(entry.key()), "\n", row.ok() ? *row : "");
}

void CacheSync::LogOnce(const std::string& topic, const std::string& line) {
  std::string& last = last_logged_[topic];
  if (last == line) return;
  last = line;
  if (!line.empty()) log_ << "gputune-sync: " << line << std::endl;
}

void CacheSync::Record(const std::string& text) {
  if (absl::Status s = ctl::WriteFileAtomically(seen_path_, text); !s.ok()) {
    LogOnce("record", absl::StrCat("cannot record what was imported in ",
                                   seen_path_, ": ", s.message(),
                                   " (its rows will be imported again)"));
    return;
  }
  LogOnce("record", "");
}

size_t CacheSync::ImportNew() {
  absl::StatusOr<std::string> text = ctl::ReadWholeFile(path_);
  if (absl::IsNotFound(text.status())) return 0;  // the job wrote nothing
  if (!text.ok()) {
    LogOnce("read", std::string(text.status().message()));
    return 0;
  }
  absl::StatusOr<std::string> seen_text = ctl::ReadWholeFile(seen_path_);
  if (seen_text.ok() && *seen_text == *text) return 0;  // nothing changed
  absl::StatusOr<ctl::ToolFile> file = ctl::ReadToolFile(format_, *text, path_);
  if (!file.ok()) {
    // The tool may be rewriting it right now (not every tool writes
    // atomically): the next call reads it again.
    LogOnce("read", absl::StrCat(file.status().message(),
                                 ": not imported (tried again at the next "
                                 "interval)"));
    return 0;
  }
  LogOnce("read", "");
  std::string bad;
  for (const std::string& row : file->bad_rows) {
    absl::StrAppend(&bad, bad.empty() ? "" : "\ngputune-sync: ", row,
                    " (skipped)");
  }
  LogOnce("bad", bad);
  absl::flat_hash_set<std::string> known;
  if (seen_text.ok()) {
    absl::StatusOr<ctl::ToolFile> seen =
        ctl::ReadToolFile(format_, *seen_text, seen_path_);
    if (seen.ok()) {
      for (const v1::Entry& e : seen->entries) known.insert(Identity(e));
    }
  }
  std::vector<v1::Entry> fresh;
  for (v1::Entry& e : file->entries) {
    if (!known.contains(Identity(e))) fresh.push_back(std::move(e));
  }
  if (!fresh.empty()) {
    absl::Status stamped = ctl::AdoptDaemonFingerprint(client_, fresh);
    absl::StatusOr<size_t> imported = stamped.ok()
                                          ? ctl::ImportInChunks(client_, fresh)
                                          : absl::StatusOr<size_t>(stamped);
    if (!imported.ok()) {
      LogOnce("import",
              absl::StrCat("importing ", fresh.size(), " new entries from ",
                           path_, " into gputuned at ", client_.endpoint(),
                           " failed (tried again at the next interval): ",
                           imported.status().message()));
      return 0;
    }
    LogOnce("import", "");
    log_ << "gputune-sync: imported " << *imported
         << (*imported == 1 ? " new entry" : " new entries") << " from "
         << path_ << std::endl;
  }
  Record(*text);
  return fresh.size();
}

void CacheSync::WriteBeforeJob() {
  // What an earlier job left unimported (it was killed between intervals).
  ImportNew();
  // The version to write: the file's own, so that it never receives another
  // version's results; else --match's; else the only one there is.
  std::string want;
  std::string why;
  absl::StatusOr<std::string> text = ctl::ReadWholeFile(path_);
  if (text.ok()) {
    absl::StatusOr<ctl::ToolFile> file =
        ctl::ReadToolFile(format_, *text, path_);
    if (file.ok()) {
      want = file->candidate_set;
      why = absl::StrCat(" (the version of ", path_, ")");
    }
  }
  if (want.empty() && !match_path_.empty()) {
    absl::StatusOr<std::string> match = ctl::ReadWholeFile(match_path_);
    absl::StatusOr<ctl::ToolFile> like =
        match.ok() ? ctl::ReadToolFile(format_, *match, match_path_)
                   : absl::StatusOr<ctl::ToolFile>(match.status());
    if (!like.ok()) {
      log_ << "gputune-sync: --match: " << like.status().message() << ": "
           << path_ << " is left as it is" << std::endl;
      return;
    }
    want = like->candidate_set;
    why = absl::StrCat(" (the version of --match=", match_path_, ")");
  }
  absl::StatusOr<ctl::ToolEntries> held =
      ctl::ListToolEntries(client_, format_);
  absl::StatusOr<std::vector<v1::Entry>> entries =
      held.ok() ? ctl::PickCandidateSet(*held, want)
                : absl::StatusOr<std::vector<v1::Entry>>(held.status());
  if (!entries.ok()) {
    log_ << "gputune-sync: gputuned at " << client_.endpoint() << ": "
         << (absl::IsNotFound(entries.status())
                 ? absl::StrCat("no ", format_, " entries",
                                want.empty() ? "" : " of " + want, why)
                 : std::string(entries.status().message()))
         << ": " << path_ << " is left as it is" << std::endl;
    return;
  }
  absl::StatusOr<std::string> out = ctl::WriteToolFile(format_, *entries);
  if (!out.ok()) {
    log_ << "gputune-sync: " << out.status().message() << ": " << path_
         << " is left as it is" << std::endl;
    return;
  }
  if (!text.ok() || *text != *out) {
    if (absl::Status s = ctl::WriteFileAtomically(path_, *out); !s.ok()) {
      log_ << "gputune-sync: " << s.message() << std::endl;
      return;
    }
  }
  Record(*out);
  log_ << "gputune-sync: wrote " << entries->size()
       << (entries->size() == 1 ? " entry" : " entries") << " ("
       << entries->front().key().candidate_set() << ") from gputuned at "
       << client_.endpoint() << " to " << path_ << std::endl;
}

}  // namespace gputune::sync
