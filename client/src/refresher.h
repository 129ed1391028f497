// Refresher: the client's background lookups. TryLookup queues keys the memo
// does not have, and Lookup queues memoised entries older than memo_ttl; one
// thread (started on first use) sends what is queued as BatchLookups and
// hands the answers back, so the caller never waits for I/O.
//
// A key is queued at most once per `interval`: a MISS is not memoised, so
// this bounds what a hot loop of TryLookups on a missing key costs the daemon.
//
// Thread-safe.
#ifndef GPUTUNE_CLIENT_SRC_REFRESHER_H_
#define GPUTUNE_CLIENT_SRC_REFRESHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/src/memo_key.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::client_internal {

class Refresher {
 public:
  // Looks the keys up (one BatchLookup) and applies the answers; runs on the
  // refresher's thread.
  using RefreshFn = std::function<void(const std::vector<v1::Key>&)>;

  static constexpr size_t kMaxBatch = 4096;

  Refresher(RefreshFn refresh, absl::Duration interval);
  // Stops the thread (after a batch in flight); queued keys are dropped.
  ~Refresher();

  // Queues a valid key, unless it was queued within `interval`.
  void Request(const v1::Key& key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const RefreshFn refresh_;
  const absl::Duration interval_;

  absl::Mutex mu_;
  std::vector<v1::Key> queue_ ABSL_GUARDED_BY(mu_);
  // When each key was last queued (pruned as it grows).
  absl::flat_hash_map<MemoKey, absl::Time, MemoKeyHash, MemoKeyEq> queued_at_
      ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Request, under mu_
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_REFRESHER_H_
