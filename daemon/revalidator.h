// Revalidator: the background half of stale-while-revalidate. After a
// driver, CUDA, cuBLASLt or gputune upgrade the cache's entries are
// stale-but-usable (Arbiter::Found::stale_usable): clients keep running
// them, and this thread re-tunes their dense_bf16 keys on the daemon's
// device while it has nothing else to do.
//
// Rules (docs/architecture.md, "Stale while revalidate"):
// - only when the benchmark queue has been empty, with no job running, for
//   `idle` (client TuneDense calls always come first: at most the one
//   re-tune running delays them);
// - one key at a time, through JobQueue::TuneDense (so single flight,
//   claims, the fleet and Record work as for any TuneDense: the new entry
//   replaces the old one and wakes its watchers);
// - the most looked-up key first (Arbiter::NextRevalidation); each key is
//   tried once per daemon run, so a key that cannot be tuned stays
//   stale-but-usable instead of being retried forever;
// - custom keys are never re-tuned here (the daemon cannot run them): they
//   stay stale-but-usable until a client claims and records them.
//
// Thread-safe. Stop() after JobQueue::Stop and before the queue and the
// arbiter go away.
#ifndef GPUTUNE_DAEMON_REVALIDATOR_H_
#define GPUTUNE_DAEMON_REVALIDATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "daemon/clock.h"
#include "daemon/job_queue.h"

namespace gputune {

class Revalidator {
 public:
  // Starts the thread. `arbiter`, `jobs` and `clock` must outlive Stop().
  Revalidator(Arbiter* arbiter, JobQueue* jobs, const Clock* clock,
              absl::Duration idle);
  // Calls Stop().
  ~Revalidator();

  // Ends the thread once the re-tune in flight (if any) is answered: call
  // it after JobQueue::Stop, which answers it at once. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t revalidated = 0;  // re-tunes that recorded the new entry
    uint64_t failed = 0;       // re-tunes that failed
  };
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One re-tune's answer, shared with JobQueue's callback.
  struct Answer {
    absl::Mutex mu;
    std::optional<absl::StatusOr<v1::KeyStatus>> result ABSL_GUARDED_BY(mu);
  };

  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits one poll interval; false once stopping.
  bool Sleep() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  Arbiter* const arbiter_;
  JobQueue* const jobs_;
  const Clock* const clock_;
  const absl::Duration idle_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_REVALIDATOR_H_
