// libFuzzer target: the key text format (ParseKeyText), which gputunectl
// reads from people and scripts. Any input must give a key or
// INVALID_ARGUMENT, never a crash; a key that parses must print back
// (KeyText) to text that parses to the same key.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/key_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gputune::v1::Key> key = gputune::ParseKeyText(text);
  if (!key.ok()) {
    if (key.status().code() != absl::StatusCode::kInvalidArgument) abort();
    return 0;
  }
  const std::string printed = gputune::KeyText(*key);
  absl::StatusOr<gputune::v1::Key> again = gputune::ParseKeyText(printed);
  if (!again.ok() ||
      !google::protobuf::util::MessageDifferencer::Equals(*key, *again)) {
    abort();  // KeyText and ParseKeyText disagree
  }
  if (gputune::KeyId(*key) != gputune::KeyId(*again)) abort();
  return 0;
}
