// JobQueue: TuneDense's single-flight benchmark jobs and the device worker
// that runs them one at a time.
//
// For a dense key that is not a HIT, the daemon claims the key itself (holder
// "gputuned") and queues a job; later requests for the same key attach to it
// (single flight). A key claimed by a client process is not benchmarked
// again: waiters follow that claim through the arbiter and get its entry (or,
// if the client abandons, the daemon claims and tunes it). One worker thread
// runs jobs strictly one after another, decode before prefill, so no two
// benchmarks overlap on the device. The queue is bounded: a new job beyond
// capacity is refused with RESOURCE_EXHAUSTED.
//
// A job that fails (no valid candidate, no comparison within the budget,
// exception, over its time limit, shutdown) abandons its claim (BACKOFF rules
// apply) and its waiters get the reason. Nothing is written for it. A job
// over job_timeout is cancelled within 50 ms (the monitor thread), and the
// cancel flag reaches inside the backend's long work (host kernel runs, the
// host reference: kernels::Backend::SetCancel), so the job ends well inside
// the job_timeout + 30 s that WorkerAlive allows before the watchdog stops.
// After every job the backend is asked whether its device is still usable
// (Backend::DeviceStatus): a lost device (a sticky CUDA error) fails that job
// and refuses TuneDense from then on with FAILED_PRECONDITION; the cache is
// still served, and the watchdog stops pinging so that systemd restarts the
// daemon with a fresh context.
//
// Thread-safe. TuneDense never blocks: it answers through `done`, on the
// calling thread (HIT, PENDING, refusals), on the fleet tier's claim thread
// (with a fleet) or on the worker thread.
#ifndef GPUTUNE_DAEMON_JOB_QUEUE_H_
#define GPUTUNE_DAEMON_JOB_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "daemon/clock.h"
#include "daemon/fleet_hooks.h"
#include "gputune/v1/tune.pb.h"
#include "kernels/backend.h"
#include "kernels/engine.h"
#include "storage/tune_store.h"

namespace gputune {

class DaemonMetrics;  // daemon/metrics.h

struct JobQueueOptions {
  int capacity = 256;
  kernels::TuneOptions tune;
  // A job running longer than this is cancelled and abandoned.
  absl::Duration job_timeout = absl::Minutes(2);
  // Lease the daemon takes for its own jobs (renewed while they run).
  absl::Duration lease_ttl = absl::Hours(1);
  DaemonMetrics* metrics = nullptr;  // counts jobs and their time; may be null
};

class JobQueue {
 public:
  // `backend` may be null: then TuneDense answers FAILED_PRECONDITION with
  // `backend_error`. Every pointer must outlive the queue.
  JobQueue(const JobQueueOptions& options, Arbiter* arbiter,
           storage::TuneStore* store, kernels::Backend* backend,
           std::string backend_error, const Clock* clock);
  // Calls Stop().
  ~JobQueue();

  // Stops the worker: the running job is cancelled and abandoned, queued jobs
  // are abandoned, and every waiter (also those following a client's claim)
  // gets UNAVAILABLE. Later TuneDense calls get UNAVAILABLE. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  using DoneFn = std::function<void(absl::StatusOr<v1::KeyStatus>)>;
  // `key` must be a valid dense key. wait=false answers PENDING as soon as a
  // job exists (or a client holds the key); wait=true answers with the HIT,
  // or the job's error.
  void TuneDense(const v1::Key& key, bool wait, DoneFn done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // With a fleet tier: claims go through fleet->Claim and entries through
  // fleet->PersistRecord. Call before the first TuneDense; null: no fleet.
  void set_fleet(FleetHooks* fleet) { fleet_.store(fleet); }

  // Runtime change of the autotune log level.
  void SetAutotuneLog(kernels::AutotuneLog level);
  kernels::AutotuneLog autotune_log() const { return autotune_log_.load(); }

  struct Stats {
    uint32_t queue_depth = 0;
    uint32_t capacity = 0;
    bool running = false;
    v1::JobInfo running_job;
    uint64_t completed = 0;  // jobs that recorded an entry
    uint64_t failed = 0;     // jobs that abandoned
  };
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether TuneDense can benchmark; the reason when it cannot (no backend,
  // or the device was lost: see Backend::DeviceStatus).
  bool ready() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string backend_error() const ABSL_LOCKS_EXCLUDED(mu_);
  // True once a backend that worked has lost its device.
  bool device_lost() const ABSL_LOCKS_EXCLUDED(mu_);
  // False when the device worker is stuck: idle but not looping, or in one
  // job well past job_timeout. True without a backend (no worker to check).
  bool WorkerAlive() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Job {
    std::string key_id;
    v1::Key key;
    uint64_t claim_id = 0;
    v1::JobInfo info;  // progress, for GetStatus
    std::vector<DoneFn> waiters;
    uint64_t order = 0;
  };

  void WorkerLoop();
  void Run(Job& job);
  void Finish(const std::string& key_id, const absl::StatusOr<v1::KeyStatus>& r)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Attaches `done` to a queued or running job for the key (or answers it,
  // for a job of another candidate set, or with wait=false); false when
  // there is none, and `done` is left as it was.
  bool AttachLocked(const v1::Key& key, bool wait, DoneFn& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TuneDense once the key's claim was answered (on the caller's thread, or
  // on the fleet tier's claim thread): queues a job for a grant.
  void Claimed(const v1::Key& key, bool wait, DoneFn done,
               absl::StatusOr<v1::ClaimResponse> claim)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Follows a client's claim; when it ends without a HIT, tries again.
  void Follow(const v1::Key& key, DoneFn done) ABSL_LOCKS_EXCLUDED(mu_);
  struct Follower;
  // Picks the next job: decode before prefill, then arrival order.
  std::shared_ptr<Job> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const JobQueueOptions options_;
  Arbiter* const arbiter_;
  storage::TuneStore* const store_;
  kernels::Backend* const backend_;
  const Clock* const clock_;
  std::atomic<kernels::AutotuneLog> autotune_log_;
  std::atomic<FleetHooks*> fleet_{nullptr};

  mutable absl::Mutex mu_;
  // Queued and running jobs by key id (single flight).
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Job> running_ ABSL_GUARDED_BY(mu_);
  absl::Time running_since_ ABSL_GUARDED_BY(mu_);
  absl::Time worker_tick_ ABSL_GUARDED_BY(mu_);  // idle loop heartbeat
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why TuneDense cannot benchmark; empty while it can.
  std::string backend_error_ ABSL_GUARDED_BY(mu_);
  // Callers waiting on a client's claim, by watch id.
  absl::flat_hash_map<uint64_t, std::shared_ptr<Follower>> followers_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_follower_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> cancel_{false};  // the running job's cancel flag
  std::thread worker_;
  std::thread monitor_;  // cancels a job past job_timeout
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_JOB_QUEUE_H_
