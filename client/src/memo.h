// Memo: the client's in-process cache of HIT statuses, the hot path of
// Client::Lookup. A hit costs a hash, a shared lock and a reference count:
// no allocation, no I/O.
//
// Entries for a key do not change unless the key is deleted or re-tuned, so a
// HIT stays valid; after `ttl` it is reported as due for a background
// re-check (and still served).
//
// Thread-safe; the map is split into shards so that threads looking up
// different keys rarely share a lock. The shards use std::shared_mutex, not
// absl::Mutex: an uncontended reader lock and unlock of absl's takes three
// to four times as long (it also keeps deadlock-detection bookkeeping in
// Debian's build), and a memo hit's whole budget is 100 ns
// (docs/design.md, "Targets"). SharedMutex wraps it with the annotations
// clang's -Wthread-safety checks.
#ifndef GPUTUNE_CLIENT_SRC_MEMO_H_
#define GPUTUNE_CLIENT_SRC_MEMO_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "client/src/lookup_cell.h"
#include "client/src/memo_key.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::client_internal {

// std::shared_mutex, annotated for clang's thread-safety analysis.
class ABSL_LOCKABLE SharedMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE SharedReaderLock {
 public:
  explicit SharedReaderLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->ReaderLock();
  }
  ~SharedReaderLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }

 private:
  SharedMutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE SharedWriterLock {
 public:
  explicit SharedWriterLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~SharedWriterLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  SharedMutex* const mu_;
};

class Memo {
 public:
  // A monotonic clock in nanoseconds.
  using NowNs = int64_t (*)();
  // capacity 0 disables the memo (Find finds nothing, Put keeps nothing).
  // `now_ns`: the clock the ttl is measured on (tests pass their own).
  Memo(size_t capacity, absl::Duration ttl, NowNs now_ns = &CoarseNowNs);

  // The memoised status of `key`, or null. `*due` is set when the entry is
  // older than ttl (the caller should re-check it in the background).
  std::shared_ptr<const LookupCell> Find(const v1::Key& key, bool* due) const;
  // Memoises a HIT under its cell's key (anything else is ignored),
  // replacing what was there. With `since` (a generation() read before the
  // answer was asked for): not when a change was applied since, which may be
  // newer than the answer.
  static constexpr uint64_t kAnyGeneration = ~uint64_t{0};
  void Put(const std::shared_ptr<const LookupCell>& status,
           uint64_t since = kAnyGeneration);
  void Erase(const v1::Key& key);
  void Clear();

  // Changes the daemon announced (client/src/change_stream.h). Each counts
  // as a new generation, so that an answer asked for before it is not
  // memoised after it.
  uint64_t generation() const { return generation_.load(); }
  // Drops the key's entry.
  void Invalidate(const v1::Key& key);
  // Replaces the entry of `status`'s key with `status` (a HIT) if the memo
  // holds the key; returns whether it did.
  bool Replace(const std::shared_ptr<const LookupCell>& status);
  // Drops everything.
  void InvalidateAll();
  size_t size() const;
  bool enabled() const { return shard_capacity_ > 0; }

 private:
  static constexpr size_t kShards = 16;
  struct Slot {
    std::shared_ptr<const LookupCell> status;
    int64_t due_at_ns;  // now_ns_() after which the entry is re-checked
  };
  // Keyed by the cell's own MemoKey (status->memo_key()): 32-byte slots.
  struct Shard {
    mutable SharedMutex mu;
    absl::flat_hash_map<const MemoKey*, Slot, MemoKeyHash, MemoKeyEq> map
        ABSL_GUARDED_BY(mu);
  };

  // A monotonic clock at a few milliseconds' resolution, for the ttl check
  // on the hot path (CLOCK_MONOTONIC_COARSE: a few ns through the vDSO).
  static int64_t CoarseNowNs();
  // When an entry put now is due.
  int64_t DueAt() const;
  // The shard of a key with HashKey() `hash`.
  const Shard& ShardFor(size_t hash) const;
  Shard& ShardFor(size_t hash);
  // Puts `status` in `shard`'s map under its cell's key, in place of what
  // the map holds for that key (`it`, or end()).
  using Map = absl::flat_hash_map<const MemoKey*, Slot, MemoKeyHash, MemoKeyEq>;
  void SetLocked(Shard& shard, Map::iterator it,
                 const std::shared_ptr<const LookupCell>& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Constant after construction.
  const size_t shard_capacity_;
  const int64_t ttl_ns_;  // INT64_MAX: never due
  const NowNs now_ns_;
  std::array<Shard, kShards> shards_;
  // Bumped under the shard lock of the key changed (all of them: first).
  std::atomic<uint64_t> generation_{0};
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_MEMO_H_
