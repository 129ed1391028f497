#include "daemon/redis/resp_reader.h"

#include <hiredis/read.h>
extern "C" {  // hiredis 0.14's sds.h declares C functions without it
#include <hiredis/sds.h>
}

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gputune::redis {
namespace {

// What the object callbacks build: the top-level array, or a marker for an
// empty/null request. Elements are stored into their parent directly, so a
// child's "object" is its parent (hiredis frees only the root).
struct Request {
  bool skip = false;  // "*0" or "*-1": nothing to run
  RespCommand args;
};

char TypeByte(int type) {
  switch (type) {
    case REDIS_REPLY_ARRAY:
      return '*';
    case REDIS_REPLY_INTEGER:
      return ':';
    case REDIS_REPLY_STATUS:
      return '+';
    case REDIS_REPLY_ERROR:
      return '-';
    default:
      return '$';
  }
}

}  // namespace

// The hiredis object functions, with access to the reader's limits.
struct ReaderCallbacks {
  static RespReader* Owner(const redisReadTask* task) {
    return static_cast<RespReader*>(task->privdata);
  }
  static void* Refuse(const redisReadTask* task, absl::Status status) {
    RespReader* owner = Owner(task);
    if (owner->refused_.ok()) owner->refused_ = std::move(status);
    return nullptr;  // hiredis reports "out of memory"; Next says why
  }
  static void* Element(const redisReadTask* task, int type) {
    return Refuse(task, absl::InvalidArgumentError(absl::StrCat(
                            "ERR Protocol error: expected '$', got '",
                            std::string(1, TypeByte(type)), "'")));
  }

  static void* CreateString(const redisReadTask* task, char* str, size_t len) {
    if (task->parent == nullptr) {
      return Refuse(task, absl::InvalidArgumentError(
                              "ERR Protocol error: expected '*', got '" +
                              std::string(1, TypeByte(task->type)) + "'"));
    }
    if (task->type != REDIS_REPLY_STRING) return Element(task, task->type);
    RespReader* owner = Owner(task);
    if (len > owner->limits_.max_bulk_bytes) {
      return Refuse(task, absl::ResourceExhaustedError(
                              "ERR Protocol error: invalid bulk length"));
    }
    owner->command_bytes_ += len;
    if (owner->command_bytes_ > owner->limits_.max_command_bytes) {
      return Refuse(task, absl::ResourceExhaustedError(absl::StrCat(
                              "ERR Protocol error: command larger than ",
                              owner->limits_.max_command_bytes, " bytes")));
    }
    auto* request = static_cast<Request*>(task->parent->obj);
    if (task->idx < 0 ||
        static_cast<size_t>(task->idx) >= request->args.size()) {
      return Refuse(task, absl::InvalidArgumentError(
                              "ERR Protocol error: unbalanced multibulk"));
    }
    request->args[task->idx].assign(str, len);
    return request;
  }
  static void* CreateArray(const redisReadTask* task, size_t elements) {
    if (task->parent != nullptr) return Element(task, REDIS_REPLY_ARRAY);
    RespReader* owner = Owner(task);
    if (elements > owner->limits_.max_arguments) {
      return Refuse(task, absl::ResourceExhaustedError(
                              "ERR Protocol error: invalid multibulk length"));
    }
    owner->command_bytes_ = 0;
    auto* request = new Request;
    request->skip = elements == 0;
    request->args.resize(elements);
    return request;
  }
  static void* CreateArrayInt(const redisReadTask* task, int elements) {
    if (elements < 0) {
      return Refuse(task, absl::InvalidArgumentError(
                              "ERR Protocol error: invalid multibulk length"));
    }
    return CreateArray(task, static_cast<size_t>(elements));
  }
  static void* CreateInteger(const redisReadTask* task, long long) {
    if (task->parent == nullptr) {
      return Refuse(task, absl::InvalidArgumentError(
                              "ERR Protocol error: expected '*', got ':'"));
    }
    return Element(task, REDIS_REPLY_INTEGER);
  }
  static void* CreateNil(const redisReadTask* task) {
    if (task->parent == nullptr) {  // "*-1": a null request, skipped
      auto* request = new Request;
      request->skip = true;
      return request;
    }
    return Refuse(task, absl::InvalidArgumentError(
                            "ERR Protocol error: invalid bulk length"));
  }
  static void FreeObject(void* object) { delete static_cast<Request*>(object); }
};

namespace {
redisReplyObjectFunctions kFunctions = {
    ReaderCallbacks::CreateString, ReaderCallbacks::CreateArrayInt,
    ReaderCallbacks::CreateInteger, ReaderCallbacks::CreateNil,
    ReaderCallbacks::FreeObject};
}  // namespace

RespReader::RespReader(const RespLimits& limits) : limits_(limits) {
  reader_ = redisReaderCreateWithFunctions(&kFunctions);
  if (reader_ != nullptr) reader_->privdata = this;
}

RespReader::~RespReader() {
  if (reader_ != nullptr) redisReaderFree(reader_);
}

size_t RespReader::buffered() const {
  return reader_ == nullptr ? 0 : reader_->len - reader_->pos;
}

absl::Status RespReader::Feed(const char* data, size_t size) {
  if (!failed_.ok()) return failed_;
  if (reader_ == nullptr) {
    return failed_ = absl::ResourceExhaustedError("ERR out of memory");
  }
  if (buffered() + size > limits_.max_buffered_bytes) {
    return failed_ = absl::ResourceExhaustedError(absl::StrCat(
               "ERR Protocol error: more than ", limits_.max_buffered_bytes,
               " bytes of requests waiting on this connection"));
  }
  if (redisReaderFeed(reader_, data, size) != REDIS_OK) {
    return failed_ = absl::ResourceExhaustedError("ERR out of memory");
  }
  return absl::OkStatus();
}

bool RespReader::AtRequestStart() const {
  // hiredis's task stack: empty, or its root task not yet typed (a read
  // that found no byte leaves it so).
  return reader_ != nullptr &&
         (reader_->ridx == -1 ||
          (reader_->ridx == 0 && reader_->rstack[0].type < 0));
}

absl::StatusOr<std::optional<RespCommand>> RespReader::NextInline() {
  const absl::string_view rest(reader_->buf + reader_->pos,
                               reader_->len - reader_->pos);
  const size_t newline = rest.find('\n');
  if (newline == absl::string_view::npos) {
    if (rest.size() > kMaxInlineBytes) {
      return failed_ = absl::ResourceExhaustedError(
                 "ERR Protocol error: too big inline request");
    }
    return std::nullopt;
  }
  if (newline > kMaxInlineBytes) {
    return failed_ = absl::ResourceExhaustedError(
               "ERR Protocol error: too big inline request");
  }
  absl::string_view line = rest.substr(0, newline);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_of("\"'") != absl::string_view::npos) {
    // Redis unquotes (sdssplitargs); that is a parser of its own, which
    // this reader does not have.
    return failed_ = absl::InvalidArgumentError(
               "ERR Protocol error: quotes in an inline command are not "
               "supported by gputune; send the command as RESP (redis-cli "
               "does)");
  }
  RespCommand args =
      absl::StrSplit(line, absl::ByAnyChar(" \t\r\v\f"), absl::SkipEmpty());
  reader_->pos += newline + 1;
  if (reader_->pos >= 1024) {  // as hiredis discards what it has read
    sdsrange(reader_->buf, static_cast<int>(reader_->pos), -1);
    reader_->pos = 0;
    reader_->len = sdslen(reader_->buf);
  }
  // The bounds of a multibulk, with its errors.
  if (args.size() > limits_.max_arguments) {
    return failed_ = absl::ResourceExhaustedError(
               "ERR Protocol error: invalid multibulk length");
  }
  for (const std::string& arg : args) {
    if (arg.size() > limits_.max_bulk_bytes) {
      return failed_ = absl::ResourceExhaustedError(
                 "ERR Protocol error: invalid bulk length");
    }
  }
  if (line.size() > limits_.max_command_bytes) {
    return failed_ = absl::ResourceExhaustedError(
               absl::StrCat("ERR Protocol error: command larger than ",
                            limits_.max_command_bytes, " bytes"));
  }
  return std::optional<RespCommand>(std::move(args));  // empty: a blank line
}

absl::StatusOr<std::optional<RespCommand>> RespReader::Next() {
  while (true) {
    if (!failed_.ok()) return failed_;
    if (AtRequestStart() && reader_->pos < reader_->len &&
        reader_->buf[reader_->pos] != '*') {
      absl::StatusOr<std::optional<RespCommand>> line = NextInline();
      if (!line.ok() || !line->has_value()) return line;
      if ((*line)->empty()) continue;  // Redis skips blank lines
      return line;
    }
    void* object = nullptr;
    if (redisReaderGetReply(reader_, &object) != REDIS_OK) {
      if (!refused_.ok()) {
        failed_ = refused_;
      } else {
        failed_ = absl::InvalidArgumentError(
            absl::StrCat("ERR Protocol error: ", reader_->errstr));
      }
      return failed_;
    }
    if (object == nullptr) return std::nullopt;
    std::unique_ptr<Request> request(static_cast<Request*>(object));
    if (request->skip) continue;
    return std::optional<RespCommand>(std::move(request->args));
  }
}

}  // namespace gputune::redis
