// Notifier: gputuned's side of the systemd service protocol (sd_notify).
//
// READY=1 once the daemon serves, STATUS= lines, WATCHDOG=1 from a thread
// while the daemon is alive, STOPPING=1 on shutdown. Without $NOTIFY_SOCKET
// (not started by systemd) every call is a no-op.
#ifndef GPUTUNE_DAEMON_NOTIFIER_H_
#define GPUTUNE_DAEMON_NOTIFIER_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gputune {

class Notifier {
 public:
  // interval > 0: send WATCHDOG=1 that often. Zero: half of systemd's
  // WatchdogSec when the unit sets one ($WATCHDOG_USEC), else no watchdog.
  explicit Notifier(absl::Duration interval);
  // Stops the watchdog thread.
  ~Notifier();

  // READY=1 with a STATUS= line.
  void Ready(const std::string& status);
  // Every interval: if alive() then WATCHDOG=1 and STATUS=status(), else
  // nothing (systemd restarts a daemon whose pings stop) and an error log.
  void StartWatchdog(std::function<bool()> alive,
                     std::function<std::string()> status);
  // STOPPING=1; stops the watchdog thread.
  void Stopping();

  // The watchdog period in use; zero when there is none.
  absl::Duration interval() const { return interval_; }

 private:
  void StopThread();

  absl::Duration interval_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_NOTIFIER_H_
