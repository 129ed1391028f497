// File-based tuners' caches as gputune entries (gputunectl export/import
// --format). Each format maps one tool's cache file to entries of one custom
// op named after the format; the tool's own metadata (library versions, GPU)
// is hashed into the key's candidate set, so an entry imported for one
// version is STALE, never a hit, for another and is never exported into
// another version's file. Formats and the tool versions they follow:
// docs/integrations.md, "File-based tuners".
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_TOOL_FORMATS_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_TOOL_FORMATS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::ctl {

// The --format values, in the order help lists them.
const std::vector<std::string>& ToolFormats();

// A tool's cache file read as entries.
struct ToolFile {
  // The candidate set every entry of the file has: the format's name and a
  // digest of the tool's metadata ("tunableop:0123456789abcdef").
  std::string candidate_set;
  // One per row that parsed, in file order; every one passes ValidateEntry.
  std::vector<v1::Entry> entries;
  // "<name>:<line>: <why>" for each row that did not parse (not in entries).
  std::vector<std::string> bad_rows;
};

// Reads `text`, a cache file of `format`, named `name` in messages. A file
// whose metadata is missing or unreadable (no version to key on) is
// INVALID_ARGUMENT as a whole; a row that does not parse is listed in
// bad_rows and left out. Input is untrusted: bounded by the entry limits of
// validation.h, nothing is trusted to be well formed.
absl::StatusOr<ToolFile> ReadToolFile(absl::string_view format,
                                      absl::string_view text,
                                      absl::string_view name);

// The file the tool itself would read, for `entries` (all of `format`'s op
// and one candidate set, as ReadToolFile made them): the metadata they were
// imported with, then one row per entry in the order given. Importing a file
// and exporting its entries in key order gives the same bytes when the file's
// rows were in key order. INVALID_ARGUMENT for an entry that ReadToolFile
// did not make.
absl::StatusOr<std::string> WriteToolFile(
    absl::string_view format, const std::vector<v1::Entry>& entries);

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_TOOL_FORMATS_H_
