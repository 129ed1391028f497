// InstanceLock: one gputuned per database and per socket.
//
//   absl::StatusOr<InstanceLock> lock = InstanceLock::Acquire(db + ".lock",
//                                                             "database " +
//                                                             db);
//
// An exclusive flock(2) on a lock file, held for the life of the object (the
// process): the kernel drops it when the process dies, also on kill -9, so a
// crashed daemon never leaves a stale lock. The file holds the holder's pid,
// which a refused second daemon names. The file itself is never removed
// (removing it would let two processes lock two different files).
#ifndef GPUTUNE_DAEMON_INSTANCE_LOCK_H_
#define GPUTUNE_DAEMON_INSTANCE_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace gputune {

class InstanceLock {
 public:
  // FAILED_PRECONDITION naming the holder's pid when another process holds
  // the lock; UNAVAILABLE when the file cannot be created. `what` names the
  // resource in messages ("database /var/lib/gputune/gpu0.db").
  static absl::StatusOr<InstanceLock> Acquire(const std::string& path,
                                              const std::string& what);
  InstanceLock(InstanceLock&& other) noexcept;
  InstanceLock& operator=(InstanceLock&& other) noexcept;
  ~InstanceLock();

 private:
  explicit InstanceLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_INSTANCE_LOCK_H_
