// HostLock: the lock file next to a tool's cache file through which the
// gputune-sync processes of one host (one per rank) take turns with the
// file and agree on who writes it before a job.
//
//   absl::StatusOr<HostLock> lock = HostLock::Open(cache +
//   ".gputune-sync.lock"); lock->LockFiles();                       // one
//   process at a time if (*lock->StartJob()) { /* first: write the cache file
//   */ } lock->JoinJob();                         // until Close: a job runs
//   lock->UnlockFiles();
//
// Two byte-range locks of the file (open-file-description locks: they
// belong to this open file, not to the process, and go away when it is
// closed, a crash too, so no stale lock is left to clean up): byte 0,
// exclusive, is the turn with the cache file; byte 1 is held shared by every
// gputune-sync whose COMMAND runs, so the process that finds it free knows
// no job runs on this host and the cache file is its to write. The lock
// file itself stays empty and is never removed (removing it would let two
// processes lock two different files).
#ifndef GPUTUNE_CLIENT_SYNC_HOST_LOCK_H_
#define GPUTUNE_CLIENT_SYNC_HOST_LOCK_H_

#include <sys/types.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gputune::sync {

class HostLock {
 public:
  // Opens `path`, creating it (mode 0666 less the umask) when missing.
  // PERMISSION_DENIED (with the path) when it cannot be opened.
  static absl::StatusOr<HostLock> Open(const std::string& path);

  HostLock(HostLock&& other) noexcept;
  HostLock& operator=(HostLock&& other) noexcept;
  HostLock(const HostLock&) = delete;
  HostLock& operator=(const HostLock&) = delete;
  // Closes the file: every lock this object holds is released.
  ~HostLock();

  // Blocks until this process alone has the cache file (and may read,
  // import and write it); UnlockFiles gives the turn back.
  absl::Status LockFiles();
  absl::Status UnlockFiles();

  // With the files locked: true when no gputune-sync of this host has a
  // COMMAND running, and then this one holds the job exclusively until
  // JoinJob (nobody can join a job whose cache file is still being written);
  // false when a job runs.
  absl::StatusOr<bool> StartJob();
  // Holds the job shared until the object is destroyed: gputune-syncs that
  // start meanwhile join this job instead of writing the cache file again.
  absl::Status JoinJob();

 private:
  HostLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // fcntl(F_OFD_SETLK[W]) of one byte; `wait` blocks, otherwise a held lock
  // is reported as false.
  absl::StatusOr<bool> Set(short type, off_t byte, bool wait);

  int fd_ = -1;
  std::string path_;
};

}  // namespace gputune::sync

#endif  // GPUTUNE_CLIENT_SYNC_HOST_LOCK_H_
