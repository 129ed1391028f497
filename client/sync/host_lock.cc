#include "client/sync/host_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gputune::sync {
namespace {

constexpr off_t kFilesByte = 0;
constexpr off_t kJobByte = 1;

}  // namespace

absl::StatusOr<HostLock> HostLock::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot open the lock file ", path, ": ", std::strerror(errno),
        " (every rank needs to write next to --path)"));
  }
  return HostLock(fd, path);
}

HostLock::HostLock(HostLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

HostLock& HostLock::operator=(HostLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

HostLock::~HostLock() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<bool> HostLock::Set(short type, off_t byte, bool wait) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  fl.l_pid = 0;  // required for open-file-description locks
  while (fcntl(fd_, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) != 0) {
    if (errno == EINTR) continue;
    if (!wait && (errno == EAGAIN || errno == EACCES)) return false;
    return absl::InternalError(
        absl::StrCat("cannot lock ", path_, ": ", std::strerror(errno)));
  }
  return true;
}

absl::Status HostLock::LockFiles() {
  return Set(F_WRLCK, kFilesByte, /*wait=*/true).status();
}

absl::Status HostLock::UnlockFiles() {
  return Set(F_UNLCK, kFilesByte, /*wait=*/false).status();
}

absl::StatusOr<bool> HostLock::StartJob() {
  return Set(F_WRLCK, kJobByte, /*wait=*/false);
}

absl::Status HostLock::JoinJob() {
  // Over this object's own exclusive lock (after StartJob) this converts it
  // in place; over others' shared locks it is granted at once.
  return Set(F_RDLCK, kJobByte, /*wait=*/true).status();
}

}  // namespace gputune::sync
