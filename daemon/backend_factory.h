// MakeBackend: picks and opens the benchmark backend named by --backend.
#ifndef GPUTUNE_DAEMON_BACKEND_FACTORY_H_
#define GPUTUNE_DAEMON_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "daemon/config.h"
#include "kernels/backend.h"

namespace gputune {

struct BackendChoice {
  // Null when no backend can benchmark (--backend=none, or cuda without a
  // usable device); then `error` says why and TuneDense answers
  // FAILED_PRECONDITION with it.
  std::unique_ptr<kernels::Backend> backend;
  std::string name;  // "cuda", "host", "fault" or "none"
  std::string error;
  std::string warning;  // e.g. auto fell back to host: logged at start
};

// auto: cuda when built with CUDA and a device opens, else host (with a
// warning). cuda: the device or nothing. Never fails: the daemon serves its
// cache whatever the device does.
BackendChoice MakeBackend(const Config& config);

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_BACKEND_FACTORY_H_
