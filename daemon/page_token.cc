#include "daemon/page_token.h"

#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "proto/fnv1a.h"

namespace gputune {
namespace {

constexpr char kVersion = '1';

std::string Checksum(absl::string_view key_id) {
  // FNV-1a: detects damage; tokens are not secrets (a forged one could only
  // start a listing at another key, which the caller may list anyway).
  const uint32_t sum = Fnv1a<uint32_t>(key_id);
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(sum >> (8 * i));
  return out;
}

absl::Status Bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "page_token: ", why,
      "; pass next_page_token from the previous ListEntries answer unchanged, "
      "or empty for the first page"));
}

}  // namespace

std::string EncodePageToken(absl::string_view last_key_id) {
  std::string token(1, kVersion);
  absl::StrAppend(&token, absl::WebSafeBase64Escape(absl::StrCat(
                              last_key_id, Checksum(last_key_id))));
  return token;
}

absl::StatusOr<std::string> DecodePageToken(absl::string_view token) {
  if (token.empty()) return std::string();
  if (token.size() > kMaxPageTokenLength) {
    return Bad(absl::StrCat("longer than ", kMaxPageTokenLength,
                            " characters (", token.size(), ")"));
  }
  if (token[0] != kVersion) return Bad("not a token this daemon made");
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token.substr(1), &raw) || raw.size() < 5) {
    return Bad("not a token this daemon made");
  }
  std::string key_id = raw.substr(0, raw.size() - 4);
  if (raw.substr(raw.size() - 4) != Checksum(key_id)) {
    return Bad("damaged (checksum mismatch)");
  }
  return key_id;
}

}  // namespace gputune
