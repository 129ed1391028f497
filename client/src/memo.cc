#include "client/src/memo.h"

#include <time.h>

#include <limits>

namespace gputune::client_internal {
namespace {

size_t ShardCapacity(size_t capacity, size_t shards) {
  if (capacity == 0) return 0;
  return (capacity + shards - 1) / shards;
}

}  // namespace

Memo::Memo(size_t capacity, absl::Duration ttl, NowNs now_ns)
    : shard_capacity_(ShardCapacity(capacity, kShards)),
      ttl_ns_(ttl == absl::InfiniteDuration()
                  ? std::numeric_limits<int64_t>::max()
                  : absl::ToInt64Nanoseconds(ttl)),
      now_ns_(now_ns) {}

int64_t Memo::CoarseNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t Memo::DueAt() const {
  return ttl_ns_ == std::numeric_limits<int64_t>::max() ? ttl_ns_
                                                        : now_ns_() + ttl_ns_;
}

const Memo::Shard& Memo::ShardFor(size_t hash) const {
  // The top bits: the maps inside a shard use the low ones.
  return shards_[(static_cast<uint64_t>(hash) >> 60) % kShards];
}

Memo::Shard& Memo::ShardFor(size_t hash) {
  return const_cast<Shard&>(static_cast<const Memo*>(this)->ShardFor(hash));
}

std::shared_ptr<const LookupCell> Memo::Find(const v1::Key& key,
                                             bool* due) const {
  *due = false;
  if (shard_capacity_ == 0) return nullptr;
  const KeyView view = KeyView::Of(key);
  const size_t hash = HashKey(view);
  const Shard& shard = ShardFor(hash);
  SharedReaderLock lock(&shard.mu);
  auto it = shard.map.find(view, hash);
  if (it == shard.map.end()) return nullptr;
  if (ttl_ns_ != std::numeric_limits<int64_t>::max()) {
    *due = now_ns_() >= it->second.due_at_ns;
  }
  return it->second.status;
}

void Memo::SetLocked(Shard& shard, Map::iterator it,
                     const std::shared_ptr<const LookupCell>& status) {
  // The map's key points into the slot's cell: a new cell replaces both.
  if (it != shard.map.end()) {
    shard.map.erase(it);
  } else if (shard.map.size() >= shard_capacity_) {
    shard.map.erase(shard.map.begin());
  }
  shard.map.emplace(&status->memo_key(), Slot{status, DueAt()});
}

void Memo::Put(const std::shared_ptr<const LookupCell>& status,
               uint64_t since) {
  if (shard_capacity_ == 0 || status == nullptr ||
      status->state() != v1::KEY_STATE_HIT) {
    return;
  }
  const KeyView view = status->memo_key().View();
  const size_t hash = HashKey(view);
  Shard& shard = ShardFor(hash);
  SharedWriterLock lock(&shard.mu);
  if (since != kAnyGeneration && generation_.load() != since) return;
  SetLocked(shard, shard.map.find(view, hash), status);
}

void Memo::Erase(const v1::Key& key) {
  if (shard_capacity_ == 0) return;
  const KeyView view = KeyView::Of(key);
  const size_t hash = HashKey(view);
  Shard& shard = ShardFor(hash);
  SharedWriterLock lock(&shard.mu);
  auto it = shard.map.find(view, hash);
  if (it != shard.map.end()) shard.map.erase(it);
}

void Memo::Clear() {
  for (Shard& shard : shards_) {
    SharedWriterLock lock(&shard.mu);
    shard.map.clear();
  }
}

void Memo::Invalidate(const v1::Key& key) {
  const KeyView view = KeyView::Of(key);
  const size_t hash = HashKey(view);
  Shard& shard = ShardFor(hash);
  SharedWriterLock lock(&shard.mu);
  generation_.fetch_add(1);
  auto it = shard.map.find(view, hash);
  if (it != shard.map.end()) shard.map.erase(it);
}

bool Memo::Replace(const std::shared_ptr<const LookupCell>& status) {
  const KeyView view = status->memo_key().View();
  const size_t hash = HashKey(view);
  Shard& shard = ShardFor(hash);
  SharedWriterLock lock(&shard.mu);
  generation_.fetch_add(1);
  auto it = shard.map.find(view, hash);
  if (it == shard.map.end()) return false;
  SetLocked(shard, it, status);
  return true;
}

void Memo::InvalidateAll() {
  generation_.fetch_add(1);
  Clear();
}

size_t Memo::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    SharedReaderLock lock(&shard.mu);
    n += shard.map.size();
  }
  return n;
}

}  // namespace gputune::client_internal
