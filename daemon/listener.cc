#include "daemon/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/logging.h"
#include "grpcpp/server_posix.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

// Splits "host:port" / "[v6]:port".
bool SplitHostPort(absl::string_view address, std::string* host,
                   std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  absl::string_view h = address.substr(0, colon);
  if (absl::ConsumePrefix(&h, "[") && !absl::ConsumeSuffix(&h, "]")) {
    return false;
  }
  *host = std::string(h);
  *port = std::string(address.substr(colon + 1));
  return !port->empty();
}

bool IsLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// SO_PEERCRED and SO_PEERGROUPS of a unix connection.
void ReadCredentials(int fd, Peer* peer) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return;
  peer->has_credentials = true;
  peer->uid = cred.uid;
  peer->gid = cred.gid;
  peer->pid = cred.pid;
  std::vector<gid_t> groups(64);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0 &&
      errno == ERANGE) {
    groups.resize(glen / sizeof(gid_t) + 1);
    glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0)
      glen = 0;
  }
  groups.resize(glen / sizeof(gid_t));
  peer->groups = std::move(groups);
}

absl::StatusOr<int> BindUnix(const std::string& path, uint32_t mode,
                             ino_t* inode, dev_t* device) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::filesystem::path final_path(path);
  std::string dir = final_path.parent_path().string();
  if (dir.empty()) dir = ".";
  // Bound in a private directory, then renamed into place: the path never
  // names a socket with another mode, and nobody can connect to the
  // temporary one.
  std::string tmpl = absl::StrCat(dir, "/.gputuned-bind-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::UnavailableError(
        Errno(absl::StrCat("cannot create a directory in ", dir)));
  }
  const std::string temp_path = tmpl + "/s";
  if (temp_path.size() >= sizeof(addr.sun_path) ||
      path.size() >= sizeof(addr.sun_path)) {
    rmdir(tmpl.c_str());
    return absl::InvalidArgumentError(
        absl::StrCat("socket path ", path, " is too long (at most ",
                     sizeof(addr.sun_path) - 1 - 24, " characters)"));
  }
  std::memcpy(addr.sun_path, temp_path.c_str(), temp_path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  absl::Status error;
  if (fd < 0) {
    error = absl::UnavailableError(Errno("socket"));
  } else if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    error = absl::UnavailableError(Errno(absl::StrCat("bind ", temp_path)));
  } else if (chmod(temp_path.c_str(), static_cast<mode_t>(mode)) != 0) {
    error = absl::UnavailableError(Errno(absl::StrCat("chmod ", temp_path)));
  } else if (listen(fd, SOMAXCONN) != 0) {
    error = absl::UnavailableError(Errno("listen"));
  } else if (rename(temp_path.c_str(), path.c_str()) != 0) {
    error = absl::UnavailableError(Errno(absl::StrCat("rename to ", path)));
  }
  unlink(temp_path.c_str());  // a no-op after the rename
  rmdir(tmpl.c_str());
  if (!error.ok()) {
    if (fd >= 0) close(fd);
    return error;
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    *inode = st.st_ino;
    *device = st.st_dev;
  }
  return fd;
}

absl::StatusOr<int> BindTcp(const std::string& address, std::string* bound) {
  std::string host;
  std::string port;
  if (!SplitHostPort(address, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", address, ": expected unix:///path or host:port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(),
                           &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", address, ": ", gai_strerror(rc)));
  }
  absl::Status error = absl::UnavailableError("no address");
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        listen(fd, SOMAXCONN) == 0) {
      break;
    }
    error = absl::UnavailableError(Errno(absl::StrCat("bind ", address)));
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return error;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const uint16_t bound_port =
      ss.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  *bound = absl::StrCat(address.substr(0, address.rfind(':')), ":", bound_port);
  return fd;
}

}  // namespace

void PeerTable::Set(int fd, Peer peer) {
  absl::MutexLock lock(&mu_);
  peers_[fd] = std::move(peer);
}

std::optional<Peer> PeerTable::Find(absl::string_view grpc_peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") ||
      !absl::SimpleAtoi(grpc_peer, &fd)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

std::string UnixSocketPath(absl::string_view address) {
  if (absl::ConsumePrefix(&address, "unix://")) return std::string(address);
  if (absl::ConsumePrefix(&address, "unix:")) return std::string(address);
  return "";
}

bool IsLoopbackAddress(absl::string_view address) {
  std::string host;
  std::string port;
  if (!SplitHostPort(address, &host, &port) || host.empty()) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) {
    return false;
  }
  bool loopback = found != nullptr;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    loopback = loopback && IsLoopback(ai->ai_addr);
  }
  freeaddrinfo(found);
  return loopback;
}

int RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  constexpr rlim_t kMax = 1 << 20;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, kMax));
}

absl::StatusOr<int> InheritedListenFd() {
  // LISTEN_FDNAMES is not needed: gputuned@.socket has one ListenStream.
  const int n = sd_listen_fds(/*unset_environment=*/1);
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LISTEN_FDS/LISTEN_PID: ", std::strerror(-n)));
  }
  if (n == 0) return -1;
  if (n > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "systemd passed ", n,
        " sockets (LISTEN_FDS); gputuned serves one: give the socket unit "
        "a single ListenStream="));
  }
  return SD_LISTEN_FDS_START;
}

absl::StatusOr<std::string> ListeningUnixSocketPath(int fd) {
  if (sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "descriptor ", fd,
        " is not a listening unix stream socket (ListenStream= must be a "
        "path)"));
  }
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InvalidArgumentError(Errno("getsockname"));
  }
  const size_t offset = offsetof(sockaddr_un, sun_path);
  if (len <= offset || addr.sun_path[0] == '\0') {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor ", fd,
                     " is an unnamed or abstract unix socket: "
                     "gputuned needs a socket file"));
  }
  return std::string(addr.sun_path, strnlen(addr.sun_path, len - offset));
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Adopt(
    int fd, const ListenerOptions& options) {
  absl::StatusOr<std::string> path = ListeningUnixSocketPath(fd);
  if (!path.ok()) return path.status();
  // The accept loop drains until EAGAIN; systemd passes a blocking socket.
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return absl::UnavailableError(Errno("fcntl on the inherited socket"));
  }
  std::unique_ptr<Listener> l(new Listener());
  l->socket_path_ = *path;
  l->address_ = absl::StrCat("unix://", *path);
  l->owns_socket_file_ = false;
  l->listen_fd_ = fd;
  return Finish(std::move(l), options);
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Bind(
    const ListenerOptions& options) {
  std::unique_ptr<Listener> l(new Listener());
  l->socket_path_ = UnixSocketPath(options.address);
  absl::StatusOr<int> fd =
      l->socket_path_.empty() ? BindTcp(options.address, &l->address_)
                              : BindUnix(l->socket_path_, options.socket_mode,
                                         &l->socket_inode_, &l->socket_device_);
  if (!fd.ok()) return fd.status();
  if (!l->socket_path_.empty()) l->address_ = options.address;
  l->listen_fd_ = *fd;
  return Finish(std::move(l), options);
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Finish(
    std::unique_ptr<Listener> l, const ListenerOptions& options) {
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  l->spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (l->wake_fd_ < 0 || l->spare_fd_ < 0) {
    return absl::UnavailableError(Errno("eventfd or /dev/null"));
  }
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const int files = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  // At least a few connections even under a tiny limit.
  l->connection_limit_ = std::max(files - options.reserve_fds, 16);
  l->self_check_limit_ = std::max(files - options.reserve_fds / 2, 17);
  return l;
}

Listener::~Listener() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

void Listener::Start(grpc::Server* server, PeerTable* peers) {
  thread_ = std::thread([this, server, peers] { AcceptLoop(server, peers); });
}

void Listener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  if (!socket_path_.empty() && owns_socket_file_) {
    // Only our own socket: another daemon's (bound after ours was replaced
    // by hand) stays.
    struct stat st {};
    if (stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_inode_ &&
        st.st_dev == socket_device_) {
      unlink(socket_path_.c_str());
    }
  }
}

void Listener::ShedOne() {
  close(spare_fd_);
  spare_fd_ = -1;
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    refused_.fetch_add(1);
  }
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void Listener::AcceptLoop(grpc::Server* server, PeerTable* peers) {
  const pid_t self = getpid();
  absl::Time last_warning = absl::InfinitePast();
  auto warn = [&](absl::string_view what) {
    // One line a minute at most: a flood must not flood the journal too.
    if (absl::Now() - last_warning < absl::Minutes(1)) return;
    last_warning = absl::Now();
    spdlog::warn("{} ({} connections refused so far; limit {} descriptors)",
                 what, refused_.load(), connection_limit_);
  };
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("listener: {}", Errno("poll"));
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    if (fds[1].revents != 0) return;
    // Drain what is waiting, then poll again.
    for (int batch = 0; batch < 256; ++batch) {
      const int fd =
          accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          warn(absl::StrCat("out of file descriptors (", std::strerror(errno),
                            "): dropping new connections until some close"));
          ShedOne();
          // Let connections close before trying again.
          absl::SleepFor(absl::Milliseconds(5));
          break;
        }
        spdlog::error("listener: {}; still accepting", Errno("accept4"));
        absl::SleepFor(absl::Milliseconds(100));
        break;
      }
      Peer peer;
      peer.connection = next_connection_++;
      if (!socket_path_.empty()) ReadCredentials(fd, &peer);
      const bool own = peer.has_credentials && peer.pid == self;
      if (fd >= (own ? self_check_limit_ : connection_limit_)) {
        close(fd);
        refused_.fetch_add(1);
        warn("too many open connections: refusing new ones until some close");
        continue;
      }
      peers->Set(fd, std::move(peer));
      accepted_.fetch_add(1);
      grpc::AddInsecureChannelFromFd(server, fd);
    }
  }
}

absl::StatusOr<int> BindListeningSocket(const std::string& address,
                                        uint32_t socket_mode,
                                        std::string* bound) {
  const std::string path = UnixSocketPath(address);
  if (path.empty()) return BindTcp(address, bound);
  ino_t inode = 0;
  dev_t device = 0;
  absl::StatusOr<int> fd = BindUnix(path, socket_mode, &inode, &device);
  if (fd.ok()) *bound = absl::StrCat("unix:", path);
  return fd;
}

void ReadPeerCredentials(int fd, Peer* peer) { ReadCredentials(fd, peer); }

}  // namespace gputune
