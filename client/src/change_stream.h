// ChangeStream: the client's one SubscribeChanges stream (daemon/change_feed.h
// is the other end). A thread reads the daemon's change feed and applies it
// to the memo at once: a deleted or stale key is dropped (its next Lookup
// asks the daemon), a re-tuned one that the memo holds gets the new entry.
//
// Sequence numbers make a reconnect resume where the stream stopped, without
// loss or duplication; when the daemon cannot resume it (it restarted: a new
// epoch; or the changes were no longer kept) it says reset, and the memo is
// cleared - except on the client's first stream, which finds the memo as
// new as itself (a change between a Lookup just before it and its start is
// left to memo_ttl). While there is no stream (the daemon is down, or cut this
// client off for falling behind) the memo's ttl is what re-checks entries; the
// thread reconnects with backoff.
//
// The stream is not a call of the circuit breaker's: it never opens or
// closes it, and waits while it is open.
#ifndef GPUTUNE_CLIENT_SRC_CHANGE_STREAM_H_
#define GPUTUNE_CLIENT_SRC_CHANGE_STREAM_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/src/memo.h"
#include "client/src/rpc.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::client_internal {

class ChangeStream {
 public:
  // Reconnects after min_backoff, doubling up to max_backoff while streams
  // fail; a stream that delivered a message starts the backoff over.
  static constexpr absl::Duration kMinBackoff = absl::Milliseconds(50);
  static constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

  // `rpc` and `memo` must outlive the stream. Starts the thread.
  ChangeStream(Rpc* rpc, Memo* memo);
  // Cancels the stream and joins the thread.
  ~ChangeStream();

  // Applies one message of the feed to `memo`; `epoch` and `last_seq` are
  // where the subscriber stands, updated. (The thread's work; a function for
  // the unit tests.)
  static void Apply(const v1::SubscribeChangesResponse& message, Memo* memo,
                    uint64_t* epoch, uint64_t* last_seq);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  Rpc* const rpc_;
  Memo* const memo_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;  // the stream's
  std::thread thread_;
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_CHANGE_STREAM_H_
