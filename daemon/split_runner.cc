#include "daemon/split_runner.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"

namespace gputune {

SplitRunner::SplitRunner() : thread_([this] { Loop(); }) {}

SplitRunner::~SplitRunner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void SplitRunner::Run(absl::FunctionRef<void(int)> half) {
  Task task{half, {}};
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(&task);
  }
  bool mine = false;
  {
    // Also when half(0) throws: the task lives on this stack, so it must
    // leave the queue, or the helper finish with it, before it goes.
    auto settle = absl::MakeCleanup([&] {
      {
        absl::MutexLock lock(&mu_);
        auto it = std::find(queue_.begin(), queue_.end(), &task);
        if (it != queue_.end()) {  // the helper has not taken it
          queue_.erase(it);
          mine = true;
        }
      }
      if (!mine) task.done.WaitForNotification();
    });
    half(0);
  }
  if (mine) half(1);
}

void SplitRunner::Loop() {
  while (true) {
    Task* task = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SplitRunner* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->stopping_ || !r->queue_.empty();
          },
          this));
      if (stopping_) return;
      task = queue_.front();
      queue_.pop_front();
    }
    task->half(1);
    task->done.Notify();
  }
}

}  // namespace gputune
