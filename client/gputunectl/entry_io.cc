#include "client/gputunectl/entry_io.h"

#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "proto/validation.h"

namespace gputune::ctl {

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = false;
  // Scripts read fields that are zero too ("deleted": 0, "state": "MISS"):
  // every field is printed, so the shape does not depend on the values.
  options.always_print_primitive_fields = true;
  std::string out;
  // Printing a valid message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

absl::StatusOr<std::string> EntryLine(const v1::Entry& entry) {
  google::protobuf::util::JsonPrintOptions options;
  std::string out;
  if (auto s =
          google::protobuf::util::MessageToJsonString(entry, &out, options);
      !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("cannot write the entry for ", KeyId(entry.key()),
                     " as JSON: ", std::string(s.message())));
  }
  return out;
}

absl::StatusOr<std::vector<v1::Entry>> ReadEntryLines(std::istream& in,
                                                      absl::string_view name) {
  std::vector<v1::Entry> entries;
  absl::flat_hash_map<std::string, int> first_line;  // key id -> line
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty()) continue;
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", number, ": ", what));
    };
    v1::Entry entry;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    if (auto s = google::protobuf::util::JsonStringToMessage(
            google::protobuf::StringPiece(text.data(), text.size()), &entry,
            options);
        !s.ok()) {
      // protobuf's message spans lines (the text and a caret): keep one.
      std::string why(s.message());
      why = why.substr(0, why.find('\n'));
      return bad(absl::StrCat("not a gputune.v1.Entry in JSON: ", why));
    }
    if (absl::Status s = ValidateEntry(entry, "entry"); !s.ok()) {
      return bad(s.message());
    }
    auto [it, fresh] = first_line.emplace(KeyId(entry.key()), number);
    if (!fresh) {
      return bad(absl::StrCat("key ", it->first, " was given already on line ",
                              it->second));
    }
    entries.push_back(std::move(entry));
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(name, ": read error"));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": no entries (expected one JSON entry per line, "
                     "as gputunectl export writes them)"));
  }
  return entries;
}

std::string ShortDuration(const google::protobuf::Duration& d) {
  const double s = absl::ToDoubleSeconds(FromProto(d));
  if (s <= 0) return "-";
  if (s < 1e-3) return absl::StrFormat("%.1fus", s * 1e6);
  if (s < 1) return absl::StrFormat("%.2fms", s * 1e3);
  return absl::StrFormat("%.2fs", s);
}

std::string ShortTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", FromProto(t),
                          absl::UTCTimeZone());
}

std::string ShortParams(const v1::Execution& execution) {
  const std::map<std::string, int64_t> sorted(execution.params().begin(),
                                              execution.params().end());
  return absl::StrJoin(sorted, " ", absl::PairFormatter("="));
}

std::string SourceName(v1::Source source) {
  switch (source) {
    case v1::SOURCE_DAEMON_MEASURED:
      return "daemon";
    case v1::SOURCE_CLIENT_MEASURED:
      return "client";
    case v1::SOURCE_IMPORTED:
      return "imported";
    case v1::SOURCE_FLEET:
      return "fleet";
    default:
      return "-";
  }
}

std::string ShortSpeedup(double speedup) {
  return speedup > 0 ? absl::StrFormat("%.2fx", speedup) : "-";
}

}  // namespace gputune::ctl
