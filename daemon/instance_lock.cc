#include "daemon/instance_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gputune {

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const std::string& path,
                                                   const std::string& what) {
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the lock file ", path, " for ", what, ": ",
                     std::strerror(errno), " (is the directory writable?)"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char buf[32] = {};
    const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    if (error != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(error)));
    }
    int pid = 0;
    const bool known =
        n > 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)),
                         &pid);
    return absl::FailedPreconditionError(absl::StrCat(
        what, " is in use by another gputuned (",
        known ? absl::StrCat("pid ", pid) : std::string("pid unknown"),
        ", holding ", path,
        "): stop that daemon first, or give this one its own --db and "
        "--listen"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) !=
                                   static_cast<ssize_t>(pid.size())) {
    // The lock holds regardless; only the pid a second daemon names is lost.
  }
  return InstanceLock(fd);
}

InstanceLock::InstanceLock(InstanceLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

InstanceLock& InstanceLock::operator=(InstanceLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace gputune
