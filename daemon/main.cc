// gputuned: the per-GPU tuning daemon. See docs/operations.md.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/logging.h"
#include "daemon/notifier.h"
#include "spdlog/spdlog.h"
#include "version/build_info.h"

int main(int argc, char** argv) {
  // Debian builds Abseil with mutex deadlock detection on; its bookkeeping
  // shows in lookup profiles. Lock ordering is covered by the tests, which
  // run with it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    std::cout << gputune::VersionLine("gputuned") << "\n";
    return 0;
  }
  absl::StatusOr<gputune::Config> config = gputune::ParseConfig(
      args, [](const char* name) { return std::getenv(name); });
  if (!config.ok()) {
    std::cerr << "gputuned: " << config.status().message() << "\n";
    return 2;
  }
  if (config->help) {
    std::cout << gputune::ConfigHelp();
    return 0;
  }
  gputune::SetUpLogging(config->log_level);

  // Signals are taken synchronously by this thread (sigwait); every thread
  // started from here on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<gputune::Daemon>> daemon =
      gputune::Daemon::Start(*config);
  if (!daemon.ok()) {
    spdlog::critical("cannot start: {}", daemon.status().message());
    return 1;
  }
  // systemctl status shows STATUS=: say which GPU this instance serves.
  const std::string device =
      absl::StrCat("device ", config->device, " (",
                   (*daemon)->info().fingerprint.device_name(), "): ");
  auto status = [&] { return device + (*daemon)->StatusLine(); };
  gputune::Notifier notifier(config->watchdog_interval);
  notifier.Ready(status());
  notifier.StartWatchdog([&] { return (*daemon)->Alive(); }, status);

  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      absl::StatusOr<gputune::Config> reloaded = gputune::ReloadConfig(*config);
      if (!reloaded.ok()) {
        spdlog::error("SIGHUP: config not reloaded: {}",
                      reloaded.status().message());
        continue;
      }
      *config = *reloaded;
      (*daemon)->ApplyRuntimeConfig(*config);
      continue;
    }
    spdlog::info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    break;
  }
  notifier.Stopping();
  (*daemon)->Shutdown();
  return 0;
}
