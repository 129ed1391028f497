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

Memo::Memo(size_t capacity, absl::Duration ttl)
    : shard_capacity_(ShardCapacity(capacity, kShards)),
      ttl_ns_(ttl == absl::InfiniteDuration()
                  ? std::numeric_limits<int64_t>::max()
                  : absl::ToInt64Nanoseconds(ttl)) {}

int64_t Memo::CoarseNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t Memo::DueAt() const {
  return ttl_ns_ == std::numeric_limits<int64_t>::max()
             ? ttl_ns_
             : CoarseNowNs() + ttl_ns_;
}

const Memo::Shard& Memo::ShardFor(const KeyView& v) const {
  // Numbers only: cheaper than a second full hash, and keys of one role
  // usually differ in their shape.
  const uint32_t mix = v.m * 0x9E3779B1u ^ v.k * 0x85EBCA77u ^
                       v.n * 0xC2B2AE3Du ^
                       static_cast<uint32_t>(v.name.size()) ^
                       static_cast<uint32_t>(v.params.size()) * 0x27D4EB2Fu;
  return shards_[(mix >> 16) % kShards];
}

Memo::Shard& Memo::ShardFor(const KeyView& v) {
  return const_cast<Shard&>(static_cast<const Memo*>(this)->ShardFor(v));
}

std::shared_ptr<const LookupCell> Memo::Find(const v1::Key& key,
                                             bool* due) const {
  *due = false;
  if (shard_capacity_ == 0) return nullptr;
  const KeyView view = KeyView::Of(key);
  const Shard& shard = ShardFor(view);
  SharedReaderLock lock(&shard.mu);
  auto it = shard.map.find(view);
  if (it == shard.map.end()) return nullptr;
  if (ttl_ns_ != std::numeric_limits<int64_t>::max()) {
    *due = CoarseNowNs() >= it->second.due_at_ns;
  }
  return it->second.status;
}

void Memo::Put(const v1::Key& key,
               const std::shared_ptr<const LookupCell>& status,
               uint64_t since) {
  if (shard_capacity_ == 0 || status == nullptr ||
      status->state() != v1::KEY_STATE_HIT) {
    return;
  }
  const KeyView view = KeyView::Of(key);
  const int64_t due_at = DueAt();
  Shard& shard = ShardFor(view);
  SharedWriterLock lock(&shard.mu);
  if (since != kAnyGeneration && generation_.load() != since) return;
  auto it = shard.map.find(view);
  if (it != shard.map.end()) {
    it->second = Slot{status, due_at};
    return;
  }
  if (shard.map.size() >= shard_capacity_) shard.map.erase(shard.map.begin());
  shard.map.emplace(MemoKey(view), Slot{status, due_at});
}

void Memo::Erase(const v1::Key& key) {
  if (shard_capacity_ == 0) return;
  const KeyView view = KeyView::Of(key);
  Shard& shard = ShardFor(view);
  SharedWriterLock lock(&shard.mu);
  auto it = shard.map.find(view);
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
  Shard& shard = ShardFor(view);
  SharedWriterLock lock(&shard.mu);
  generation_.fetch_add(1);
  auto it = shard.map.find(view);
  if (it != shard.map.end()) shard.map.erase(it);
}

bool Memo::Replace(const v1::Key& key,
                   const std::shared_ptr<const LookupCell>& status) {
  const KeyView view = KeyView::Of(key);
  Shard& shard = ShardFor(view);
  SharedWriterLock lock(&shard.mu);
  generation_.fetch_add(1);
  auto it = shard.map.find(view);
  if (it == shard.map.end()) return false;
  it->second.status = status;
  it->second.due_at_ns = DueAt();
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
