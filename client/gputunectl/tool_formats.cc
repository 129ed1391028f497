#include "client/gputunectl/tool_formats.h"

#include <cmath>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/proto_time.h"
#include "proto/validation.h"

namespace gputune::ctl {
namespace {

constexpr absl::string_view kTunableOp = "tunableop";

// FNV-1a 64, as FingerprintDigest: a stable digest (the same on every host
// and build) of the metadata, short enough for a candidate set.
std::string Digest(absl::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

bool Printable(absl::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// --- PyTorch TunableOp ------------------------------------------------------
//
// TuningContext::WriteFile writes "Validator,KEY,VALUE" lines, then one
// "OP_SIGNATURE,PARAMS_SIGNATURE,SOLUTION,TIME" line per result; ReadFile
// splits every line at ',' and loads the results only when every validator
// matches its own (PT_VERSION is mandatory). An entry keeps the file's
// Validator lines and its own row verbatim in Execution.data (TIME as
// written: the tool prints it with the stream's default precision, and we
// never re-print it), so export writes back exactly what was read.

constexpr absl::string_view kValidator = "Validator";

// The part of Execution.data before the row: the Validator lines.
struct TunableOpData {
  absl::string_view validators;  // "Validator,...\n" lines
  absl::string_view row;         // "OP,PARAMS,SOLUTION,TIME" (no newline)
};

absl::StatusOr<TunableOpData> SplitTunableOpData(absl::string_view data) {
  absl::string_view body = data;
  if (!absl::ConsumeSuffix(&body, "\n")) {
    return absl::InvalidArgumentError("execution data does not end a row");
  }
  const size_t last = body.rfind('\n');
  TunableOpData out;
  out.validators =
      last == absl::string_view::npos ? "" : body.substr(0, last + 1);
  out.row = last == absl::string_view::npos ? body : body.substr(last + 1);
  if (out.validators.empty() ||
      !absl::StartsWith(out.validators, absl::StrCat(kValidator, ","))) {
    return absl::InvalidArgumentError(
        "execution data has no Validator lines: not a tunableop import");
  }
  return out;
}

absl::StatusOr<ToolFile> ReadTunableOp(absl::string_view text,
                                       absl::string_view name) {
  ToolFile file;
  // Validators first (they may come anywhere in the file; they apply to all
  // of it), then the rows.
  std::map<std::string, std::string> validators;  // sorted: the digest
  std::string validator_lines;                    // as written, in order
  struct Row {
    int line;
    std::vector<absl::string_view> fields;
    absl::string_view text;
  };
  std::vector<Row> rows;
  auto bad = [&](int line, absl::string_view why) {
    file.bad_rows.push_back(absl::StrCat(name, ":", line, ": ", why));
  };
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty()) continue;
    if (!Printable(line)) {
      bad(number, "not printable ASCII");
      continue;
    }
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    if (fields[0] == kValidator) {
      // The tool reads KEY and the first field of VALUE; a line it would
      // read differently from how it was written is refused as a whole.
      if (fields.size() != 3 || fields[1].empty() || fields[2].empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ":", number,
            ": a Validator line is Validator,KEY,VALUE: the file's versions "
            "cannot be read, nothing was imported"));
      }
      auto [it, fresh] =
          validators.emplace(std::string(fields[1]), std::string(fields[2]));
      if (!fresh && it->second != fields[2]) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ":", number, ": Validator ", fields[1],
                         " given twice with different values"));
      }
      if (fresh) absl::StrAppend(&validator_lines, line, "\n");
      continue;
    }
    rows.push_back({number, std::move(fields), line});
  }
  if (validators.count("PT_VERSION") == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        ": no Validator,PT_VERSION line: the versions the results were tuned "
        "for are unknown (TunableOp itself refuses such a file)"));
  }
  std::string canonical;
  for (const auto& [k, v] : validators)
    absl::StrAppend(&canonical, k, "=", v, "\n");
  file.candidate_set = absl::StrCat(kTunableOp, ":", Digest(canonical));
  absl::flat_hash_map<std::string, int> first_line;  // params -> line
  for (const Row& row : rows) {
    if (row.fields.size() < 3) {
      bad(row.line,
          "expected OP,PARAMS,SOLUTION[,TIME] or Validator,KEY,VALUE");
      continue;
    }
    if (row.fields[0].empty() || row.fields[1].empty() ||
        row.fields[2].empty()) {
      bad(row.line, "OP, PARAMS and SOLUTION must not be empty");
      continue;
    }
    double ms = 0;
    if (row.fields.size() >= 4 &&
        (!absl::SimpleAtod(row.fields[3], &ms) || !std::isfinite(ms) ||
         ms < 0 || ms > 3.6e6)) {
      bad(row.line, absl::StrCat("TIME '", row.fields[3],
                                 "' is not a duration in milliseconds"));
      continue;
    }
    v1::Entry entry;
    v1::Key& key = *entry.mutable_key();
    key.mutable_custom()->set_op(std::string(kTunableOp));
    key.mutable_custom()->set_params(
        absl::StrCat(row.fields[0], ",", row.fields[1]));
    key.set_candidate_set(file.candidate_set);
    v1::Execution& exec = *entry.mutable_execution();
    exec.set_kernel(std::string(kTunableOp));
    exec.set_data(absl::StrCat(validator_lines, row.text, "\n"));
    *entry.mutable_chosen_time() = ToProto(absl::Microseconds(ms * 1e3));
    entry.set_source(v1::SOURCE_IMPORTED);
    entry.set_reason(absl::StrCat("imported from a TunableOp file: solution ",
                                  row.fields[2]));
    if (absl::Status s = ValidateEntry(entry, "entry"); !s.ok()) {
      bad(row.line, s.message());
      continue;
    }
    auto [it, fresh] = first_line.emplace(key.custom().params(), row.line);
    if (!fresh) {
      bad(row.line,
          absl::StrCat("OP,PARAMS given already on line ", it->second));
      continue;
    }
    file.entries.push_back(std::move(entry));
  }
  return file;
}

absl::StatusOr<std::string> WriteTunableOp(
    const std::vector<v1::Entry>& entries) {
  std::string out;
  absl::string_view validators;
  for (const v1::Entry& e : entries) {
    absl::StatusOr<TunableOpData> data =
        SplitTunableOpData(e.execution().data());
    if (!data.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", e.key().custom().params(), ": ", data.status().message()));
    }
    if (out.empty()) {
      validators = data->validators;
      out = std::string(validators);
    } else if (data->validators != validators) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", e.key().custom().params(),
          " was imported with other Validator lines: one file holds one "
          "candidate set"));
    }
    absl::StrAppend(&out, data->row, "\n");
  }
  return out;
}

}  // namespace

const std::vector<std::string>& ToolFormats() {
  static const auto* formats =
      new std::vector<std::string>{std::string(kTunableOp)};
  return *formats;
}

absl::StatusOr<ToolFile> ReadToolFile(absl::string_view format,
                                      absl::string_view text,
                                      absl::string_view name) {
  if (format == kTunableOp) return ReadTunableOp(text, name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", format, "'"));
}

absl::StatusOr<std::string> WriteToolFile(
    absl::string_view format, const std::vector<v1::Entry>& entries) {
  if (format == kTunableOp) return WriteTunableOp(entries);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", format, "'"));
}

}  // namespace gputune::ctl
