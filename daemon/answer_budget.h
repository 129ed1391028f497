// AnswerBudget: bounds the memory of unary answers that the daemon has
// serialized and its askers have not yet taken.
//
// gRPC 1.51's ResourceQuota accounts a call's arena and the transport's read
// buffers, not the slices of a message being sent. An asker that does not
// read its answer (it grants no HTTP/2 flow-control window beyond the first
// 64 KiB) leaves that answer in the daemon, whole, until the call ends: 24
// unread BatchLookups of 45 MiB each took gputuned from 117 to 1,304 MiB of
// RSS with a 512 MiB quota (tests/integration/hardening_test.cc, "askers
// that never read large answers..."). So every unary answer of at least
// kCountedBytes reserves its serialized size here before gRPC gets it, and
// gives it back when the call is done (sent, cancelled, or its connection
// closed); an answer that does not fit is not sent, and the call ends
// RESOURCE_EXHAUSTED saying so. Smaller answers are not counted: gRPC writes
// them within the window every HTTP/2 peer starts with.
//
//   AnswerBudget budget(256 << 20);
//   size_t reserved = 0;
//   if (!budget.Reserve(estimate, &reserved)) ... RESOURCE_EXHAUSTED
//   ... build and serialize the answer ...
//   grpc::Status s = budget.Admit(&serialized, &reserved);  // may clear it
//   ... when the call is done: budget.Release(reserved);
#ifndef GPUTUNE_DAEMON_ANSWER_BUDGET_H_
#define GPUTUNE_DAEMON_ANSWER_BUDGET_H_

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace gputune {

class AnswerBudget {
 public:
  // Answers smaller than this are not counted.
  static constexpr size_t kCountedBytes = 64 * 1024;

  explicit AnswerBudget(size_t limit) : limit_(limit) {}
  AnswerBudget(const AnswerBudget&) = delete;
  AnswerBudget& operator=(const AnswerBudget&) = delete;

  size_t limit() const { return limit_; }
  // Bytes of answers in flight now.
  size_t used() const { return used_.load(std::memory_order_relaxed); }

  // Reserves room for an answer of `bytes` (or an estimate of it, before
  // it is built, so that one that cannot fit is never built): false when it
  // does not fit. *reserved is what was reserved (0 for an answer too small
  // to count).
  bool Reserve(size_t bytes, size_t* reserved) {
    *reserved = 0;
    if (bytes < kCountedBytes) return true;
    if (!Add(bytes)) return false;
    *reserved = bytes;
    return true;
  }

  // For the serialized answer `answer`, *reserved already held for it (0 or
  // from Reserve): OK with *reserved now its real size (0 when it is not
  // counted), or RESOURCE_EXHAUSTED with `answer` cleared and the
  // reservation given back when it does not fit.
  grpc::Status Admit(grpc::ByteBuffer* answer, size_t* reserved) {
    const size_t length = answer->Length();
    const size_t bytes = length < kCountedBytes ? 0 : length;
    if (bytes <= *reserved) {
      Release(*reserved - bytes);
    } else if (!Add(bytes - *reserved)) {
      Release(*reserved);
      *reserved = 0;
      answer->Clear();
      return Exhausted(length);
    }
    *reserved = bytes;
    return grpc::Status::OK;
  }

  // Gives back what Reserve or Admit reserved.
  void Release(size_t reserved) {
    if (reserved > 0) used_.fetch_sub(reserved, std::memory_order_relaxed);
  }

  // The answer to a call whose answer of `bytes` does not fit now.
  grpc::Status Exhausted(size_t bytes) const {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the answer (", bytes >> 10,
                     " KiB) does not fit now: answers not yet read by their "
                     "askers hold ",
                     used() >> 20, " of the daemon's ", limit_ >> 20,
                     " MiB for them; retry later, or ask for less at once"));
  }

 private:
  bool Add(size_t bytes) {
    size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (used + bytes > limit_) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes,
                                          std::memory_order_relaxed));
    return true;
  }

  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_ANSWER_BUDGET_H_
