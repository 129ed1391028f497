// Page tokens of ListEntries: opaque to clients, bounded and checked.
//
// A token is "1" (the encoding's version) followed by the web-safe base64
// (no padding) of the last key id of the page and a 4-byte FNV-1a checksum of
// it. The daemon hands out only tokens it made; anything else - forged,
// damaged, SQL, megabytes - is INVALID_ARGUMENT before the store sees it.
#ifndef GPUTUNE_DAEMON_PAGE_TOKEN_H_
#define GPUTUNE_DAEMON_PAGE_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/validation.h"  // kMaxPageTokenLength

namespace gputune {

// The token for a page that ended at `last_key_id`.
std::string EncodePageToken(absl::string_view last_key_id);

// The key id a token carries; "" for the empty token (first page).
// INVALID_ARGUMENT naming page_token for anything EncodePageToken did not
// make.
absl::StatusOr<std::string> DecodePageToken(absl::string_view token);

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_PAGE_TOKEN_H_
