#include "client/src/refresher.h"

#include <algorithm>

namespace gputune::client_internal {
namespace {

// Above this many remembered keys, forget those queued long enough ago.
constexpr size_t kMaxRemembered = 1 << 16;

}  // namespace

Refresher::Refresher(RefreshFn refresh, absl::Duration interval)
    : refresh_(std::move(refresh)), interval_(interval) {}

Refresher::~Refresher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Refresher::Request(const v1::Key& key) {
  const KeyView view = KeyView::Of(key);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  auto it = queued_at_.find(view);
  if (it != queued_at_.end()) {
    if (now - it->second < interval_) return;
    it->second = now;
  } else {
    if (queued_at_.size() >= kMaxRemembered) {
      absl::erase_if(queued_at_, [&](const auto& kv) {
        return now - kv.second >= interval_;
      });
      if (queued_at_.size() >= kMaxRemembered) queued_at_.clear();
    }
    queued_at_.emplace(MemoKey(view), now);
  }
  queue_.push_back(key);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Refresher::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !queue_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (stop_) return;
    std::vector<v1::Key> batch;
    if (queue_.size() <= kMaxBatch) {
      batch.swap(queue_);
    } else {
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.begin() + kMaxBatch));
      queue_.erase(queue_.begin(), queue_.begin() + kMaxBatch);
    }
    mu_.Unlock();
    refresh_(batch);
    mu_.Lock();
  }
}

}  // namespace gputune::client_internal
