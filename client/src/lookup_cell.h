// LookupCell: one key's status as the client holds it (in the memo and in
// LookupResults). A Lookup or BatchLookup answer carries each entry as the
// bytes the daemon stores (LookupStatus.entry); the cell parses them, with
// generated code, once, under absl::call_once: a Lookup's on the first
// read, a BatchLookup's before the call returns (ParseAll, on several
// threads for many keys), and a background refresh's never until read.
//
// The cells of one call share the protobuf arena its messages were parsed
// on (request, answer, and each status when it is read): a 10,000-key
// Preload allocates a few arena blocks, not some 150,000 strings. The arena
// lives as long as any of its cells.
//
// A cell also holds its key as the memo compares it (MemoKey): the memo's
// map holds only a pointer to it, so a memo hit reads one small slot and
// then this cell, whose reference count it takes anyway - one cache miss
// fewer than a map that holds the keys.
#ifndef GPUTUNE_CLIENT_SRC_LOOKUP_CELL_H_
#define GPUTUNE_CLIENT_SRC_LOOKUP_CELL_H_

#include <atomic>
#include <memory>

#include "absl/base/call_once.h"
#include "absl/types/span.h"
#include "client/src/memo_key.h"
#include "google/protobuf/arena.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::client_internal {

class LookupCell {
 public:
  // `key`'s status, parsed already (TuneDense, Watch, a Claim's HIT).
  LookupCell(const v1::Key& key, v1::KeyStatus status);
  // The daemon's `answer` for `key`; both live on `arena`.
  LookupCell(std::shared_ptr<google::protobuf::Arena> arena, const v1::Key* key,
             const v1::LookupStatus* answer);

  LookupCell(const LookupCell&) = delete;
  LookupCell& operator=(const LookupCell&) = delete;

  v1::KeyState state() const { return state_; }
  const MemoKey& memo_key() const { return memo_key_; }
  // KeyStatus.stale_usable, without parsing.
  bool stale_usable() const { return stale_usable_; }
  // The status with the entry parsed, on the first call. An entry whose
  // bytes do not parse (gputuned sends only entries it has checked) reads
  // as an empty Entry.
  const v1::KeyStatus& status() const;
  // status().entry(), one pointer nearer: reading a memoised entry is the
  // hot path.
  const v1::Entry& entry() const {
    const v1::Entry* entry = entry_.load(std::memory_order_acquire);
    if (entry == nullptr) {
      Parse();
      entry = entry_.load(std::memory_order_acquire);
    }
    return *entry;
  }
  // Parses the status now, if it is not parsed yet (ParseAll).
  void ParseNow() const { Parse(); }
  // Whether the status is parsed (it is read without parsing).
  bool parsed() const {
    return entry_.load(std::memory_order_acquire) != nullptr;
  }

 private:
  // What a memo hit reads first, together.
  const v1::KeyState state_;
  const bool stale_usable_;
  // &status_->entry() once parsed (release-stored after status_).
  mutable std::atomic<const v1::Entry*> entry_{nullptr};
  const MemoKey memo_key_;

  const std::shared_ptr<google::protobuf::Arena> arena_;
  // What the daemon answered; null for a status parsed already.
  const v1::Key* const key_ = nullptr;
  const v1::LookupStatus* const answer_ = nullptr;
  void Parse() const;
  // Publishes status_'s entry (entry_).
  void Publish() const;

  mutable absl::once_flag parsed_;
  // On arena_; set by the constructor or under parsed_.
  mutable v1::KeyStatus* status_ = nullptr;
};

// Parses every cell's status before it returns, spread over up to
// kMaxParseThreads threads (this one among them) for kCellsPerParseThread
// cells or more each: a BatchLookup's caller gets entries that read at memo
// speed, and on two cores 10,000 keys are readable in 11.0-12.3 ms against
// 13.9-14.2 ms when each parsed on its first read (docs/performance.md). Where
// no thread can be started, this thread parses them all.
inline constexpr size_t kMaxParseThreads = 4;
inline constexpr size_t kCellsPerParseThread = 2048;
void ParseAll(absl::Span<const LookupCell* const> cells);

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_LOOKUP_CELL_H_
