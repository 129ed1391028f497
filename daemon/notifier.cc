#include "daemon/notifier.h"

#include <systemd/sd-daemon.h>

#include "absl/strings/str_cat.h"
#include "daemon/logging.h"
#include "spdlog/spdlog.h"

namespace gputune {

Notifier::Notifier(absl::Duration interval) : interval_(interval) {
  if (interval_ <= absl::ZeroDuration()) {
    uint64_t usec = 0;
    interval_ = sd_watchdog_enabled(0, &usec) > 0 ? absl::Microseconds(usec) / 2
                                                  : absl::ZeroDuration();
  }
}

Notifier::~Notifier() { StopThread(); }

void Notifier::Ready(const std::string& status) {
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str());
}

void Notifier::StartWatchdog(std::function<bool()> alive,
                             std::function<std::string()> status) {
  if (interval_ <= absl::ZeroDuration() || getenv("NOTIFY_SOCKET") == nullptr) {
    return;
  }
  spdlog::info("systemd watchdog: pinging every {}",
               absl::FormatDuration(interval_));
  thread_ = std::thread([this, alive = std::move(alive),
                         status = std::move(status)] {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) {
      mu_.Unlock();
      if (alive()) {
        sd_notify(0, absl::StrCat("WATCHDOG=1\nSTATUS=", status()).c_str());
      } else {
        spdlog::error(
            "watchdog: gputuned is unhealthy (no health answer over a new "
            "connection to its socket, lease sweeper or device worker stuck, "
            "or the device lost); not pinging systemd, which restarts the "
            "unit");
      }
      mu_.Lock();
    }
  });
}

void Notifier::Stopping() {
  sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
  StopThread();
}

void Notifier::StopThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace gputune
