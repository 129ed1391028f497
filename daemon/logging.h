// Logging set-up for gputuned: journald-friendly under systemd, a plain
// console otherwise.
#ifndef GPUTUNE_DAEMON_LOGGING_H_
#define GPUTUNE_DAEMON_LOGGING_H_

#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/fmt/fmt.h"

// Debian's Abseil has its own string_view type (not std::string_view), which
// absl::Status::message() returns: let log lines format it.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(
        fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace gputune {

// Under systemd (stderr is the stream $JOURNAL_STREAM names) each line is
// "<priority>message": the journal adds its own timestamp and reads the syslog
// priority from the prefix. Otherwise lines carry a timestamp and level. Logs
// go to stderr.
//
// Also routes protobuf's own log lines (e.g. "String field ... contains
// invalid UTF-8 data when parsing a protocol buffer", one per bad request)
// through spdlog, at most one a second: a client sending bad requests in a
// loop cannot flood the journal. The lines skipped are counted in the next.
void SetUpLogging(const std::string& level);

// `text` from another process made safe for one log line: control
// characters (newlines, ANSI escapes), quotes, backslashes and bytes >= 0x80
// as C escapes, cut to 512 characters (with "..." after).
std::string LogSafe(absl::string_view text);

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_LOGGING_H_
