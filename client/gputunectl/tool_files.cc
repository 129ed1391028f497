#include "client/gputunectl/tool_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gputune::ctl {
namespace {

// ImportEntries requests stay below these (the daemon takes 100000 entries
// and 64 MiB per request).
constexpr size_t kImportChunkEntries = 10000;
constexpr size_t kImportChunkBytes = 32 << 20;

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxToolFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": larger than ", kMaxToolFileBytes >> 20, " MiB: not read"));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return text;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view text) {
  const std::string tmp = path + ".partial";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write ", tmp, ": check the directory exists and is writable"));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == text.size() && fsync(fd) == 0;
  close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(
        "writing ", path, " failed (disk full?): nothing was exported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ForEachEntryPage(
    Client& client, v1::ListEntriesRequest request, bool all,
    const std::function<void(v1::ListEntriesResponse&)>& fn) {
  std::set<std::string> seen;  // tokens: never loop over the same pages
  while (true) {
    absl::StatusOr<v1::ListEntriesResponse> page = client.ListEntries(request);
    if (!page.ok()) return page.status();
    fn(*page);
    if (!all || page->next_page_token().empty()) {
      return page->next_page_token();
    }
    if (!seen.insert(page->next_page_token()).second) {
      return absl::InternalError(absl::StrCat(
          "gputuned returned the page token '", page->next_page_token(),
          "' twice: stopping instead of listing the same entries again (a "
          "daemon bug; list with a larger --limit meanwhile)"));
    }
    request.set_page_token(page->next_page_token());
  }
}

absl::StatusOr<ToolEntries> ListToolEntries(Client& client,
                                            absl::string_view format) {
  v1::ListEntriesRequest request;
  request.mutable_filter()->set_op(std::string(format));
  request.set_page_size(1000);
  ToolEntries held;
  absl::StatusOr<std::string> done = ForEachEntryPage(
      client, std::move(request), /*all=*/true,
      [&](v1::ListEntriesResponse& page) {
        for (v1::Entry& e : *page.mutable_entries()) {
          held[e.key().candidate_set()].push_back(std::move(e));
        }
      });
  if (!done.ok()) return done.status();
  return held;
}

absl::StatusOr<std::vector<v1::Entry>> PickCandidateSet(
    const ToolEntries& held, const std::string& want) {
  if (want.empty() && held.size() > 1) {
    std::string sets;
    for (const auto& [set, entries] : held) {
      absl::StrAppend(&sets, "\n  ", set, " (", entries.size(), " entries)");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the daemon holds ", held.begin()->second.front().key().custom().op(),
        " entries of several tool versions: name the version with "
        "--match=FILE (a cache file the tool wrote, or just its metadata):",
        sets));
  }
  auto found = want.empty() ? held.begin() : held.find(want);
  if (found == held.end()) {
    return absl::NotFoundError(held.empty() ? "no entries"
                                            : "no entries for the versions of "
                                              "--match's file");
  }
  std::vector<v1::Entry> entries = found->second;
  // Rows in key order, whatever order the daemon lists in: the same entries
  // give the same bytes on every host.
  std::sort(entries.begin(), entries.end(),
            [](const v1::Entry& a, const v1::Entry& b) {
              return a.key().custom().params() < b.key().custom().params();
            });
  return entries;
}

absl::Status AdoptDaemonFingerprint(Client& client,
                                    std::vector<v1::Entry>& entries) {
  absl::StatusOr<v1::GetStatusResponse> status = client.GetStatus();
  if (!status.ok()) return status.status();
  for (v1::Entry& e : entries) {
    *e.mutable_fingerprint() = status->fingerprint();
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ImportInChunks(Client& client,
                                      const std::vector<v1::Entry>& entries) {
  // Usually one request (all or nothing in the daemon). Larger sets go in
  // several; every entry was validated before, so the daemon refusing a
  // later one is unexpected, and the message says how far it got.
  size_t imported = 0;
  size_t start = 0;
  while (start < entries.size()) {
    size_t end = start;
    size_t bytes = 0;
    while (end < entries.size() && end - start < kImportChunkEntries &&
           (end == start ||
            bytes + entries[end].ByteSizeLong() < kImportChunkBytes)) {
      bytes += entries[end].ByteSizeLong();
      ++end;
    }
    absl::StatusOr<uint32_t> n = client.ImportEntries(
        std::vector<v1::Entry>(entries.begin() + start, entries.begin() + end));
    if (!n.ok()) {
      return absl::Status(
          n.status().code(),
          absl::StrCat(
              n.status().message(), "\n",
              imported == 0
                  ? std::string("nothing was imported")
                  : absl::StrCat("the first ", imported,
                                 " entries were imported, the other ",
                                 entries.size() - imported,
                                 " not: fix the cause and import the whole "
                                 "file again (entries are replaced)")));
    }
    imported += *n;
    start = end;
  }
  return imported;
}

}  // namespace gputune::ctl
