// SplitRunner: runs a large piece of work in two halves, the second on
// another core when one is free.
//
// A BatchLookup of 10,000 keys is CPU work (reading, checking and looking up
// each key, writing its status) while the asker waits; its two halves are
// independent. The calling thread runs half 0 and the runner's helper thread
// half 1; if the helper is busy with another caller's half, the caller runs
// half 1 itself afterwards, so a caller never waits on someone else's work.
//
//   SplitRunner runner;
//   runner.Run([&](int half) { Process(half == 0 ? first : second); });
#ifndef GPUTUNE_DAEMON_SPLIT_RUNNER_H_
#define GPUTUNE_DAEMON_SPLIT_RUNNER_H_

#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace gputune {

class SplitRunner {
 public:
  // Starts the helper thread.
  SplitRunner();
  // Joins it; halves it has not picked up are run by their callers.
  ~SplitRunner();

  SplitRunner(const SplitRunner&) = delete;
  SplitRunner& operator=(const SplitRunner&) = delete;

  // Calls half(0) on this thread and half(1) on this thread or the helper,
  // possibly at the same time; returns when both have returned.
  // Thread-safe.
  void Run(absl::FunctionRef<void(int half)> half) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Task {
    absl::FunctionRef<void(int)> half;
    absl::Notification done;  // the helper ran half 1
  };

  void Loop();

  absl::Mutex mu_;
  std::deque<Task*> queue_ ABSL_GUARDED_BY(mu_);  // half 1 not yet taken
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_SPLIT_RUNNER_H_
