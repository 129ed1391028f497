// SerialExecutor: one thread that runs tasks in submission order. The service
// hands it SQLite work so that gRPC reactions never block on disk.
#ifndef GPUTUNE_DAEMON_SERIAL_EXECUTOR_H_
#define GPUTUNE_DAEMON_SERIAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gputune {

class SerialExecutor {
 public:
  SerialExecutor();
  // Runs the tasks already submitted, then joins the thread.
  ~SerialExecutor();

  // Queues a task. Thread-safe. Tasks submitted after destruction began are
  // still run before the destructor returns.
  void Submit(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_SERIAL_EXECUTOR_H_
