// RespReader: turns the bytes a Redis client sends into commands, with
// hiredis's protocol reader doing the parsing (redisReader, read.h) and this
// class enforcing the bounds a daemon needs against an untrusted peer.
//
//   RespReader reader(limits);
//   if (absl::Status s = reader.Feed(bytes, n); !s.ok()) -> reply, close
//   while (true) {
//     absl::StatusOr<std::optional<RespCommand>> c = reader.Next();
//     if (!c.ok()) -> reply "-" + c.status().message(), close
//     if (!c->has_value()) break;  // needs more bytes
//     ... run **c ...
//   }
//
// A request is what Redis 7 calls a multibulk (an array of bulk strings),
// or, when it does not start with '*', an inline command as typed into
// telnet or nc ("GET key\r\n"): a line of at most 64 KiB split at spaces
// and tabs. Redis also unquotes inline arguments ("..." and '...'); an
// inline command holding a quote is refused here (a parser of its own that
// this reader leaves out). Anything else (a nested array, an integer or
// status inside the array) is a protocol error. Empty and null arrays ("*0",
// "*-1") and blank lines are skipped, as Redis skips them.
//
// Errors are INVALID_ARGUMENT (malformed) or RESOURCE_EXHAUSTED (over a
// bound), and their message is the Redis error line to send without the
// leading '-' (e.g. "ERR Protocol error: invalid multibulk length"). After
// an error the reader is unusable: the connection must be closed, as Redis
// closes it. Not thread-safe (one per connection).
#ifndef GPUTUNE_DAEMON_REDIS_RESP_READER_H_
#define GPUTUNE_DAEMON_REDIS_RESP_READER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct redisReader;  // hiredis/read.h

namespace gputune::redis {

struct RespLimits {
  // Arguments of one command (MGET and MSET take many).
  size_t max_arguments = 1 << 16;
  // One argument (a key or a value).
  size_t max_bulk_bytes = 1 << 20;
  // All arguments of one command together.
  size_t max_command_bytes = 8 << 20;
  // Bytes received and not yet turned into commands (pipelined requests
  // and the unfinished one): what one connection may make the daemon hold.
  size_t max_buffered_bytes = 16 << 20;
};

using RespCommand = std::vector<std::string>;

class RespReader {
 public:
  explicit RespReader(const RespLimits& limits);
  ~RespReader();
  RespReader(const RespReader&) = delete;
  RespReader& operator=(const RespReader&) = delete;

  // Appends received bytes. RESOURCE_EXHAUSTED when more than
  // max_buffered_bytes would be waiting.
  absl::Status Feed(const char* data, size_t size);
  // The next complete command, nullopt when more bytes are needed; an
  // error (see above) for a malformed request or one over a bound.
  absl::StatusOr<std::optional<RespCommand>> Next();
  // Bytes fed and not yet consumed by Next.
  size_t buffered() const;

  // Redis's PROTO_INLINE_MAX_SIZE: an inline command's line at most.
  static constexpr size_t kMaxInlineBytes = 64 << 10;

 private:
  friend struct ReaderCallbacks;
  // Whether hiredis has read nothing of the next request yet.
  bool AtRequestStart() const;
  // The inline command at the reader's position (see above): nullopt when
  // its line is not complete, an empty command for a blank line.
  absl::StatusOr<std::optional<RespCommand>> NextInline();
  const RespLimits limits_;
  redisReader* reader_ = nullptr;
  // Set by the object callbacks when they refuse a request; hiredis then
  // reports an out-of-memory error, which Next replaces with this.
  absl::Status refused_;
  size_t command_bytes_ = 0;  // of the command being read
  absl::Status failed_;       // sticky
};

}  // namespace gputune::redis

#endif  // GPUTUNE_DAEMON_REDIS_RESP_READER_H_
