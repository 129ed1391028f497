// ChangeFeed: the daemon's sequence-numbered feed of entry changes, and the
// SubscribeChanges streams that carry it to client processes (one stream per
// process; each memo drops or replaces what changed at once, and its ttl
// stays the safety net).
//
// The arbiter publishes every change of its index (a key's entry recorded,
// imported or deleted) under its own lock, so sequence numbers follow the
// order in which the index changed; Publish only appends to a ring and never
// waits on a subscriber. After unlocking, the arbiter calls Flush, which
// starts a write on every idle subscriber with something new (gRPC callback
// writes: nothing here blocks, whatever a subscriber does). Each subscriber
// has one write in flight at most and a cursor into the ring; one that falls
// more than `max_lag` changes behind - its changes dropped out of the ring
// before it took them - is cut off with RESOURCE_EXHAUSTED and, when it
// resumes, told to reset.
//
// Epoch: a random nonzero id per start. Sequence numbers begin at 1 in each
// epoch, so a subscriber that names another epoch (the daemon restarted and
// lost the changes in between) is told to reset.
//
// Thread-safe.
#ifndef GPUTUNE_DAEMON_CHANGE_FEED_H_
#define GPUTUNE_DAEMON_CHANGE_FEED_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gputune/v1/tune.grpc.pb.h"

namespace gputune {

struct ChangeFeedOptions {
  // Changes kept for resuming subscribers, and how far one may fall behind
  // before it is cut off.
  size_t max_lag = 4096;
  // Bytes of entries the kept changes may hold; the oldest go first (as if
  // max_lag were smaller) when they would hold more.
  size_t max_kept_bytes = size_t{64} << 20;
  // Changes and bytes of entries in one message.
  size_t max_batch = 512;
  size_t max_batch_bytes = size_t{1} << 20;
  // Streams at once; more are refused with RESOURCE_EXHAUSTED.
  size_t max_subscribers = 4096;
};

class ChangeFeed {
 public:
  explicit ChangeFeed(const ChangeFeedOptions& options);
  ~ChangeFeed();
  ChangeFeed(const ChangeFeed&) = delete;
  ChangeFeed& operator=(const ChangeFeed&) = delete;

  // This start's epoch (random, nonzero).
  uint64_t epoch() const { return epoch_; }

  // Numbers and keeps a change: `entry` is the key's new entry (RECORDED) or
  // the deleted one (DELETED), as the index keeps it; `replaced_candidate_set`
  // the candidate set of the entry a RECORDED change replaced (empty: none).
  // `stale`: the entry's fingerprint is not this daemon's. Called under the
  // arbiter's lock; call Flush after releasing it.
  void Publish(v1::ChangeKind kind, std::shared_ptr<const std::string> entry,
               std::string replaced_candidate_set, bool stale)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Starts writes to subscribers with unsent changes and finishes those cut
  // off. Never blocks on a subscriber.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  // The reactor of one SubscribeChanges stream; null with *refused set
  // (UNAVAILABLE after Close, RESOURCE_EXHAUSTED at max_subscribers).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(
      grpc::CallbackServerContext* ctx,
      const v1::SubscribeChangesRequest& request, absl::Status* refused)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Finishes every stream with UNAVAILABLE (the daemon is stopping) and
  // refuses new ones.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t head_seq = 0;   // the newest change's number
    size_t subscribers = 0;  // streams open
    uint64_t cut_off = 0;    // subscribers cut off for falling behind
  };
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Reactor;
  struct Kept {
    uint64_t seq;
    v1::ChangeKind kind;
    std::shared_ptr<const std::string> entry;
    std::string replaced_candidate_set;
    bool stale;
  };
  // What one message carries, taken under mu_ and serialized outside it.
  struct Batch {
    bool reset = false;
    uint64_t head_seq = 0;
    std::vector<Kept> changes;
  };
  struct Subscriber;
  // The next message for `sub`, when it is idle and has one (a first
  // message, or unsent changes); marks it writing.
  bool TakeBatchLocked(Subscriber* sub, Batch* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `sub` with `status` (once) and drops it from the feed.
  void EndLocked(Subscriber* sub, grpc::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(Subscriber* sub) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const ChangeFeedOptions options_;
  const uint64_t epoch_;

  mutable absl::Mutex mu_;
  std::deque<Kept> kept_ ABSL_GUARDED_BY(mu_);
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t head_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<Subscriber>> subscribers_ ABSL_GUARDED_BY(mu_);
  // Ended by EndLocked, for Flush to finish.
  std::vector<std::shared_ptr<Subscriber>> ending_ ABSL_GUARDED_BY(mu_);
  uint64_t cut_off_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_CHANGE_FEED_H_
