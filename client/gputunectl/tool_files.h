// A file-based tuner's cache file on disk and its entries in a daemon: what
// `gputunectl export/import --format` and gputune-sync share. The formats
// themselves are tool_formats.h.
//
//   absl::StatusOr<ToolEntries> held = ListToolEntries(client, "tunableop");
//   absl::StatusOr<std::vector<v1::Entry>> one = PickCandidateSet(*held, "");
//   WriteFileAtomically(path, *WriteToolFile("tunableop", *one));
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_TOOL_FILES_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_TOOL_FILES_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gputune/client.h"

namespace gputune::ctl {

// A tool's cache file is read whole; larger ones are refused (a TunableOp
// row is ~100 bytes: this is millions of entries).
inline constexpr size_t kMaxToolFileBytes = 256 << 20;

// The whole of `path` ("-": stdin). NOT_FOUND when it cannot be opened,
// INVALID_ARGUMENT when it is larger than kMaxToolFileBytes, DATA_LOSS on a
// read error.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Writes `text` to `path` next to itself (path.partial), syncs it and renames
// it: readers see the old file or the whole new one. PERMISSION_DENIED when
// path.partial cannot be created, DATA_LOSS when writing, syncing or the
// rename fails (path.partial is removed then).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view text);

// Calls `fn` with each page ListEntries answers for `request`, following
// next_page_token to the last page (only the first page when `all` is
// false). Returns the next page token (empty after the last page), the
// daemon's error, or INTERNAL when the daemon returns a page token twice
// (listing would never end).
absl::StatusOr<std::string> ForEachEntryPage(
    Client& client, v1::ListEntriesRequest request, bool all,
    const std::function<void(v1::ListEntriesResponse&)>& fn);

// The daemon's entries of a format's op, by candidate set (the tool version
// they were imported for).
using ToolEntries = std::map<std::string, std::vector<v1::Entry>>;

// Every entry of `format`'s op that `client`'s daemon holds, following every
// page. The daemon's error when a page fails.
absl::StatusOr<ToolEntries> ListToolEntries(Client& client,
                                            absl::string_view format);

// The entries of candidate set `want`, or with `want` empty of the only one
// there is, in key order (the same entries give the same file on every
// host). NOT_FOUND when there are none of `want` (or none at all),
// FAILED_PRECONDITION naming the candidate sets when `want` is empty and
// there are several.
absl::StatusOr<std::vector<v1::Entry>> PickCandidateSet(
    const ToolEntries& held, const std::string& want);

// Gives every entry the fingerprint of `client`'s daemon (GetStatus). A
// tool's file says which tool version tuned its rows (the candidate set),
// not on which device and software: its rows were tuned where the file is,
// so they are entries of that daemon's fingerprint: HITs there, and, with
// the fleet tier, published to the other hosts of the fingerprint (an entry
// without one is STALE and kept local). The daemon's error when GetStatus
// fails.
absl::Status AdoptDaemonFingerprint(Client& client,
                                    std::vector<v1::Entry>& entries);

// Imports `entries` (validated already) in ImportEntries requests below the
// daemon's limits (one request, all or nothing, up to 10000 entries and 32
// MiB; larger sets take several). Returns how many went in; on failure the
// daemon's error, its message followed by a line saying how far it got.
absl::StatusOr<size_t> ImportInChunks(Client& client,
                                      const std::vector<v1::Entry>& entries);

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_TOOL_FILES_H_
