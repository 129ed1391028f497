// libFuzzer target: the tuners' cache files of gputunectl import --format
// (ReadToolFile), which come from the tools and other hosts. The first byte
// picks the format, the rest is the file. Any input must give entries (each
// valid) and bad rows, or INVALID_ARGUMENT, never a crash; the entries read
// must write back (WriteToolFile) to a file that reads to the same entries.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/gputunectl/tool_formats.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& formats = gputune::ctl::ToolFormats();
  const std::string& format = formats[data[0] % formats.size()];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto file = gputune::ctl::ReadToolFile(format, text, "fuzz");
  if (!file.ok()) {
    if (file.status().code() != absl::StatusCode::kInvalidArgument) abort();
    return 0;
  }
  if (file->entries.empty()) return 0;
  for (const gputune::v1::Entry& e : file->entries) {
    if (!gputune::ValidateEntry(e, "entry").ok()) abort();
  }
  auto written = gputune::ctl::WriteToolFile(format, file->entries);
  if (!written.ok()) abort();
  auto again = gputune::ctl::ReadToolFile(format, *written, "fuzz-again");
  if (!again.ok() || !again->bad_rows.empty() ||
      again->candidate_set != file->candidate_set ||
      again->entries.size() != file->entries.size()) {
    abort();
  }
  for (size_t i = 0; i < file->entries.size(); ++i) {
    if (!google::protobuf::util::MessageDifferencer::Equals(
            file->entries[i].key(), again->entries[i].key())) {
      abort();  // WriteToolFile and ReadToolFile disagree
    }
  }
  return 0;
}
