#include "daemon/revalidator.h"

#include <utility>

#include "proto/key_format.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

// How often the idle device is checked for a key to re-tune.
constexpr absl::Duration kPoll = absl::Milliseconds(100);

}  // namespace

Revalidator::Revalidator(Arbiter* arbiter, JobQueue* jobs, const Clock* clock,
                         absl::Duration idle)
    : arbiter_(arbiter), jobs_(jobs), clock_(clock), idle_(idle) {
  thread_ = std::thread([this] { Loop(); });
}

Revalidator::~Revalidator() { Stop(); }

void Revalidator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

Revalidator::Stats Revalidator::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool Revalidator::Sleep() {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), kPoll);
  return !stopping_;
}

void Revalidator::Loop() {
  // The last time the queue was seen busy (or the device unusable). Locks
  // are never held across calls into the job queue, whose answers may come
  // on this thread.
  absl::Time busy_at = clock_->Now();
  while (Sleep()) {
    const absl::Time now = clock_->Now();
    const JobQueue::Stats jobs = jobs_->GetStats();
    if (jobs.running || jobs.queue_depth > 0 || !jobs_->ready()) busy_at = now;
    if (now - busy_at < idle_) continue;
    std::optional<Arbiter::Revalidation> next = arbiter_->NextRevalidation();
    if (!next) continue;
    const std::string key_text = KeyText(next->key);
    spdlog::info(
        "re-tuning stale-but-usable {} in the background ({} lookups since it "
        "turned stale)",
        key_text, next->lookups);
    // Answered on this thread (refusals) or the device worker's; JobQueue
    // answers every waiter, also when it stops.
    auto answer = std::make_shared<Answer>();
    jobs_->TuneDense(next->key, /*wait=*/true,
                     [answer](absl::StatusOr<v1::KeyStatus> result) {
                       absl::MutexLock lock(&answer->mu);
                       answer->result = std::move(result);
                     });
    absl::StatusOr<v1::KeyStatus> result;
    {
      absl::MutexLock lock(&answer->mu);
      answer->mu.Await(absl::Condition(
          +[](std::optional<absl::StatusOr<v1::KeyStatus>>* r) {
            return r->has_value();
          },
          &answer->result));
      result = std::move(*answer->result);
    }
    const bool ok = result.ok() && result->state() == v1::KEY_STATE_HIT;
    {
      absl::MutexLock lock(&mu_);
      ++(ok ? stats_.revalidated : stats_.failed);
    }
    if (ok) {
      spdlog::info("re-tuned {}: the new entry replaces the stale one",
                   key_text);
    } else {
      spdlog::warn(
          "background re-tune of {} failed ({}): it stays stale-but-usable "
          "until a client re-tunes it or gputuned restarts",
          key_text,
          result.ok() ? std::string(KeyStateName(result->state()))
                      : std::string(result.status().message()));
    }
    // Another key may start at once while the queue stays empty: client
    // jobs are looked for before each one.
  }
}

}  // namespace gputune
