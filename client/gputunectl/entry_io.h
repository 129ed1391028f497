// How gputunectl reads and writes entries: JSON lines for export/import
// (protobuf's JSON mapping of gputune.v1.Entry, one entry per line, with
// every measurement and the provenance), and the short forms people read in
// tables.
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_ENTRY_IO_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_ENTRY_IO_H_

#include <istream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::ctl {

// Protobuf JSON (enums by name, Duration/Timestamp as strings, lowerCamelCase
// names), with every field printed, zero or not; one line unless `pretty`.
std::string ToJson(const google::protobuf::Message& message, bool pretty);
// One line of an export file: `entry` as compact JSON. Fails (naming the
// key) when protobuf cannot print it, e.g. a Timestamp out of range: an
// export must never write a partial line.
absl::StatusOr<std::string> EntryLine(const v1::Entry& entry);

// Reads an export: one Entry per line, blank lines skipped. Every line is
// parsed and validated before anything is returned; the first bad one gives
// INVALID_ARGUMENT "<name>:<line>: <what is wrong>". A key given twice is an
// error, as is a file without entries.
absl::StatusOr<std::vector<v1::Entry>> ReadEntryLines(std::istream& in,
                                                      absl::string_view name);

// "12.3us", "1.20ms", "2.50s"; "-" for zero.
std::string ShortDuration(const google::protobuf::Duration& d);
// "2024-05-01 12:00:00" (UTC); "-" when unset.
std::string ShortTime(const google::protobuf::Timestamp& t);
// "algo_id=3 splitk=2" in name order.
std::string ShortParams(const v1::Execution& execution);
// "daemon", "client", "imported".
std::string SourceName(v1::Source source);
// "1.31x"; "-" when unknown.
std::string ShortSpeedup(double speedup);

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_ENTRY_IO_H_
