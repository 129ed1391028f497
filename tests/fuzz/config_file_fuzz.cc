// libFuzzer target: gputuned's config file (--config=FILE), read at start and
// again on SIGHUP (ReloadConfig). Any file must give a config or
// INVALID_ARGUMENT, never a crash. The file is handed over as a memfd, so
// the real path through ParseConfig (open, getline, every setter) runs.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace {

const char* NoEnvironment(const char*) { return nullptr; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("gputuned.conf", 0);
  if (fd < 0) abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) abort();
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  absl::StatusOr<gputune::Config> config =
      gputune::ParseConfig({"--config=" + path}, NoEnvironment);
  if (config.ok()) {
    // A file that was accepted at start is accepted again on reload.
    if (!gputune::ReloadConfig(*config).ok()) abort();
  } else if (config.status().code() != absl::StatusCode::kInvalidArgument) {
    abort();
  }
  close(fd);
  return 0;
}
