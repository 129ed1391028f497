// RESP2 replies, appended to a connection's output buffer exactly as Redis 7
// writes them (https://redis.io/docs/reference/protocol-spec/).
//
//   std::string out;
//   AppendSimple(&out, "OK");           // +OK\r\n
//   AppendError(&out, "ERR syntax error");
//   AppendBulk(&out, value);            // $5\r\nhello\r\n
//   AppendNil(&out);                    // $-1\r\n
#ifndef GPUTUNE_DAEMON_REDIS_RESP_WRITER_H_
#define GPUTUNE_DAEMON_REDIS_RESP_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gputune::redis {

// A status reply. `text` must hold no CR or LF.
inline void AppendSimple(std::string* out, absl::string_view text) {
  absl::StrAppend(out, "+", text, "\r\n");
}
// An error reply; `text` starts with the error code ("ERR ...", "WRONGPASS
// ..."). CR and LF (which would end the line early, e.g. from a key echoed
// back) become spaces, as Redis does.
inline void AppendError(std::string* out, absl::string_view text) {
  out->push_back('-');
  for (char c : text) out->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out->append("\r\n");
}
inline void AppendInteger(std::string* out, int64_t value) {
  absl::StrAppend(out, ":", value, "\r\n");
}
inline void AppendBulk(std::string* out, absl::string_view value) {
  absl::StrAppend(out, "$", value.size(), "\r\n", value, "\r\n");
}
inline void AppendNil(std::string* out) { out->append("$-1\r\n"); }
inline void AppendArrayHeader(std::string* out, size_t elements) {
  absl::StrAppend(out, "*", elements, "\r\n");
}

}  // namespace gputune::redis

#endif  // GPUTUNE_DAEMON_REDIS_RESP_WRITER_H_
