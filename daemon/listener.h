// Listener: gputuned's own accept loop for its unix socket (and plain
// loopback TCP), handing each connection to the gRPC server.
//
//   absl::StatusOr<std::unique_ptr<Listener>> l = Listener::Bind(options);
//   ... build and start the grpc::Server with no listening port ...
//   (*l)->Start(server.get(), &peers);
//   ... (*l)->Stop();   // before server->Shutdown()
//
// Why not gRPC's listener: in gRPC 1.51 (src/core/lib/iomgr/
// tcp_server_posix.cc, on_read) an accept4() that fails with anything but
// EINTR/EAGAIN/ECONNABORTED - EMFILE when the process is out of file
// descriptors - logs "Failed accept4" and leaves the listener without a read
// notification: it never accepts again, also once the descriptors are back.
// One flood of connections wedged the daemon for good. This loop never stops
// on an error; it keeps `reserve_fds` descriptors free for the daemon's own
// use (SQLite, a backup file, the watchdog's self-check) by closing
// connections beyond that at once, and when accept4 fails with EMFILE it
// closes a spare descriptor to accept and drop the waiting connection, so
// clients see a closed connection instead of a hang and the backlog drains.
//
// Each accepted unix connection's SO_PEERCRED is recorded in a PeerTable
// under the descriptor number gRPC names the connection by ("fd:N"), for the
// service's authority checks (daemon/authority.h).
#ifndef GPUTUNE_DAEMON_LISTENER_H_
#define GPUTUNE_DAEMON_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"

namespace gputune {

// Who is on the other end of a connection.
struct Peer {
  // Serial number of the connection (unique for the daemon's life).
  uint64_t connection = 0;
  // From SO_PEERCRED / SO_PEERGROUPS: only for unix connections.
  bool has_credentials = false;
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// Connection descriptor -> Peer, written by the accept thread, read by
// handlers. A descriptor number is reused only after gRPC closed the
// connection that had it, and Set overwrites the old entry then.
class PeerTable {
 public:
  void Set(int fd, Peer peer) ABSL_LOCKS_EXCLUDED(mu_);
  // The peer of a call, from grpc::ServerContextBase::peer() ("fd:N" for a
  // connection this daemon accepted); nullopt for any other peer (gRPC's
  // own TLS listener, the in-process channel).
  std::optional<Peer> Find(absl::string_view grpc_peer) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Peer> peers_ ABSL_GUARDED_BY(mu_);
};

struct ListenerOptions {
  // unix:///abs/path, unix:/abs/path, or host:port (TCP).
  std::string address;
  // Mode of the unix socket file, which has it from the moment it appears.
  uint32_t socket_mode = 0660;
  // Descriptors kept free for the daemon itself: connections that would
  // leave fewer are closed at once.
  int reserve_fds = 64;
};

class Listener {
 public:
  // Binds and listens. A unix socket is bound inside a fresh 0700 directory,
  // given its mode and renamed into place, so it never exists at the path
  // with a looser mode (whatever the umask), and a stale socket left by a
  // killed daemon is replaced atomically. The caller must hold the
  // socket's instance lock (a live daemon's socket is never replaced).
  // UNAVAILABLE (with what to do) when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Listener>> Bind(
      const ListenerOptions& options);
  // Takes over `fd`, a listening unix stream socket the daemon inherited
  // (systemd socket activation: gputuned@.socket, sd_listen_fds(3)). The
  // socket file belongs to whoever bound it: Stop() closes the descriptor
  // and leaves the file. options.address and socket_mode are not used.
  // INVALID_ARGUMENT when fd is anything else.
  static absl::StatusOr<std::unique_ptr<Listener>> Adopt(
      int fd, const ListenerOptions& options);
  // Stop()s.
  ~Listener();

  // Starts the accept thread, which hands connections to `server` (started,
  // built without listening ports) and records them in `peers`. Both must
  // outlive Stop().
  void Start(grpc::Server* server, PeerTable* peers);
  // Stops accepting and closes the listening socket; removes the socket file
  // when it is still the one Bind created. Idempotent.
  void Stop();

  // The address clients connect to (for TCP with the bound port).
  const std::string& address() const { return address_; }
  // Empty for TCP.
  const std::string& socket_path() const { return socket_path_; }
  // Connections handed to gRPC / closed at once (over the limit, or accepted
  // only to be dropped while out of descriptors) since Start.
  uint64_t accepted() const { return accepted_.load(); }
  uint64_t refused() const { return refused_.load(); }
  // Connections may use descriptors below this number.
  int connection_limit() const { return connection_limit_; }

 private:
  Listener() = default;
  // The part of Bind and Adopt after listen_fd_ is set.
  static absl::StatusOr<std::unique_ptr<Listener>> Finish(
      std::unique_ptr<Listener> l, const ListenerOptions& options);
  void AcceptLoop(grpc::Server* server, PeerTable* peers);
  // Accepts and closes one waiting connection while out of descriptors.
  void ShedOne();

  std::string address_;
  std::string socket_path_;
  bool owns_socket_file_ = true;  // false for an adopted socket
  ino_t socket_inode_ = 0;
  dev_t socket_device_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;   // eventfd: Stop() wakes the accept thread
  int spare_fd_ = -1;  // closed to make room for ShedOne's accept
  int connection_limit_ = 0;
  int self_check_limit_ = 0;  // the daemon's own connections may go this far
  std::thread thread_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  uint64_t next_connection_ = 1;  // accept thread only
  bool stopped_ = false;
};

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in
// effect afterwards.
int RaiseFileLimit();

// The filesystem path of a unix: address, or empty.
std::string UnixSocketPath(absl::string_view address);

// The listening socket systemd passed (sd_listen_fds(3): LISTEN_FDS=1 and
// LISTEN_PID naming this process; the variables are unset so that children
// do not see them): its descriptor (3), or -1 when none was passed.
// INVALID_ARGUMENT when more than one was, or the variables are malformed.
absl::StatusOr<int> InheritedListenFd();

// The path a listening unix stream socket `fd` is bound to; INVALID_ARGUMENT
// when fd is not one (or is abstract or unnamed).
absl::StatusOr<std::string> ListeningUnixSocketPath(int fd);

// Binds and listens on `address` as Listener::Bind does (unix:/path with
// `socket_mode`, or host:port), for listeners of other protocols (the Redis
// front door, daemon/redis/redis_server.h). Sets *bound to the address
// clients connect to. The descriptor is non-blocking and close-on-exec.
absl::StatusOr<int> BindListeningSocket(const std::string& address,
                                        uint32_t socket_mode,
                                        std::string* bound);

// SO_PEERCRED and SO_PEERGROUPS of a connected unix socket into *peer
// (has_credentials stays false when they cannot be read).
void ReadPeerCredentials(int fd, Peer* peer);

// Whether a host:port address names only this machine (localhost, 127/8,
// ::1). Unresolvable hosts are not loopback.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_LISTENER_H_
