// libFuzzer target: the JSON lines of gputunectl export/import
// (ReadEntryLines), which may come from another machine. Any input must give
// entries or an error naming the line, never a crash; entries that are read
// must write back (ToJson) to lines that read to the same entries.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "client/gputunectl/entry_io.h"
#include "google/protobuf/util/message_differencer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  auto entries = gputune::ctl::ReadEntryLines(in, "fuzz");
  if (!entries.ok()) {
    if (entries.status().code() != absl::StatusCode::kInvalidArgument) abort();
    return 0;
  }
  std::string lines;
  for (const gputune::v1::Entry& entry : *entries) {
    lines += gputune::ctl::ToJson(entry, /*pretty=*/false);
    lines += '\n';
  }
  std::istringstream again_in(lines);
  auto again = gputune::ctl::ReadEntryLines(again_in, "fuzz-again");
  if (!again.ok() || again->size() != entries->size()) abort();
  for (size_t i = 0; i < entries->size(); ++i) {
    if (!google::protobuf::util::MessageDifferencer::Equals((*entries)[i],
                                                            (*again)[i])) {
      abort();  // ToJson and ReadEntryLines disagree
    }
  }
  return 0;
}
