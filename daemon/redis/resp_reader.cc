#include "daemon/redis/resp_reader.h"

#include <hiredis/read.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

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

absl::StatusOr<std::optional<RespCommand>> RespReader::Next() {
  while (true) {
    if (!failed_.ok()) return failed_;
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
