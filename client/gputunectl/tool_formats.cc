#include "client/gputunectl/tool_formats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/fnv1a.h"
#include "proto/proto_time.h"
#include "proto/validation.h"

namespace gputune::ctl {
namespace {

constexpr absl::string_view kTunableOp = "tunableop";

// FNV-1a 64, as FingerprintDigest: a stable digest (the same on every host
// and build) of the metadata, short enough for a candidate set.
std::string Digest(absl::string_view bytes) {
  return absl::StrFormat("%016x", Fnv1a<uint64_t>(bytes));
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

// --- TensorRT-LLM AutoTuner -------------------------------------------------
//
// AutoTunerProfilingCache.save_cache (tensorrt_llm/_torch/autotuner.py)
// writes json.dump(..., indent=2, default=str). Two layouts:
//  - one file per rank (autotune(cache_path=P, rank=N) saves P's name with
//    ".rankN.json"):
//      {"metadata": {"lib_version", "creation_timestamp", "device_name",
//                    "device_capability"},
//       "cache_data": {str(cache key tuple): {"runner_id", "tactic",
//                                              "min_time"}}}
//  - one file for every rank (later versions: each rank merges its results
//    into P under a lock): "metadata" as above, then "shared" (the ops every
//    rank tunes alike; not in every version) and one "rank_N" object per
//    rank, each of str(cache key tuple): {"runner_id", "tactic",
//    "min_time"}; a rank loads "shared" and its own "rank_N" (some versions
//    fail when their "rank_N" is missing, so an empty one is kept).
// The JSON is parsed by protobuf (into a Struct); an entry keeps the file's
// metadata and its own value in Execution.data (as protobuf JSON), with its
// section and the file's sections in the second layout, and export prints
// them back as Python's json.dump does.
constexpr absl::string_view kTrtllm = "trtllm";
// The metadata that says which library and GPU tuned the entries (the
// creation time is kept but is not part of the candidate set).
constexpr absl::string_view kTrtllmIdentity[] = {"lib_version", "device_name",
                                                 "device_capability"};
constexpr absl::string_view kTrtllmMetadataOrder[] = {
    "lib_version", "creation_timestamp", "device_name", "device_capability"};
constexpr absl::string_view kTrtllmValueOrder[] = {"runner_id", "tactic",
                                                   "min_time"};
// Numbers Python writes as floats (time.time(), a measured time).
bool PythonFloatField(absl::string_view name) {
  return name == "creation_timestamp" || name == "min_time";
}

namespace pb = google::protobuf;

std::string CompactJson(const pb::Message& m) {
  std::string out;
  (void)pb::util::MessageToJsonString(m, &out);
  return out;
}

absl::StatusOr<pb::Struct> ParseStruct(absl::string_view text) {
  pb::Struct out;
  pb::util::JsonParseOptions options;
  if (auto s = pb::util::JsonStringToMessage(
          pb::StringPiece(text.data(), text.size()), &out, options);
      !s.ok()) {
    std::string why(s.message());
    return absl::InvalidArgumentError(why.substr(0, why.find('\n')));
  }
  return out;
}

// Python's repr of a float: the shortest digits that read back, in fixed
// notation for exponents -4..15 (with ".0" when integral), else d.ddde+XX.
std::string PythonFloat(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // buf: [-]d[.ddd]e[+-]XX
  std::string text(buf);
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string sign = text[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t i = sign.size(); i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  return absl::StrFormat("%s%se%c%02d", sign, mantissa,
                         exponent < 0 ? '-' : '+', std::abs(exponent));
}

// A JSON string as Python's json.dump writes it (ensure_ascii): \uXXXX for
// every non-ASCII code point (surrogate pairs above U+FFFF).
std::string PythonString(absl::string_view utf8) {
  std::string out = "\"";
  for (size_t i = 0; i < utf8.size();) {
    unsigned char c = utf8[i];
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xf0 && i + 3 < utf8.size()) {
      cp = ((c & 0x07u) << 18) | ((utf8[i + 1] & 0x3fu) << 12) |
           ((utf8[i + 2] & 0x3fu) << 6) | (utf8[i + 3] & 0x3fu);
      len = 4;
    } else if (c >= 0xe0 && i + 2 < utf8.size()) {
      cp = ((c & 0x0fu) << 12) | ((utf8[i + 1] & 0x3fu) << 6) |
           (utf8[i + 2] & 0x3fu);
      len = 3;
    } else if (c >= 0xc0 && i + 1 < utf8.size()) {
      cp = ((c & 0x1fu) << 6) | (utf8[i + 1] & 0x3fu);
      len = 2;
    }
    i += len;
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp >= 0x20 && cp < 0x7f) {
      out += static_cast<char>(cp);
    } else if (cp > 0xffff) {
      cp -= 0x10000;
      absl::StrAppendFormat(&out, "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                            0xdc00 + (cp & 0x3ff));
    } else {
      absl::StrAppendFormat(&out, "\\u%04x", cp);
    }
  }
  return out + "\"";
}

// Keys of an object in the order Python wrote them: `order` first, then the
// others sorted.
template <size_t N>
std::vector<std::string> KeyOrder(const pb::Struct& s,
                                  const absl::string_view (&order)[N]) {
  std::vector<std::string> keys;
  for (absl::string_view k : order) {
    if (s.fields().count(std::string(k))) keys.emplace_back(k);
  }
  std::vector<std::string> rest;
  for (const auto& [k, v] : s.fields()) {
    bool known = false;
    for (absl::string_view o : order) known = known || o == k;
    if (!known) rest.push_back(k);
  }
  std::sort(rest.begin(), rest.end());
  keys.insert(keys.end(), rest.begin(), rest.end());
  return keys;
}

// json.dump(indent=2) of `v` at depth `depth`; `name` is its key (numbers of
// the float fields print as floats, other integral numbers as ints).
void PythonJson(const pb::Value& v, int depth, absl::string_view name,
                std::string* out);

void PythonObject(const pb::Struct& s, const std::vector<std::string>& keys,
                  int depth, std::string* out) {
  if (keys.empty()) {
    *out += "{}";
    return;
  }
  *out += "{";
  const std::string pad(2 * (depth + 1), ' ');
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StrAppend(out, i == 0 ? "\n" : ",\n", pad, PythonString(keys[i]),
                    ": ");
    PythonJson(s.fields().at(keys[i]), depth + 1, keys[i], out);
  }
  absl::StrAppend(out, "\n", std::string(2 * depth, ' '), "}");
}

void PythonJson(const pb::Value& v, int depth, absl::string_view name,
                std::string* out) {
  switch (v.kind_case()) {
    case pb::Value::kNullValue:
      *out += "null";
      return;
    case pb::Value::kBoolValue:
      *out += v.bool_value() ? "true" : "false";
      return;
    case pb::Value::kStringValue:
      *out += PythonString(v.string_value());
      return;
    case pb::Value::kNumberValue: {
      const double x = v.number_value();
      if (!PythonFloatField(name) && std::isfinite(x) && x == std::trunc(x) &&
          std::fabs(x) < 9007199254740992.0) {
        absl::StrAppend(out, static_cast<int64_t>(x));
      } else {
        *out += PythonFloat(x);
      }
      return;
    }
    case pb::Value::kListValue: {
      const pb::ListValue& l = v.list_value();
      if (l.values_size() == 0) {
        *out += "[]";
        return;
      }
      *out += "[";
      const std::string pad(2 * (depth + 1), ' ');
      for (int i = 0; i < l.values_size(); ++i) {
        absl::StrAppend(out, i == 0 ? "\n" : ",\n", pad);
        PythonJson(l.values(i), depth + 1, "", out);
      }
      absl::StrAppend(out, "\n", std::string(2 * depth, ' '), "]");
      return;
    }
    case pb::Value::kStructValue: {
      const pb::Struct& s = v.struct_value();
      std::vector<std::string> keys;
      for (const auto& [k, unused] : s.fields()) keys.push_back(k);
      std::sort(keys.begin(), keys.end());
      PythonObject(s, keys, depth, out);
      return;
    }
    default:
      *out += "null";
  }
}

// The line of `text` where the object key `key` is (1 when not found); with
// `within`, the first `key` after the key `within` (a section's own).
int LineOf(absl::string_view text, absl::string_view key,
           absl::string_view within = "") {
  size_t from = 0;
  if (!within.empty()) {
    from = text.find(absl::StrCat(PythonString(within), ": "));
    if (from == absl::string_view::npos) from = 0;
  }
  const size_t at = text.find(absl::StrCat(PythonString(key), ": "), from);
  if (at == absl::string_view::npos) return 1;
  return 1 +
         static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

// A digest of `s` that does not depend on protobuf's map order: Python's
// JSON of it with every object's keys sorted.
std::string CanonicalDigest(const pb::Struct& s) {
  pb::Value v;
  *v.mutable_struct_value() = s;
  std::string text;
  PythonJson(v, 0, "", &text);
  return Digest(text);
}

// An entry of a JSON format's op for cache key `params`: the file's
// metadata, the key's value and `extra` (fields of the format's own) kept in
// Execution.data, to be written back.
v1::Entry JsonEntry(absl::string_view op, const std::string& params,
                    const std::string& candidate_set,
                    const pb::Struct& metadata, const pb::Value& value,
                    const pb::Struct& extra = {}) {
  pb::Struct data = extra;
  *(*data.mutable_fields())["metadata"].mutable_struct_value() = metadata;
  (*data.mutable_fields())["value"] = value;
  v1::Entry entry;
  entry.mutable_key()->mutable_custom()->set_op(std::string(op));
  entry.mutable_key()->mutable_custom()->set_params(params);
  entry.mutable_key()->set_candidate_set(candidate_set);
  entry.mutable_execution()->set_kernel(std::string(op));
  entry.mutable_execution()->set_data(CompactJson(data));
  entry.set_source(v1::SOURCE_IMPORTED);
  return entry;
}

// What a JsonEntry keeps.
struct JsonData {
  pb::Struct metadata;
  pb::Value value;
  pb::Struct all;  // the whole of Execution.data, `extra` too
};

// The data a JsonEntry keeps; INVALID_ARGUMENT for an entry that no import
// of `op` made.
absl::StatusOr<JsonData> JsonEntryData(absl::string_view op,
                                       const v1::Entry& e) {
  absl::StatusOr<pb::Struct> data = ParseStruct(e.execution().data());
  const auto* fields = data.ok() ? &data->fields() : nullptr;
  if (fields == nullptr || !fields->count("metadata") ||
      !fields->at("metadata").has_struct_value() || !fields->count("value")) {
    return absl::InvalidArgumentError(
        absl::StrCat("entry ", e.key().custom().params(),
                     ": execution data is not a ", op, " import's"));
  }
  return JsonData{fields->at("metadata").struct_value(), fields->at("value"),
                  *std::move(data)};
}

// "shared" or "rank_N" (N a decimal index): a section of the one-file layout.
bool TrtllmSection(absl::string_view name) {
  if (name == "shared") return true;
  if (!absl::ConsumePrefix(&name, "rank_") || name.empty() || name.size() > 7 ||
      (name.size() > 1 && name[0] == '0')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// The order export writes sections in: "shared", then the ranks by number.
bool TrtllmSectionBefore(const std::string& a, const std::string& b) {
  auto rank = [](const std::string& s) {
    return s == "shared" ? -1 : std::atoi(s.c_str() + 5);
  };
  return rank(a) < rank(b);
}

absl::StatusOr<ToolFile> ReadTrtllm(absl::string_view text,
                                    absl::string_view name) {
  absl::StatusOr<pb::Struct> root = ParseStruct(text);
  if (!root.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a TensorRT-LLM autotuner cache (JSON): ",
                     root.status().message()));
  }
  auto object = [&](absl::string_view field) -> const pb::Struct* {
    auto it = root->fields().find(std::string(field));
    if (it == root->fields().end() || !it->second.has_struct_value()) {
      return nullptr;
    }
    return &it->second.struct_value();
  };
  const pb::Struct* metadata = object("metadata");
  if (metadata == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        ": expected the object \"metadata\" (as "
        "AutoTunerProfilingCache.save_cache writes it): nothing was "
        "imported"));
  }
  // One file per rank ("cache_data"), or one for all ("shared", "rank_N").
  const pb::Struct* cache_data = object("cache_data");
  std::vector<std::string> sections;
  if (cache_data == nullptr) {
    for (const auto& [k, v] : root->fields()) {
      if (k == "metadata") continue;
      if (!TrtllmSection(k) || !v.has_struct_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ":", LineOf(text, k), ": \"", k,
            "\" is neither \"cache_data\" (a file per rank) nor a "
            "\"shared\" or \"rank_N\" object (a file for every rank): "
            "nothing was imported"));
      }
      sections.push_back(k);
    }
    std::sort(sections.begin(), sections.end(), TrtllmSectionBefore);
  }
  pb::Struct identity;
  for (absl::string_view k : kTrtllmIdentity) {
    auto it = metadata->fields().find(std::string(k));
    if (it == metadata->fields().end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": metadata has no \"", k,
          "\": the library and GPU the results were tuned for are unknown"));
    }
    (*identity.mutable_fields())[std::string(k)] = it->second;
  }
  ToolFile file;
  file.candidate_set = absl::StrCat(kTrtllm, ":", CanonicalDigest(identity));
  // What every entry of the one-file layout keeps besides its value: the
  // file's sections (so that export writes an empty one back too).
  pb::Struct layout;
  for (const std::string& section : sections) {
    (*layout.mutable_fields())["sections"]
        .mutable_list_value()
        ->add_values()
        ->set_string_value(section);
  }
  // One section's rows (cache_data's when `section` is empty), in key order
  // (the file's order is Python's insertion order, which protobuf's map does
  // not keep).
  auto read_rows = [&](const pb::Struct& rows, const std::string& section) {
    std::vector<std::string> keys;
    for (const auto& [k, unused] : rows.fields()) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const std::string& k : keys) {
      const pb::Value& value = rows.fields().at(k);
      auto bad = [&](absl::string_view why) {
        file.bad_rows.push_back(
            absl::StrCat(name, ":", LineOf(text, k, section), ": ", why));
      };
      if (!value.has_struct_value()) {
        bad("expected {\"runner_id\", \"tactic\", \"min_time\"}");
        continue;
      }
      const auto& f = value.struct_value().fields();
      auto runner = f.find("runner_id");
      auto time = f.find("min_time");
      if (runner == f.end() || !runner->second.has_number_value() ||
          runner->second.number_value() < 0 ||
          runner->second.number_value() > 1e6 ||
          runner->second.number_value() !=
              std::trunc(runner->second.number_value())) {
        bad("runner_id must be an index (an integer >= 0)");
        continue;
      }
      if (f.find("tactic") == f.end()) {
        bad("no tactic");
        continue;
      }
      if (time == f.end() || !time->second.has_number_value() ||
          !std::isfinite(time->second.number_value()) ||
          time->second.number_value() < 0 ||
          time->second.number_value() > 3.6e6) {
        bad("min_time must be a duration in milliseconds");
        continue;
      }
      pb::Struct extra;
      if (!section.empty()) {
        extra = layout;
        (*extra.mutable_fields())["section"].set_string_value(section);
      }
      // A section's key is its own: the same cache key may have another
      // tactic on another rank.
      v1::Entry entry = JsonEntry(
          kTrtllm, section.empty() ? k : absl::StrCat(section, " ", k),
          file.candidate_set, *metadata, value, extra);
      (*entry.mutable_execution()->mutable_params())["runner_id"] =
          static_cast<int32_t>(runner->second.number_value());
      *entry.mutable_chosen_time() =
          ToProto(absl::Microseconds(time->second.number_value() * 1e3));
      if (absl::Status s = ValidateEntry(entry, "entry"); !s.ok()) {
        bad(s.message());
        continue;
      }
      file.entries.push_back(std::move(entry));
    }
  };
  if (cache_data != nullptr) {
    read_rows(*cache_data, "");
  } else {
    for (const std::string& section : sections) {
      read_rows(*object(section), section);
    }
  }
  return file;
}

// `value`, an object of runner_id, tactic and min_time, at `depth`.
void TrtllmValue(const pb::Value& value, int depth, std::string* out) {
  const pb::Struct& s = value.struct_value();
  PythonObject(s, KeyOrder(s, kTrtllmValueOrder), depth, out);
}

absl::StatusOr<std::string> WriteTrtllm(const std::vector<v1::Entry>& entries) {
  pb::Struct metadata;
  // Rows by section ("" for the one-file-per-rank layout's cache_data), in
  // the order given.
  std::map<std::string, std::vector<std::pair<std::string, pb::Value>>> rows;
  std::vector<std::string> sections;
  bool per_rank_file = false;
  for (const v1::Entry& e : entries) {
    auto data = JsonEntryData(kTrtllm, e);
    if (!data.ok()) return data.status();
    // The first entry's metadata (its creation_timestamp too): entries of
    // one candidate set agree on the rest.
    if (metadata.fields().empty()) metadata = data->metadata;
    const auto& fields = data->all.fields();
    auto section = fields.find("section");
    const bool sectioned = section != fields.end();
    if (&e != &entries.front() && sectioned == per_rank_file) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry ", e.key().custom().params(),
          ": some entries come from a file per rank (cache_data), others "
          "from a file for every rank (rank_N sections): one file holds one "
          "layout"));
    }
    per_rank_file = !sectioned;
    if (!sectioned) {
      rows[""].emplace_back(e.key().custom().params(), data->value);
      continue;
    }
    const std::string& name = section->second.string_value();
    absl::string_view key = e.key().custom().params();
    if (!TrtllmSection(name) || !absl::ConsumePrefix(&key, name + " ")) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry ", e.key().custom().params(),
                       ": execution data names no section of its key"));
    }
    rows[name].emplace_back(std::string(key), data->value);
    sections.push_back(name);
    if (auto all = fields.find("sections"); all != fields.end()) {
      for (const pb::Value& v : all->second.list_value().values()) {
        if (TrtllmSection(v.string_value())) {
          sections.push_back(v.string_value());
        }
      }
    }
  }
  std::sort(sections.begin(), sections.end(), TrtllmSectionBefore);
  sections.erase(std::unique(sections.begin(), sections.end()), sections.end());
  // One object of rows at depth 1, as json.dump(indent=2) prints it.
  auto print_rows =
      [](const std::vector<std::pair<std::string, pb::Value>>& section_rows,
         std::string* out) {
        if (section_rows.empty()) {
          *out += "{}";
          return;
        }
        *out += "{";
        for (size_t i = 0; i < section_rows.size(); ++i) {
          absl::StrAppend(out, i == 0 ? "\n" : ",\n", "    ",
                          PythonString(section_rows[i].first), ": ");
          TrtllmValue(section_rows[i].second, 2, out);
        }
        *out += "\n  }";
      };
  std::string out = "{\n  \"metadata\": ";
  PythonObject(metadata, KeyOrder(metadata, kTrtllmMetadataOrder), 1, &out);
  if (per_rank_file || entries.empty()) {
    out += ",\n  \"cache_data\": ";
    print_rows(rows[""], &out);
  } else {
    for (const std::string& section : sections) {
      absl::StrAppend(&out, ",\n  ", PythonString(section), ": ");
      print_rows(rows[section], &out);
    }
  }
  out += "\n}";
  return out;
}

// --- FlashInfer autotuner, v1 (one JSON file) -----------------------------
//
// AutoTuner.save_configs (flashinfer/autotuner.py) writes json.dump(indent=2)
// of {"_metadata": _collect_metadata(), then, in sorted order,
// str((custom_op, runner class, profile)): [runner class, tactic]};
// load_configs skips the whole file when a metadata field differs from the
// running environment's (or is not "*").

constexpr absl::string_view kFlashinferV1 = "flashinfer-v1";
// Keys of FlashInfer's own bookkeeping, not configs: the environment that
// wrote the file last (_last_updated_by, beside _metadata's first writer:
// FlashInfer's docs/autotuning.rst, "Cache File Format") and a hash of the
// rest (_generation). An import ignores them; an export writes neither
// (FlashInfer loads a file without them).
constexpr absl::string_view kFlashinferBookkeeping[] = {"_last_updated_by",
                                                        "_generation"};
constexpr absl::string_view kFlashinferMetadataOrder[] = {
    "flashinfer_version", "cuda_version",           "cublas_version",
    "cudnn_version",      "cudnn_frontend_version", "gpu"};

absl::StatusOr<ToolFile> ReadFlashinferV1(absl::string_view text,
                                          absl::string_view name) {
  absl::StatusOr<pb::Struct> root = ParseStruct(text);
  if (!root.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a FlashInfer autotuner cache (JSON): ",
                     root.status().message()));
  }
  auto meta = root->fields().find("_metadata");
  if (meta == root->fields().end() || !meta->second.has_struct_value() ||
      meta->second.struct_value().fields().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        ": no \"_metadata\" object: the FlashInfer, CUDA and library "
        "versions the configs were tuned for are unknown, nothing was "
        "imported"));
  }
  const pb::Struct& metadata = meta->second.struct_value();
  ToolFile file;
  file.candidate_set =
      absl::StrCat(kFlashinferV1, ":", CanonicalDigest(metadata));
  std::vector<std::string> keys;
  for (const auto& [k, unused] : root->fields()) {
    if (k != "_metadata" && std::find(std::begin(kFlashinferBookkeeping),
                                      std::end(kFlashinferBookkeeping),
                                      k) == std::end(kFlashinferBookkeeping)) {
      keys.push_back(k);
    }
  }
  std::sort(keys.begin(), keys.end());
  for (const std::string& k : keys) {
    const pb::Value& value = root->fields().at(k);
    const bool pair = value.has_list_value() &&
                      value.list_value().values_size() == 2 &&
                      value.list_value().values(0).has_string_value() &&
                      !value.list_value().values(0).string_value().empty();
    if (!pair) {
      file.bad_rows.push_back(
          absl::StrCat(name, ":", LineOf(text, k),
                       ": expected [runner class name, tactic]"));
      continue;
    }
    v1::Entry entry =
        JsonEntry(kFlashinferV1, k, file.candidate_set, metadata, value);
    entry.set_reason(absl::StrCat("imported from a FlashInfer cache: runner ",
                                  value.list_value().values(0).string_value()));
    if (absl::Status s = ValidateEntry(entry, "entry"); !s.ok()) {
      file.bad_rows.push_back(
          absl::StrCat(name, ":", LineOf(text, k), ": ", s.message()));
      continue;
    }
    file.entries.push_back(std::move(entry));
  }
  return file;
}

absl::StatusOr<std::string> WriteFlashinferV1(
    const std::vector<v1::Entry>& entries) {
  pb::Struct root;
  pb::Struct metadata;
  std::vector<std::string> keys;
  for (const v1::Entry& e : entries) {
    auto data = JsonEntryData(kFlashinferV1, e);
    if (!data.ok()) return data.status();
    if (metadata.fields().empty()) metadata = data->metadata;
    keys.push_back(e.key().custom().params());
    (*root.mutable_fields())[keys.back()] = data->value;
  }
  // FlashInfer sorts the keys; "_metadata" comes first.
  std::sort(keys.begin(), keys.end());
  std::string out = "{\n  \"_metadata\": ";
  PythonObject(metadata, KeyOrder(metadata, kFlashinferMetadataOrder), 1, &out);
  for (const std::string& k : keys) {
    absl::StrAppend(&out, ",\n  ", PythonString(k), ": ");
    PythonJson(root.fields().at(k), 1, "", &out);
  }
  out += "\n}";
  return out;
}

}  // namespace

const std::vector<std::string>& ToolFormats() {
  static const auto* formats = new std::vector<std::string>{
      std::string(kTunableOp), std::string(kTrtllm),
      std::string(kFlashinferV1)};
  return *formats;
}

absl::StatusOr<ToolFile> ReadToolFile(absl::string_view format,
                                      absl::string_view text,
                                      absl::string_view name) {
  if (format == kTunableOp) return ReadTunableOp(text, name);
  if (format == kTrtllm) return ReadTrtllm(text, name);
  if (format == kFlashinferV1) return ReadFlashinferV1(text, name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", format, "'"));
}

absl::StatusOr<std::string> WriteToolFile(
    absl::string_view format, const std::vector<v1::Entry>& entries) {
  if (format == kTunableOp) return WriteTunableOp(entries);
  if (format == kTrtllm) return WriteTrtllm(entries);
  if (format == kFlashinferV1) return WriteFlashinferV1(entries);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", format, "'"));
}

}  // namespace gputune::ctl
