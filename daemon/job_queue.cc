#include "daemon/job_queue.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/logging.h"
#include "daemon/metrics.h"
#include "proto/execution_convert.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

constexpr char kDaemonHolder[] = "gputuned";

v1::Validation ValidationToProto(kernels::CandidateValidation v) {
  switch (v) {
    case kernels::CandidateValidation::kPassed:
      return v1::VALIDATION_PASSED;
    case kernels::CandidateValidation::kFailed:
      return v1::VALIDATION_FAILED;
    case kernels::CandidateValidation::kError:
      return v1::VALIDATION_ERROR;
    default:
      return v1::VALIDATION_UNSPECIFIED;
  }
}

v1::Entry EntryFromReport(const v1::Key& key, const kernels::TuneReport& report,
                          const kernels::Fingerprint& fingerprint,
                          absl::Time now) {
  v1::Entry entry;
  *entry.mutable_key() = key;
  *entry.mutable_execution() = gputune::ToProto(report.chosen);
  for (const kernels::CandidateReport& c : report.candidates) {
    v1::CandidateMeasurement* m = entry.add_measurements();
    *m->mutable_execution() = gputune::ToProto(c.execution);
    m->set_validation(ValidationToProto(c.validation));
    m->set_max_abs_error(c.max_abs_error);
    m->set_error(c.error);
    *m->mutable_median() = SecondsToProto(c.median_seconds);
    *m->mutable_spread() = SecondsToProto(c.spread_seconds);
    *m->mutable_p20() = SecondsToProto(c.p20_seconds);
    *m->mutable_p80() = SecondsToProto(c.p80_seconds);
    m->set_dispersion(c.dispersion);
    m->set_samples(c.samples);
    m->set_is_default(c.is_default);
    m->set_chosen(c.chosen);
  }
  *entry.mutable_default_time() = SecondsToProto(report.default_seconds);
  *entry.mutable_chosen_time() = SecondsToProto(report.chosen_seconds);
  if (report.default_seconds > 0 && report.chosen_seconds > 0) {
    entry.set_speedup(report.default_seconds / report.chosen_seconds);
  }
  entry.set_source(v1::SOURCE_DAEMON_MEASURED);
  *entry.mutable_measured_at() = ToProto(now);
  *entry.mutable_fingerprint() = gputune::ToProto(fingerprint);
  entry.set_recorded_by(kDaemonHolder);
  entry.set_reason(report.reason);
  for (const std::string& note : report.notes) entry.add_notes(note);
  return entry;
}

}  // namespace

// A caller following a client's claim. Resolved exactly once: by the claim's
// end, or by Stop().
struct JobQueue::Follower {
  v1::Key key;
  DoneFn done;
  uint64_t watch_id = 0;
  absl::Mutex mu;
  bool resolved ABSL_GUARDED_BY(mu) = false;

  // True for the one caller that gets to answer; ends the watch.
  bool Resolve(Arbiter* arbiter) {
    absl::MutexLock lock(&mu);
    if (resolved) return false;
    resolved = true;
    if (watch_id != 0) arbiter->Unwatch(watch_id);
    return true;
  }
};

JobQueue::JobQueue(const JobQueueOptions& options, Arbiter* arbiter,
                   storage::TuneStore* store, kernels::Backend* backend,
                   std::string backend_error, const Clock* clock)
    : options_(options),
      arbiter_(arbiter),
      store_(store),
      backend_(backend),
      clock_(clock),
      autotune_log_(options.tune.log) {
  {
    absl::MutexLock lock(&mu_);
    worker_tick_ = clock_->Now();
  }
  if (backend_ == nullptr) {
    absl::MutexLock lock(&mu_);
    backend_error_ = backend_error.empty() ? "no benchmark backend"
                                           : std::move(backend_error);
  } else {
    worker_ = std::thread([this] { WorkerLoop(); });
    // Checks the running job against job_timeout every 50 ms; sleeps
    // without waking while no job runs.
    monitor_ = std::thread([this] {
      absl::MutexLock lock(&mu_);
      const absl::Condition running_or_stopping(
          +[](JobQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->stopping_ || q->running_ != nullptr;
          },
          this);
      while (true) {
        mu_.Await(running_or_stopping);
        if (stopping_) return;
        if (clock_->Now() - running_since_ > options_.job_timeout) {
          cancel_.store(true);
        }
        mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                             absl::Milliseconds(50));
      }
    });
  }
}

JobQueue::~JobQueue() { Stop(); }

void JobQueue::Stop() {
  std::vector<std::shared_ptr<Job>> abandoned;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Follower>> followers;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cancel_.store(true);
  }
  if (worker_.joinable()) worker_.join();
  if (monitor_.joinable()) monitor_.join();
  {
    absl::MutexLock lock(&mu_);
    abandoned.swap(queue_);
    jobs_.clear();
    followers.swap(followers_);
  }
  const absl::Status shutting_down = absl::UnavailableError(
      "gputuned is shutting down: retry against the restarted daemon");
  for (const auto& job : abandoned) {
    (void)arbiter_->Abandon(job->claim_id, ClaimKind::kDaemon);
    for (const DoneFn& done : job->waiters) done(shutting_down);
  }
  for (const auto& [id, follower] : followers) {
    if (follower->Resolve(arbiter_)) follower->done(shutting_down);
  }
}

void JobQueue::SetAutotuneLog(kernels::AutotuneLog level) {
  autotune_log_.store(level);
}

bool JobQueue::WorkerAlive() const {
  if (backend_ == nullptr) return true;
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  const absl::Time now = clock_->Now();
  if (running_)
    return now - running_since_ < options_.job_timeout + absl::Seconds(30);
  return now - worker_tick_ < absl::Seconds(10);
}

bool JobQueue::device_lost() const { return backend_ != nullptr && !ready(); }

bool JobQueue::ready() const {
  absl::MutexLock lock(&mu_);
  return backend_error_.empty();
}

std::string JobQueue::backend_error() const {
  absl::MutexLock lock(&mu_);
  return backend_error_;
}

void JobQueue::TuneDense(const v1::Key& key, bool wait, DoneFn done) {
  if (std::string error = backend_error(); !error.empty()) {
    done(absl::FailedPreconditionError(
        absl::StrCat("this gputuned cannot benchmark: ", error)));
    return;
  }
  if (v1::KeyStatus status = arbiter_->Lookup(key);
      status.state() == v1::KEY_STATE_HIT) {
    done(std::move(status));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      done(absl::UnavailableError("gputuned is shutting down"));
      return;
    }
    if (AttachLocked(key, wait, done)) return;
    if (static_cast<int>(queue_.size()) >= options_.capacity) {
      done(absl::ResourceExhaustedError(absl::StrCat(
          "the benchmark queue is full (", options_.capacity,
          " jobs waiting): retry later, or raise --queue_capacity")));
      return;
    }
  }
  FleetHooks* const fleet = fleet_.load();
  if (fleet == nullptr) {
    Claimed(key, wait, std::move(done),
            arbiter_->Claim(key, kDaemonHolder, options_.lease_ttl,
                            ClaimKind::kDaemon));
    return;
  }
  // The fleet claim may take a PostgreSQL round trip: answered on the fleet
  // tier's claim thread.
  fleet->Claim(key, kDaemonHolder, options_.lease_ttl, ClaimKind::kDaemon,
               absl::InfiniteFuture(),
               [this, key, wait,
                done = std::move(done)](absl::StatusOr<v1::ClaimResponse> c) {
                 Claimed(key, wait, done, std::move(c));
               });
}

bool JobQueue::AttachLocked(const v1::Key& key, bool wait, DoneFn& done) {
  auto it = jobs_.find(KeyId(key));
  if (it == jobs_.end()) return false;
  Job& job = *it->second;
  if (job.key.candidate_set() != key.candidate_set()) {
    done(absl::AbortedError(absl::StrCat(
        "a job for ", job.key_id, " with candidate set '",
        job.key.candidate_set(), "' is running: retry when it is done")));
  } else if (wait) {
    job.waiters.push_back(std::move(done));
    job.info.set_waiters(job.info.waiters() + 1);
  } else {
    done(arbiter_->Lookup(key));
  }
  return true;
}

void JobQueue::Claimed(const v1::Key& key, bool wait, DoneFn done,
                       absl::StatusOr<v1::ClaimResponse> claim) {
  if (!claim.ok()) {
    done(claim.status());
    return;
  }
  switch (claim->outcome()) {
    case v1::CLAIM_OUTCOME_HIT:
      done(arbiter_->Lookup(key));
      return;
    case v1::CLAIM_OUTCOME_BACKOFF:
      // An answer about the key, not about the daemon: clients must not take
      // it for an outage (UNAVAILABLE), so FAILED_PRECONDITION as for Claim.
      done(absl::FailedPreconditionError(absl::StrCat(
          KeyText(key), " is in BACKOFF after repeated failed tuning until ",
          absl::FormatTime(FromProto(claim->retry_after())),
          ": retry after that")));
      return;
    case v1::CLAIM_OUTCOME_PENDING: {
      {
        absl::MutexLock lock(&mu_);
        if (AttachLocked(key, wait, done)) return;  // our own job meanwhile
      }
      // A client process holds the key: follow its claim.
      if (wait) {
        Follow(key, std::move(done));
      } else {
        done(arbiter_->Lookup(key));
      }
      return;
    }
    default:
      break;
  }
  auto job = std::make_shared<Job>();
  job->key_id = KeyId(key);
  job->key = key;
  job->claim_id = claim->claim().claim_id();
  *job->info.mutable_key() = key;
  *job->info.mutable_queued_at() = ToProto(clock_->Now());
  bool stopped = false;
  {
    absl::MutexLock lock(&mu_);
    stopped = stopping_;  // while the fleet was asked
    if (!stopped) {
      job->order = next_order_++;
      if (wait) {
        job->waiters.push_back(std::move(done));
        job->info.set_waiters(1);
      }
      jobs_[job->key_id] = job;
      queue_.push_back(job);
    }
  }
  if (stopped) {
    (void)arbiter_->Abandon(job->claim_id, ClaimKind::kDaemon);
    done(absl::UnavailableError("gputuned is shutting down"));
    return;
  }
  spdlog::info("tune job queued for {} (claim {})", KeyText(key),
               job->claim_id);
  if (!wait) done(arbiter_->Lookup(key));
}

void JobQueue::Follow(const v1::Key& key, DoneFn done) {
  auto follower = std::make_shared<Follower>();
  follower->key = key;
  follower->done = std::move(done);
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      follower->done(absl::UnavailableError("gputuned is shutting down"));
      return;
    }
    id = next_follower_++;
    followers_[id] = follower;
  }
  auto on_status = [this, id, follower](const v1::KeyStatus& status) {
    if (status.state() == v1::KEY_STATE_PENDING) return;
    if (!follower->Resolve(arbiter_)) return;
    {
      absl::MutexLock lock(&mu_);
      followers_.erase(id);
    }
    if (status.state() == v1::KEY_STATE_HIT) {
      follower->done(status);
    } else {
      // The client's claim ended without an entry: tune the key here.
      TuneDense(follower->key, true, follower->done);
    }
  };
  const uint64_t watch_id = arbiter_->Watch(key, std::move(on_status));
  absl::MutexLock lock(&follower->mu);
  follower->watch_id = watch_id;
  if (follower->resolved) arbiter_->Unwatch(watch_id);
}

std::shared_ptr<JobQueue::Job> JobQueue::PopLocked() {
  auto best = std::min_element(
      queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
        const bool a_decode = a->key.dense_bf16().phase() == v1::PHASE_DECODE;
        const bool b_decode = b->key.dense_bf16().phase() == v1::PHASE_DECODE;
        if (a_decode != b_decode) return a_decode;
        return a->order < b->order;
      });
  std::shared_ptr<Job> job = *best;
  queue_.erase(best);
  return job;
}

void JobQueue::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      const absl::Condition work(
          +[](JobQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->stopping_ || !q->queue_.empty();
          },
          this);
      // Wake every second while idle: the heartbeat WorkerAlive checks.
      while (!mu_.AwaitWithTimeout(work, absl::Seconds(1))) {
        worker_tick_ = clock_->Now();
      }
      worker_tick_ = clock_->Now();
      if (stopping_) return;
      job = PopLocked();
      running_ = job;
      running_since_ = clock_->Now();
      *job->info.mutable_started_at() = ToProto(running_since_);
      cancel_.store(false);
    }
    Run(*job);
  }
}

void JobQueue::Run(Job& job) {
  kernels::TuneHooks hooks;
  hooks.cancel = &cancel_;
  hooks.progress = [&](int done, int total) {
    {
      absl::MutexLock lock(&mu_);
      job.info.set_candidates_done(done);
      job.info.set_candidates_total(total);
    }
    (void)arbiter_->Renew(job.claim_id, options_.lease_ttl, ClaimKind::kDaemon);
  };
  const std::string key_text = KeyText(job.key);
  hooks.log = [&](int severity, const std::string& line) {
    const auto level = severity >= 2   ? spdlog::level::warn
                       : severity == 1 ? spdlog::level::info
                                       : spdlog::level::debug;
    spdlog::log(level, "autotune {}: {}", key_text, line);
  };
  kernels::TuneOptions tune = options_.tune;
  tune.log = autotune_log_.load();
  // TuneDense never throws (engine.h): failures are in report.status.
  kernels::TuneReport report =
      kernels::TuneDense(*backend_, ShapeOf(job.key.dense_bf16()), tune, hooks);
  bool ok = report.status.ok();
  std::string error = report.status.message();  // why not ok: every waiter's
  // A lost device makes every result of the job suspect: record nothing.
  if (kernels::Status device = backend_->DeviceStatus(); !device.ok()) {
    const std::string& lost = device.message();
    spdlog::critical(
        "the device is unusable ({}): TuneDense is refused until gputuned "
        "restarts; the cache is still served",
        lost);
    ok = false;
    error = absl::StrCat("the device was lost: ", lost);
    absl::MutexLock lock(&mu_);
    backend_error_ =
        absl::StrCat("the device was lost: ", lost, " (restart gputuned)");
  }
  if (cancel_.load() && !ok && error == "cancelled") {
    error = "cancelled (daemon shutting down or job over its time limit)";
  }

  absl::StatusOr<v1::KeyStatus> result;
  if (ok) {
    absl::StatusOr<Arbiter::RecordTicket> ticket =
        arbiter_->BeginRecord(job.claim_id, ClaimKind::kDaemon);
    if (!ticket.ok()) {
      result = ticket.status();
    } else {
      const v1::Entry entry = EntryFromReport(
          ticket->key, report, backend_->GetFingerprint(), clock_->Now());
      FleetHooks* const fleet = fleet_.load();
      if (absl::Status s = fleet != nullptr ? fleet->PersistRecord(entry)
                                            : store_->Put(entry);
          s.ok()) {
        arbiter_->CommitRecord(*ticket, entry);
        if (fleet != nullptr) fleet->RecordCommitted(job.key);
        spdlog::info("tuned {}: {} ({:.2f}x over the default): {}", key_text,
                     report.chosen.ToString(), entry.speedup(), report.reason);
        result = arbiter_->Lookup(job.key);
      } else {
        arbiter_->CancelRecord(*ticket);
        ok = false;
        error = absl::StrCat("cannot persist the entry: ", s.message());
      }
    }
  }
  if (!ok) {
    spdlog::warn("tuning {} failed: {}", key_text, error);
    (void)arbiter_->Abandon(job.claim_id, ClaimKind::kDaemon);
    result = absl::AbortedError(
        absl::StrCat("tuning ", key_text, " failed: ", error));
  }
  {
    absl::MutexLock lock(&mu_);
    (result.ok() ? completed_ : failed_)++;
    if (options_.metrics)
      options_.metrics->JobFinished(result.ok(),
                                    clock_->Now() - running_since_);
  }
  Finish(job.key_id, result);
}

void JobQueue::Finish(const std::string& key_id,
                      const absl::StatusOr<v1::KeyStatus>& result) {
  std::vector<DoneFn> waiters;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(key_id);
    if (it != jobs_.end()) {
      waiters.swap(it->second->waiters);
      jobs_.erase(it);
    }
    running_.reset();
  }
  for (const DoneFn& done : waiters) done(result);
}

JobQueue::Stats JobQueue::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.queue_depth = static_cast<uint32_t>(queue_.size());
  stats.capacity = static_cast<uint32_t>(options_.capacity);
  stats.completed = completed_;
  stats.failed = failed_;
  if (running_) {
    stats.running = true;
    stats.running_job = running_->info;
  }
  return stats;
}

}  // namespace gputune
