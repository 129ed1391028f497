#include "daemon/redis/redis_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/arbiter.h"
#include "daemon/authority.h"
#include "daemon/clock.h"
#include "daemon/fleet/fleet_store.h"
#include "daemon/fleet_hooks.h"
#include "daemon/listener.h"
#include "daemon/redis/redis_keys.h"
#include "daemon/redis/resp_writer.h"
#include "daemon/serial_executor.h"
#include "proto/entry_summary.h"
#include "proto/key_format.h"
#include "proto/validation.h"
#include "spdlog/spdlog.h"
#include "storage/tune_store.h"

namespace gputune::redis {
namespace {

// The Redis version whose replies the front door gives (HELLO, INFO).
constexpr char kRedisVersion[] = "7.0.15";
constexpr uint64_t kWakeId = 0;
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kReadPerWakeup = 1 << 20;  // then let others run
constexpr absl::Duration kTick = absl::Milliseconds(100);

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

// A key for a log line: printable, bounded.
std::string LogSafeKey(absl::string_view key) {
  std::string out;
  for (unsigned char ch : key.substr(0, 200)) {
    if (ch >= ' ' && ch < 0x7f && ch != '\\') {
      out.push_back(static_cast<char>(ch));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(ch, absl::kZeroPad2));
    }
  }
  if (key.size() > 200) out += "...";
  return out;
}

bool ParseInt(absl::string_view text, int64_t* out) {
  // Redis's string2ll: no spaces, no '+', no leading zeros.
  if (text.empty() || text.size() > 20) return false;
  if (text[0] == '+' || text[0] == ' ' || text.back() == ' ') return false;
  if (text.size() > 1 && text[0] == '0') return false;
  if (text.size() > 2 && text[0] == '-' && text[1] == '0') return false;
  return absl::SimpleAtoi(text, out);
}

constexpr char kNotInteger[] = "ERR value is not an integer or out of range";
constexpr char kSyntax[] = "ERR syntax error";

std::string Arity(absl::string_view command) {
  return absl::StrCat("ERR wrong number of arguments for '", command,
                      "' command");
}

// Redis 7.0's "unknown command" and "unknown subcommand" texts.
std::string UnknownCommand(const RespCommand& args) {
  std::string list;
  for (size_t i = 1; i < args.size() && list.size() < 128; ++i) {
    absl::StrAppend(&list, "'", args[i].substr(0, 128 - list.size()), "' ");
  }
  return absl::StrCat("ERR unknown command '", args[0].substr(0, 128),
                      "', with args beginning with: ", list);
}
std::string UnknownSubcommand(absl::string_view sub, absl::string_view cmd) {
  return absl::StrCat("ERR unknown subcommand '", sub.substr(0, 128), "'. Try ",
                      cmd, " HELP.");
}

struct CommandSpec {
  const char* name;
  int arity;  // Redis's: n exactly, -n at least
};
constexpr CommandSpec kCommands[] = {
    {"get", 2},       {"mget", -2},   {"set", -3},     {"mset", -3},
    {"del", -2},      {"exists", -2}, {"ttl", 2},      {"pttl", 2},
    {"expire", -3},   {"ping", -1},   {"echo", 2},     {"auth", -2},
    {"select", 2},    {"client", -2}, {"hello", -1},   {"quit", -1},
    {"info", -1},     {"dbsize", 1},  {"command", -1}, {"flushdb", -1},
    {"flushall", -1},
};

const CommandSpec* FindCommand(absl::string_view lower) {
  for (const CommandSpec& c : kCommands) {
    if (lower == c.name) return &c;
  }
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------------------
// The loop.
// ---------------------------------------------------------------------------

class RedisServer::Loop {
 public:
  Loop(const RedisServerOptions& options, const RedisServerDeps& deps)
      : options_(options), deps_(deps), tuned_(options.tuned_patterns) {}
  ~Loop() { Stop(); }

  absl::Status Open(std::vector<std::string>* bound);
  void Stop();

 private:
  // A read (GET, MGET) whose tuned keys wait for their holder.
  struct PendingRead {
    uint64_t serial = 0;
    bool mget = false;
    std::vector<std::string> redis_keys;
    std::vector<v1::Key> keys;  // of the tuned misses; empty when none
    std::vector<std::optional<IndexedValue>> values;
    std::vector<uint64_t> watch_ids;  // 0: not watching
    std::vector<bool> done;
    size_t outstanding = 0;
    absl::Time started;
    absl::Time deadline;
  };
  struct Conn {
    explicit Conn(const RespLimits& limits) : reader(limits) {}
    uint64_t id = 0;
    int fd = -1;
    bool unix_socket = false;
    Peer peer;
    RespReader reader;
    std::string out;
    size_t out_sent = 0;
    bool authed = false;
    std::string name;
    absl::Time last_active;
    bool busy = false;  // a command waits for the executor or a holder
    bool close_after_flush = false;
    uint32_t events = 0;
    // Single flight: the claims this connection holds, by key id.
    absl::flat_hash_map<std::string, uint64_t> claims;
    std::unique_ptr<PendingRead> read;
  };
  using ConnFn = std::function<void(Conn*)>;  // null: the connection is gone

  void Run();
  void Post(uint64_t conn, ConnFn fn) ABSL_LOCKS_EXCLUDED(mu_);
  void DrainPosted() ABSL_LOCKS_EXCLUDED(mu_);
  void Accept(int listen_fd, bool unix_socket);
  void OnEvent(Conn& c, uint32_t events);
  void ReadFrom(Conn& c);
  void RunCommands(Conn& c);
  void Flush(Conn& c);
  void UpdateInterest(Conn& c);
  void Close(Conn& c, absl::string_view why);
  void Tick();
  // After an asynchronous command answered: carry on with the next ones.
  void Resume(Conn& c);

  void Execute(Conn& c, RespCommand& args);
  void Get(Conn& c, RespCommand& args, bool mget);
  void ResolveMissing(Conn& c, uint64_t serial, size_t index);
  void OnWatch(Conn& c, uint64_t serial, size_t index,
               const v1::KeyStatus& status);
  void FinishRead(Conn& c);
  void Set(Conn& c, RespCommand& args);
  void MSet(Conn& c, RespCommand& args);
  void Del(Conn& c, RespCommand& args);
  void Expire(Conn& c, RespCommand& args);
  void Ttl(Conn& c, RespCommand& args, bool millis);
  void Exists(Conn& c, RespCommand& args);
  void Count(Conn& c, std::function<std::string(int64_t, int64_t)> reply);
  void FlushDb(Conn& c, RespCommand& args);
  void Hello(Conn& c, RespCommand& args);
  void Client(Conn& c, RespCommand& args);
  void Auth(Conn& c, RespCommand& args);
  std::string InfoText(absl::string_view section, int64_t keys,
                       int64_t expires);
  std::string TooLarge() const {
    return absl::StrCat("ERR value is larger than gputune stores (",
                        options_.max_value, " bytes, --redis_max_value)");
  }

  // The stored, unexpired value of a Redis key; nullopt when none. Reads
  // the in-memory index only.
  std::optional<IndexedValue> Lookup(const v1::Key& key) const;
  // With a fleet: whether `key` has a value of this daemon's fingerprint
  // (HIT, unexpired), the fleet's first one or on its way to the fleet. A
  // key's first value is canonical fleet-wide, so a new one would be
  // refused by the fleet and replaced here by the canonical one: SET, MSET
  // and EXPIRE leave such a key as it is (docs/integrations.md, "Limits").
  bool FleetHolds(const v1::Key& key) const;
  // Runs `work` on the store executor; its reply is appended on the loop
  // and the connection resumes.
  void Async(Conn& c, std::function<std::string()> work);
  // Writes entries (a plain SET: no claim of ours), durable when OK.
  absl::Status PutPlain(const std::vector<v1::Entry>& entries);
  // A SET by a holder: through its claim when it is still live.
  absl::Status PutAsHolder(uint64_t claim_id, const v1::Entry& entry);
  // Deletes key ids (executor thread); returns those that existed.
  absl::StatusOr<std::vector<std::string>> DeleteIds(
      const std::vector<std::string>& ids);
  std::string Holder(const Conn& c) const;
  void ReleaseClaim(Conn& c, const std::string& key_id);

  const RedisServerOptions options_;
  const RedisServerDeps deps_;
  const TunedPatterns tuned_;
  std::vector<int> listen_fds_;
  std::vector<bool> listen_unix_;
  std::vector<std::string> socket_paths_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int connection_limit_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
  std::atomic<size_t> connections_{0};  // INFO reads it on the executor

  // Loop thread only.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_id_ = 1000;  // below: listeners
  uint64_t next_serial_ = 1;
  absl::Time last_tick_;

  absl::Mutex mu_;
  std::deque<std::pair<uint64_t, ConnFn>> posted_ ABSL_GUARDED_BY(mu_);
  // Executor tasks started and not yet posted back (Stop waits for them).
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status RedisServer::Loop::Open(std::vector<std::string>* bound) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (const std::string& address : options_.addresses) {
    const bool unix_socket = !UnixSocketPath(address).empty();
    std::string where;
    absl::StatusOr<int> fd =
        BindListeningSocket(address, options_.socket_mode, &where);
    if (!fd.ok()) {
      return absl::Status(fd.status().code(),
                          absl::StrCat("--redis_listen=", address, ": ",
                                       fd.status().message()));
    }
    ev.events = EPOLLIN;
    ev.data.u64 = listen_fds_.size() + 1;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, *fd, &ev);
    listen_fds_.push_back(*fd);
    listen_unix_.push_back(unix_socket);
    if (unix_socket) socket_paths_.push_back(UnixSocketPath(address));
    bound->push_back(where);
  }
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  connection_limit_ = static_cast<int>(std::min<rlim_t>(
                          limit.rlim_cur, std::numeric_limits<int>::max())) -
                      options_.reserve_fds;
  last_tick_ = absl::Now();
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void RedisServer::Loop::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    stopping_.store(true);
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  // Executor work still running posts to a loop that no longer reads:
  // wait for it, so that it never touches a destroyed loop.
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &in_flight_));
  }
  for (auto& [id, conn] : conns_) {
    for (const auto& [key_id, claim] : conn->claims) {
      (void)deps_.arbiter->Abandon(claim, ClaimKind::kRedis);
      deps_.authority->Release(claim);
    }
    if (conn->read) {
      for (uint64_t w : conn->read->watch_ids) {
        if (w != 0) deps_.arbiter->Unwatch(w);
      }
    }
    close(conn->fd);
  }
  conns_.clear();
  for (int fd : listen_fds_) close(fd);
  for (const std::string& path : socket_paths_) unlink(path.c_str());
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void RedisServer::Loop::Post(uint64_t conn, ConnFn fn) {
  {
    absl::MutexLock lock(&mu_);
    posted_.emplace_back(conn, std::move(fn));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void RedisServer::Loop::DrainPosted() {
  uint64_t count = 0;
  (void)!read(wake_fd_, &count, sizeof(count));
  std::deque<std::pair<uint64_t, ConnFn>> posted;
  {
    absl::MutexLock lock(&mu_);
    posted.swap(posted_);
  }
  for (auto& [id, fn] : posted) {
    auto it = conns_.find(id);
    Conn* c = it == conns_.end() ? nullptr : it->second.get();
    fn(c);
    if (c != nullptr && conns_.contains(id)) UpdateInterest(*c);
  }
}

void RedisServer::Loop::Run() {
  std::vector<epoll_event> events(256);
  while (!stopping_.load()) {
    const int n =
        epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                   static_cast<int>(absl::ToInt64Milliseconds(kTick)));
    for (int i = 0; i < n && !stopping_.load(); ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        DrainPosted();
      } else if (id <= listen_fds_.size()) {
        Accept(listen_fds_[id - 1], listen_unix_[id - 1]);
      } else {
        auto it = conns_.find(id);
        if (it != conns_.end()) OnEvent(*it->second, events[i].events);
      }
    }
    if (absl::Now() - last_tick_ >= kTick) Tick();
  }
}

void RedisServer::Loop::Accept(int listen_fd, bool unix_socket) {
  for (int accepted = 0; accepted < 64; ++accepted) {
    const int fd =
        accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        spdlog::warn("redis: out of file descriptors, not accepting");
      }
      return;
    }
    if (fd >= connection_limit_) {
      close(fd);  // keep descriptors for the daemon itself
      continue;
    }
    auto c = std::make_unique<Conn>(options_.limits);
    c->id = next_id_++;
    c->fd = fd;
    c->unix_socket = unix_socket;
    c->peer.connection = c->id;
    if (unix_socket) ReadPeerCredentials(fd, &c->peer);
    c->authed = options_.password.empty();
    c->last_active = absl::Now();
    Conn& ref = *c;
    conns_.emplace(c->id, std::move(c));
    connections_.store(conns_.size());
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = ref.id;
    ref.events = ev.events;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void RedisServer::Loop::OnEvent(Conn& c, uint32_t events) {
  const uint64_t id = c.id;
  if (events & (EPOLLERR | EPOLLHUP)) return Close(c, "connection reset");
  if (events & EPOLLOUT) {
    Flush(c);
    if (!conns_.contains(id)) return;
    // Commands already read may have waited for the replies to drain.
    if (!c.busy && !c.close_after_flush) RunCommands(c);
    if (!conns_.contains(id)) return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP)) {
    if (c.busy && !(events & EPOLLIN)) {
      // Redis closes a client whose end is closed; so does a waiting read
      // here (the client gave up, e.g. its socket timeout fired).
      return Close(c, "closed by the client");
    }
    ReadFrom(c);
    if (!conns_.contains(id)) return;
  }
  UpdateInterest(c);
}

void RedisServer::Loop::ReadFrom(Conn& c) {
  char buf[kReadChunk];
  size_t total = 0;
  while (total < kReadPerWakeup) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) return Close(c, "closed by the client");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return Close(c, "read error");
    }
    total += static_cast<size_t>(n);
    c.last_active = absl::Now();
    if (absl::Status s = c.reader.Feed(buf, static_cast<size_t>(n)); !s.ok()) {
      spdlog::warn("redis connection {}: {}; closing it", c.id,
                   std::string(s.message()));
      AppendError(&c.out, std::string(s.message()));
      c.close_after_flush = true;
      break;
    }
    if (c.busy) break;  // the rest waits in the socket
  }
  RunCommands(c);
}

void RedisServer::Loop::RunCommands(Conn& c) {
  const uint64_t id = c.id;
  auto output_full = [&] {
    return c.out.size() - c.out_sent >= options_.max_output_bytes;
  };
  while (true) {
    bool at_bound = false;  // stopped by the output bound, not the input
    while (!c.busy && !c.close_after_flush) {
      if (output_full()) {
        at_bound = true;
        break;
      }
      absl::StatusOr<std::optional<RespCommand>> next = c.reader.Next();
      if (!next.ok()) {
        spdlog::warn("redis connection {}: {}; closing it", c.id,
                     std::string(next.status().message()));
        AppendError(&c.out, std::string(next.status().message()));
        c.close_after_flush = true;
        break;
      }
      if (!next->has_value()) break;
      Execute(c, **next);
      if (!conns_.contains(id)) return;
    }
    Flush(c);
    if (!conns_.contains(id)) return;
    // A client that reads as fast as the replies come can take the whole
    // bound in this one Flush. Then nothing would wake the connection again
    // (no bytes to read, none to write) while commands it already sent wait
    // in the reader: run them now.
    if (!at_bound || output_full()) return;
  }
}

void RedisServer::Loop::Flush(Conn& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.out_sent,
                           c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return Close(c, "write error");
    }
    c.out_sent += static_cast<size_t>(n);
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    if (c.close_after_flush) return Close(c, "");
  } else if (c.out_sent > std::max<size_t>(1 << 20, c.out.size() / 2)) {
    // Half of what waits is sent: drop it (so a reply of many MiB, sent a
    // socket buffer at a time, is moved a few times, not once per send).
    c.out.erase(0, c.out_sent);
    c.out_sent = 0;
  }
}

void RedisServer::Loop::UpdateInterest(Conn& c) {
  uint32_t want = EPOLLRDHUP;
  const bool output_full =
      c.out.size() - c.out_sent >= options_.max_output_bytes;
  if (!c.busy && !c.close_after_flush && !output_full) want |= EPOLLIN;
  if (c.out_sent < c.out.size()) want |= EPOLLOUT;
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = want;
}

void RedisServer::Loop::Close(Conn& c, absl::string_view why) {
  if (c.read) {
    spdlog::warn(
        "redis connection {} ({}) {} after waiting {} of --redis_wait={} "
        "for the holder of {}: a client socket timeout shorter than "
        "--redis_wait makes the client give up and tune the key itself",
        c.id, c.name.empty() ? "unnamed" : c.name,
        why.empty() ? std::string("closed") : std::string(why),
        absl::FormatDuration(
            absl::Trunc(absl::Now() - c.read->started, absl::Milliseconds(1))),
        absl::FormatDuration(options_.wait),
        c.read->redis_keys.empty() ? "" : LogSafeKey(c.read->redis_keys[0]));
    for (uint64_t w : c.read->watch_ids) {
      if (w != 0) deps_.arbiter->Unwatch(w);
    }
  }
  for (const auto& [key_id, claim] : c.claims) {
    // The holder is gone: the next reader takes over now, not at the lease.
    absl::StatusOr<Arbiter::AbandonResult> r =
        deps_.arbiter->Abandon(claim, ClaimKind::kRedis);
    deps_.authority->Release(claim);
    if (r.ok()) {
      spdlog::info("redis connection {} closed holding {}: claim {} ended",
                   c.id, key_id, claim);
    }
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  conns_.erase(c.id);  // destroys c
  connections_.store(conns_.size());
}

void RedisServer::Loop::Tick() {
  const absl::Time now = absl::Now();
  last_tick_ = now;
  std::vector<uint64_t> late;
  std::vector<uint64_t> idle;
  for (auto& [id, c] : conns_) {
    if (c->read && now >= c->read->deadline) {
      late.push_back(id);
    } else if (options_.idle_timeout > absl::ZeroDuration() && !c->busy &&
               c->claims.empty() &&
               now - c->last_active > options_.idle_timeout) {
      idle.push_back(id);
    }
  }
  // Answering may run further commands, which may close connections: after
  // the scan, each by id.
  for (uint64_t id : late) {
    auto it = conns_.find(id);
    if (it == conns_.end() || !it->second->read) continue;
    Conn& c = *it->second;
    spdlog::warn(
        "redis connection {}: waited --redis_wait={} for the holder of {}; "
        "answering nil, so this client tunes the key itself",
        id, absl::FormatDuration(options_.wait),
        LogSafeKey(c.read->redis_keys[0]));
    for (size_t i = 0; i < c.read->done.size(); ++i) {
      if (c.read->done[i]) continue;
      if (c.read->watch_ids[i] != 0) {
        deps_.arbiter->Unwatch(c.read->watch_ids[i]);
      }
      c.read->watch_ids[i] = 0;
      c.read->done[i] = true;
    }
    c.read->outstanding = 0;
    FinishRead(c);
    if (conns_.contains(id)) UpdateInterest(c);
  }
  for (uint64_t id : idle) {
    auto it = conns_.find(id);
    if (it != conns_.end()) Close(*it->second, "idle");
  }
}

void RedisServer::Loop::Resume(Conn& c) {
  c.busy = false;
  c.last_active = absl::Now();
  RunCommands(c);
}

// ---------------------------------------------------------------------------
// Commands.
// ---------------------------------------------------------------------------

std::string RedisServer::Loop::Holder(const Conn& c) const {
  return absl::StrCat("redis connection ", c.id,
                      c.name.empty() ? "" : absl::StrCat(" (", c.name, ")"),
                      c.peer.has_credentials ? absl::StrCat(" pid ", c.peer.pid)
                                             : std::string());
}

namespace {
// The unexpired value an index answer holds (HIT and STALE carry the
// entry's summary); nullopt when none.
std::optional<IndexedValue> ValueOfFound(const Arbiter::Found& found,
                                         absl::Time now) {
  std::optional<IndexedValue> value = IndexedValueOf(found.entry);
  if (!value || value->Expired(now)) return std::nullopt;
  return value;
}
}  // namespace

std::optional<IndexedValue> RedisServer::Loop::Lookup(
    const v1::Key& key) const {
  return ValueOfFound(deps_.arbiter->Find(key), deps_.clock->Now());
}

bool RedisServer::Loop::FleetHolds(const v1::Key& key) const {
  if (deps_.fleet == nullptr) return false;
  const Arbiter::Found found = deps_.arbiter->Find(key);
  return found.state == v1::KEY_STATE_HIT &&
         ValueOfFound(found, deps_.clock->Now()).has_value();
}

void RedisServer::Loop::Async(Conn& c, std::function<std::string()> work) {
  c.busy = true;
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  const uint64_t id = c.id;
  deps_.executor->Submit([this, id, work = std::move(work)] {
    std::string reply = work();
    Post(id, [this, reply = std::move(reply)](Conn* c) {
      if (c == nullptr) return;
      c->out += reply;
      Resume(*c);
    });
    absl::MutexLock lock(&mu_);
    --in_flight_;
  });
}

namespace {
// Whether the fleet can hold `entry`: a fleet row holds at most
// kMaxFleetEntryBytes (a CHECK in its schema). A larger value stays here.
bool FitsFleet(const v1::Entry& entry) {
  return entry.ByteSizeLong() <= fleet::kMaxFleetEntryBytes;
}
void LogLocalOnly(const v1::Entry& entry) {
  spdlog::info(
      "redis: the value of {} is {} bytes, more than a fleet row holds ({}): "
      "kept on this daemon only, not published",
      KeyText(entry.key()), entry.execution().data().size(),
      fleet::kMaxFleetEntryBytes);
}
}  // namespace

absl::Status RedisServer::Loop::PutPlain(
    const std::vector<v1::Entry>& entries) {
  std::vector<v1::Entry> local;
  if (deps_.fleet != nullptr) {
    std::vector<v1::Entry> shared;
    for (const v1::Entry& entry : entries) {
      if (FitsFleet(entry)) {
        shared.push_back(entry);
      } else {
        LogLocalOnly(entry);
        local.push_back(entry);
      }
    }
    if (!shared.empty()) {
      if (absl::Status s = deps_.fleet->Import(shared); !s.ok()) return s;
    }
    if (local.empty()) return absl::OkStatus();
  }
  const std::vector<v1::Entry>& put = deps_.fleet != nullptr ? local : entries;
  if (absl::Status s = deps_.store->PutAll(put); !s.ok()) return s;
  deps_.arbiter->Install(put);
  return absl::OkStatus();
}

absl::Status RedisServer::Loop::PutAsHolder(uint64_t claim_id,
                                            const v1::Entry& entry) {
  absl::StatusOr<Arbiter::RecordTicket> ticket =
      deps_.arbiter->BeginRecord(claim_id, ClaimKind::kRedis);
  if (!ticket.ok()) return PutPlain({entry});  // the lease lapsed: a plain SET
  // Too large for the fleet: recorded here only; the fleet claim behind the
  // local one is released when the fleet tier sees the key is no longer
  // being tuned here.
  const bool shared = deps_.fleet != nullptr && FitsFleet(entry);
  if (deps_.fleet != nullptr && !shared) LogLocalOnly(entry);
  absl::Status s =
      shared ? deps_.fleet->PersistRecord(entry) : deps_.store->Put(entry);
  if (!s.ok()) {
    deps_.arbiter->CancelRecord(*ticket);
    return s;
  }
  deps_.arbiter->CommitRecord(*ticket, entry);
  if (shared) deps_.fleet->RecordCommitted(ticket->key);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RedisServer::Loop::DeleteIds(
    const std::vector<std::string>& ids) {
  absl::StatusOr<std::vector<std::string>> gone = deps_.store->Delete(ids);
  if (gone.ok() && !gone->empty()) deps_.arbiter->Erase(*gone);
  return gone;
}

void RedisServer::Loop::ReleaseClaim(Conn& c, const std::string& key_id) {
  auto it = c.claims.find(key_id);
  if (it == c.claims.end()) return;
  deps_.authority->Release(it->second);
  c.claims.erase(it);
}

namespace {
std::string StoreError(const absl::Status& s) {
  return absl::StrCat("-ERR gputune could not store the value: ",
                      std::string(s.message()).substr(0, 200), "\r\n");
}
}  // namespace

void RedisServer::Loop::Execute(Conn& c, RespCommand& args) {
  const std::string name = Lower(args[0]);
  const CommandSpec* spec = FindCommand(name);
  if (spec == nullptr) return AppendError(&c.out, UnknownCommand(args));
  const int argc = static_cast<int>(args.size());
  if ((spec->arity > 0 && argc != spec->arity) ||
      (spec->arity < 0 && argc < -spec->arity)) {
    return AppendError(&c.out, Arity(name));
  }
  if (!c.authed && name != "auth" && name != "hello" && name != "quit") {
    return AppendError(&c.out, "NOAUTH Authentication required.");
  }
  if (name == "get") return Get(c, args, false);
  if (name == "mget") return Get(c, args, true);
  if (name == "set") return Set(c, args);
  if (name == "mset") return MSet(c, args);
  if (name == "del") return Del(c, args);
  if (name == "exists") return Exists(c, args);
  if (name == "ttl") return Ttl(c, args, false);
  if (name == "pttl") return Ttl(c, args, true);
  if (name == "expire") return Expire(c, args);
  if (name == "ping") {
    if (argc > 2) return AppendError(&c.out, Arity(name));
    return argc == 1 ? AppendSimple(&c.out, "PONG")
                     : AppendBulk(&c.out, args[1]);
  }
  if (name == "echo") return AppendBulk(&c.out, args[1]);
  if (name == "auth") return Auth(c, args);
  if (name == "hello") return Hello(c, args);
  if (name == "client") return Client(c, args);
  if (name == "quit") {
    AppendSimple(&c.out, "OK");
    c.close_after_flush = true;
    return;
  }
  if (name == "select") {
    int64_t db = 0;
    if (!ParseInt(args[1], &db)) return AppendError(&c.out, kNotInteger);
    if (db != 0) return AppendError(&c.out, "ERR DB index is out of range");
    return AppendSimple(&c.out, "OK");
  }
  if (name == "dbsize") {
    return Count(c, [](int64_t keys, int64_t) {
      std::string out;
      AppendInteger(&out, keys);
      return out;
    });
  }
  if (name == "info") {
    const std::string section = argc >= 2 ? Lower(args[1]) : "default";
    return Count(c, [this, section](int64_t keys, int64_t expires) {
      std::string out;
      AppendBulk(&out, InfoText(section, keys, expires));
      return out;
    });
  }
  if (name == "command") {
    if (argc == 1) return AppendArrayHeader(&c.out, 0);
    const std::string sub = Lower(args[1]);
    if (sub == "docs" || sub == "info") return AppendArrayHeader(&c.out, 0);
    if (sub == "count") {
      if (argc != 2) return AppendError(&c.out, Arity("command|count"));
      return AppendInteger(&c.out, static_cast<int64_t>(std::size(kCommands)));
    }
    return AppendError(&c.out, UnknownSubcommand(args[1], "COMMAND"));
  }
  if (name == "flushdb" || name == "flushall") return FlushDb(c, args);
}

void RedisServer::Loop::Get(Conn& c, RespCommand& args, bool mget) {
  auto read = std::make_unique<PendingRead>();
  read->mget = mget;
  const size_t n = args.size() - 1;
  read->values.resize(n);
  read->watch_ids.assign(n, 0);
  read->done.assign(n, true);
  std::vector<size_t> missing;
  // The key ids of the keys short enough to be stored (the others are
  // nil), looked up without building a v1::Key: the hit path.
  std::vector<std::string> ids;
  std::vector<size_t> storable_index;
  ids.reserve(n);
  std::string id;
  for (size_t i = 0; i < n; ++i) {
    if (KeyIdFor(args[i + 1], &id)) {
      ids.push_back(std::move(id));
      storable_index.push_back(i);
    }
    read->redis_keys.push_back(std::move(args[i + 1]));
  }
  // One index pass for all keys (the reader lock once per few hundred).
  const std::vector<Arbiter::Found> found =
      deps_.arbiter->FindIds(ids, kRedisCandidateSet);
  const absl::Time now = deps_.clock->Now();
  for (size_t j = 0; j < found.size(); ++j) {
    const size_t i = storable_index[j];
    if (std::optional<IndexedValue> v = ValueOfFound(found[j], now)) {
      read->values[i] = std::move(v);
    } else if (tuned_.Matches(read->redis_keys[i]) &&
               !c.claims.contains(ids[j])) {
      // Single flight needs the key itself (claims, watches).
      if (read->keys.empty()) read->keys.resize(n);
      read->keys[i] = *TuneKeyFor(read->redis_keys[i]);
      read->done[i] = false;
      missing.push_back(i);
    }
  }
  if (missing.empty()) {
    c.read = std::move(read);
    return FinishRead(c);
  }
  read->serial = next_serial_++;
  read->outstanding = missing.size();
  read->started = absl::Now();
  read->deadline = read->started + options_.wait;
  c.read = std::move(read);
  c.busy = true;
  for (size_t i : missing) ResolveMissing(c, c.read->serial, i);
}

// A tuned key that has no value: claim it (on the executor: a claim may
// write to the store, or ask the fleet). GRANTED: this connection is the
// holder and gets nil; PENDING: wait for the holder through a watch.
void RedisServer::Loop::ResolveMissing(Conn& c, uint64_t serial, size_t index) {
  const v1::Key key = c.read->keys[index];
  const std::string holder = Holder(c);
  const uint64_t id = c.id;
  const absl::Duration ttl = options_.claim_ttl;
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  deps_.executor->Submit([this, id, serial, index, key, holder, ttl] {
    auto answer = [this, id, serial, index,
                   key](absl::StatusOr<v1::ClaimResponse> r) {
      Post(id, [this, serial, index, key, r = std::move(r)](Conn* c) {
        const bool granted =
            r.ok() && r->outcome() == v1::CLAIM_OUTCOME_GRANTED;
        if (c == nullptr || !c->read || c->read->serial != serial) {
          // Asked for a connection that is gone (or a read that ended):
          // nobody will SET it.
          if (granted)
            (void)deps_.arbiter->Abandon(r->claim().claim_id(),
                                         ClaimKind::kRedis);
          return;
        }
        PendingRead& read = *c->read;
        if (granted) {
          const uint64_t claim = r->claim().claim_id();
          c->claims[KeyId(key)] = claim;
          deps_.authority->Bind(claim, absl::StrCat("redis:", c->id));
          spdlog::debug("redis connection {} holds {} (claim {})", c->id,
                        LogSafeKey(read.redis_keys[index]), claim);
          read.done[index] = true;
          --read.outstanding;
        } else if (r.ok() && r->outcome() == v1::CLAIM_OUTCOME_PENDING) {
          if (read.watch_ids[index] == 0) {
            read.watch_ids[index] = deps_.arbiter->Watch(
                key,
                [this, id = c->id, serial, index](const v1::KeyStatus& status) {
                  Post(id, [this, serial, index, status](Conn* c) {
                    if (c != nullptr) OnWatch(*c, serial, index, status);
                  });
                });
          }
          return;
        } else {
          // HIT (set meanwhile), BACKOFF or an error: answer what is there.
          read.values[index] = Lookup(key);
          read.done[index] = true;
          --read.outstanding;
        }
        if (read.outstanding == 0) FinishRead(*c);
      });
      // Last: the fleet may answer on its own thread after the executor
      // task ended, and Stop waits for this.
      absl::MutexLock lock(&mu_);
      --in_flight_;
    };
    // An expired value still in the index makes the key a HIT: drop it.
    const std::optional<IndexedValue> v =
        IndexedValueOf(deps_.arbiter->Find(key).entry);
    if (v && v->Expired(deps_.clock->Now())) (void)DeleteIds({KeyId(key)});
    if (deps_.fleet != nullptr) {
      deps_.fleet->Claim(key, holder, ttl, ClaimKind::kRedis,
                         absl::InfiniteFuture(), answer);
    } else {
      answer(deps_.arbiter->Claim(key, holder, ttl, ClaimKind::kRedis));
    }
  });
}

void RedisServer::Loop::OnWatch(Conn& c, uint64_t serial, size_t index,
                                const v1::KeyStatus& status) {
  if (!c.read || c.read->serial != serial || c.read->done[index]) return;
  PendingRead& read = *c.read;
  if (status.state() == v1::KEY_STATE_PENDING) return;  // still tuning
  deps_.arbiter->Unwatch(read.watch_ids[index]);
  read.watch_ids[index] = 0;
  if (status.state() == v1::KEY_STATE_MISS) {
    // The holder left without a SET: try to become the holder.
    return ResolveMissing(c, serial, index);
  }
  read.values[index] = Lookup(read.keys[index]);
  read.done[index] = true;
  if (--read.outstanding == 0) FinishRead(c);
}

void RedisServer::Loop::FinishRead(Conn& c) {
  std::unique_ptr<PendingRead> read = std::move(c.read);
  size_t bytes = 0;
  for (const std::optional<IndexedValue>& v : read->values) {
    bytes += v ? v->value.size() : 0;
  }
  if (bytes > options_.max_reply_bytes) {
    // An MGET of many large values (or one repeated): refused rather than
    // built, so that one command cannot make the daemon hold gigabytes.
    AppendError(&c.out,
                absl::StrCat("ERR the values asked for are ", bytes,
                             " bytes, more than gputune answers at once (",
                             options_.max_reply_bytes, "): ask for fewer"));
    if (c.busy) Resume(c);
    return;
  }
  // One allocation for the whole reply (an MGET of 1,000 values otherwise
  // grows the buffer a dozen times, moving it each time).
  c.out.reserve(c.out.size() + bytes + 32 * (read->values.size() + 1));
  if (read->mget) AppendArrayHeader(&c.out, read->values.size());
  for (const std::optional<IndexedValue>& v : read->values) {
    if (v) {
      AppendBulk(&c.out, v->value);
    } else {
      AppendNil(&c.out);
    }
  }
  if (c.busy) Resume(c);
}

namespace {
// EX/PX/EXPIRE's argument as an expiry time; nullopt when Redis calls it an
// invalid expire time (not positive, or overflowing).
std::optional<int64_t> ExpiryAt(int64_t amount, bool seconds, int64_t now_ms) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (amount <= 0) return std::nullopt;
  if (seconds && amount > kMax / 1000) return std::nullopt;
  const int64_t ms = seconds ? amount * 1000 : amount;
  if (ms > kMax - now_ms) return std::nullopt;
  return now_ms + ms;
}
}  // namespace

void RedisServer::Loop::Set(Conn& c, RespCommand& args) {
  bool nx = false, xx = false, get = false, keepttl = false;
  std::optional<int64_t> expires;
  bool has_expiry = false;
  const int64_t now_ms = absl::ToUnixMillis(deps_.clock->Now());
  for (size_t i = 3; i < args.size(); ++i) {
    const std::string opt = Lower(args[i]);
    const bool last = i + 1 == args.size();
    if (opt == "nx" && !xx) {
      nx = true;
    } else if (opt == "xx" && !nx) {
      xx = true;
    } else if (opt == "get") {
      get = true;
    } else if (opt == "keepttl" && !has_expiry) {
      keepttl = true;
    } else if ((opt == "ex" || opt == "px" || opt == "exat" || opt == "pxat") &&
               !keepttl && !has_expiry && !last) {
      int64_t amount = 0;
      if (!ParseInt(args[++i], &amount))
        return AppendError(&c.out, kNotInteger);
      has_expiry = true;
      if (opt == "exat" || opt == "pxat") {
        expires = ExpiryAt(amount, opt == "exat", 0);
      } else {
        expires = ExpiryAt(amount, opt == "ex", now_ms);
      }
      if (!expires) {
        return AppendError(&c.out, "ERR invalid expire time in 'set' command");
      }
    } else {
      return AppendError(&c.out, kSyntax);
    }
  }
  absl::StatusOr<v1::Key> key = TuneKeyFor(args[1]);
  if (!key.ok()) return AppendError(&c.out, key.status().message());
  if (args[2].size() > options_.max_value) {
    return AppendError(&c.out, TooLarge());
  }
  const std::string key_id = KeyId(*key);
  auto claim = c.claims.find(key_id);
  const uint64_t claim_id = claim == c.claims.end() ? 0 : claim->second;
  ReleaseClaim(c, key_id);  // answered by this SET, whatever it does
  StoredValue value{std::move(args[2]), expires};
  const std::string holder = Holder(c);
  Async(c,
        [this, key = *key, value = std::move(value), nx, xx, get, keepttl,
         claim_id, holder]() mutable -> std::string {
          std::optional<IndexedValue> old = Lookup(key);
          std::string reply;
          if (get) {
            if (old) {
              AppendBulk(&reply, old->value);
            } else {
              AppendNil(&reply);
            }
          }
          if ((nx && old) || (xx && !old)) {
            if (claim_id != 0)
              (void)deps_.arbiter->Abandon(claim_id, ClaimKind::kRedis);
            if (!get) AppendNil(&reply);
            return reply;
          }
          if (old && FleetHolds(key)) {
            // Not written, so that GET answers what the fleet holds from now
            // on, not for a moment the value it will take back.
            if (claim_id != 0)
              (void)deps_.arbiter->Abandon(claim_id, ClaimKind::kRedis);
            if (!get) AppendSimple(&reply, "OK");
            return reply;
          }
          if (keepttl && old) value.expires_at_ms = old->expires_at_ms;
          const v1::Entry entry = EntryFor(key, value, deps_.clock->Now(),
                                           deps_.fingerprint, holder);
          absl::Status s =
              claim_id != 0 ? PutAsHolder(claim_id, entry) : PutPlain({entry});
          if (!s.ok()) {
            spdlog::error("redis SET of {} failed: {}", KeyText(key),
                          std::string(s.message()));
            return StoreError(s);
          }
          if (!get) AppendSimple(&reply, "OK");
          return reply;
        });
}

void RedisServer::Loop::MSet(Conn& c, RespCommand& args) {
  if (args.size() % 2 != 1) return AppendError(&c.out, Arity("mset"));
  struct Item {
    v1::Key key;
    StoredValue value;
    uint64_t claim_id = 0;
  };
  std::vector<Item> items;
  for (size_t i = 1; i + 1 < args.size(); i += 2) {
    absl::StatusOr<v1::Key> key = TuneKeyFor(args[i]);
    if (!key.ok()) return AppendError(&c.out, key.status().message());
    if (args[i + 1].size() > options_.max_value) {
      return AppendError(&c.out, TooLarge());
    }
    items.push_back({*key, StoredValue{std::move(args[i + 1]), std::nullopt}});
  }
  for (Item& item : items) {
    const std::string key_id = KeyId(item.key);
    auto claim = c.claims.find(key_id);
    if (claim != c.claims.end()) item.claim_id = claim->second;
    ReleaseClaim(c, key_id);
  }
  const std::string holder = Holder(c);
  Async(c, [this, items = std::move(items), holder]() -> std::string {
    const absl::Time now = deps_.clock->Now();
    // Later values of a repeated key win, as in Redis.
    absl::flat_hash_map<std::string, size_t> last;
    for (size_t i = 0; i < items.size(); ++i) last[KeyId(items[i].key)] = i;
    std::vector<v1::Entry> plain;
    for (size_t i = 0; i < items.size(); ++i) {
      if (last[KeyId(items[i].key)] != i) continue;
      if (FleetHolds(items[i].key)) {  // its first value stays
        if (items[i].claim_id != 0)
          (void)deps_.arbiter->Abandon(items[i].claim_id, ClaimKind::kRedis);
        continue;
      }
      v1::Entry entry = EntryFor(items[i].key, items[i].value, now,
                                 deps_.fingerprint, holder);
      if (items[i].claim_id != 0) {
        if (absl::Status s = PutAsHolder(items[i].claim_id, entry); !s.ok()) {
          return StoreError(s);
        }
      } else {
        plain.push_back(std::move(entry));
      }
    }
    if (!plain.empty()) {
      if (absl::Status s = PutPlain(plain); !s.ok()) return StoreError(s);
    }
    return "+OK\r\n";
  });
}

void RedisServer::Loop::Del(Conn& c, RespCommand& args) {
  if (!deps_.authority->IsOperator(c.peer)) {
    return AppendError(
        &c.out, "NOPERM this user has no permissions to run the 'del' command");
  }
  std::vector<v1::Key> keys;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::StatusOr<v1::Key> key = TuneKeyFor(args[i]);
    if (key.ok()) keys.push_back(*key);
  }
  Async(c, [this, keys = std::move(keys)]() -> std::string {
    int64_t live = 0;
    std::vector<std::string> ids;
    absl::flat_hash_map<std::string, bool> seen;
    for (const v1::Key& key : keys) {
      const std::string id = KeyId(key);
      if (!seen.emplace(id, true).second) continue;
      if (Lookup(key)) ++live;  // an expired key does not count
      ids.push_back(id);
    }
    absl::StatusOr<std::vector<std::string>> gone = DeleteIds(ids);
    if (!gone.ok()) return StoreError(gone.status());
    std::string out;
    AppendInteger(&out, live);
    return out;
  });
}

void RedisServer::Loop::Exists(Conn& c, RespCommand& args) {
  int64_t n = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::StatusOr<v1::Key> key = TuneKeyFor(args[i]);
    if (key.ok() && Lookup(*key)) ++n;
  }
  AppendInteger(&c.out, n);
}

void RedisServer::Loop::Ttl(Conn& c, RespCommand& args, bool millis) {
  absl::StatusOr<v1::Key> key = TuneKeyFor(args[1]);
  std::optional<IndexedValue> v;
  if (key.ok()) v = Lookup(*key);
  if (!v) return AppendInteger(&c.out, -2);
  if (!v->expires_at_ms) return AppendInteger(&c.out, -1);
  int64_t left = std::max<int64_t>(
      0, *v->expires_at_ms - absl::ToUnixMillis(deps_.clock->Now()));
  AppendInteger(&c.out, millis ? left : (left + 500) / 1000);
}

void RedisServer::Loop::Expire(Conn& c, RespCommand& args) {
  int64_t seconds = 0;
  if (!ParseInt(args[2], &seconds)) return AppendError(&c.out, kNotInteger);
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t i = 3; i < args.size(); ++i) {
    const std::string opt = Lower(args[i]);
    if (opt == "nx") {
      nx = true;
    } else if (opt == "xx") {
      xx = true;
    } else if (opt == "gt") {
      gt = true;
    } else if (opt == "lt") {
      lt = true;
    } else {
      return AppendError(&c.out,
                         absl::StrCat("ERR Unsupported option ", args[i]));
    }
  }
  if (nx && (xx || gt || lt)) {
    return AppendError(
        &c.out,
        "ERR NX and XX, GT or LT options at the same time are not compatible");
  }
  if (gt && lt) {
    return AppendError(
        &c.out, "ERR GT and LT options at the same time are not compatible");
  }
  absl::StatusOr<v1::Key> key = TuneKeyFor(args[1]);
  if (!key.ok()) return AppendInteger(&c.out, 0);
  const int64_t now_ms = absl::ToUnixMillis(deps_.clock->Now());
  const bool remove = seconds <= 0;
  std::optional<int64_t> at;
  if (!remove) {
    at = ExpiryAt(seconds, true, now_ms);
    if (!at) {
      return AppendError(&c.out, "ERR invalid expire time in 'expire' command");
    }
  }
  const std::string holder = Holder(c);
  Async(
      c,
      [this, key = *key, remove, at, nx, xx, gt, lt, now_ms,
       holder]() -> std::string {
        std::optional<IndexedValue> v = Lookup(key);
        if (!v) return ":0\r\n";
        // The fleet's entry, expiry included, would come back.
        if (!remove && FleetHolds(key)) return ":0\r\n";
        const int64_t new_at = remove ? now_ms : *at;
        const bool has = v->expires_at_ms.has_value();
        if ((nx && has) || (xx && !has) ||
            (gt && (!has || new_at <= *v->expires_at_ms)) ||
            (lt && has && new_at >= *v->expires_at_ms)) {
          return ":0\r\n";
        }
        if (remove) {
          absl::StatusOr<std::vector<std::string>> gone =
              DeleteIds({KeyId(key)});
          if (!gone.ok()) return StoreError(gone.status());
          return ":1\r\n";
        }
        const StoredValue renewed{std::string(v->value), new_at};
        if (absl::Status s = PutPlain({EntryFor(
                key, renewed, deps_.clock->Now(), deps_.fingerprint, holder)});
            !s.ok()) {
          return StoreError(s);
        }
        return ":1\r\n";
      });
}

void RedisServer::Loop::Count(
    Conn& c, std::function<std::string(int64_t, int64_t)> reply) {
  Async(c, [this, reply = std::move(reply)]() -> std::string {
    storage::EntryQuery query;
    query.op = kRedisOp;
    int64_t keys = 0, expires = 0;
    const absl::Time now = deps_.clock->Now();
    std::string after;
    // Pages of full entries: values may be MiB each (--redis_max_value).
    constexpr int kPage = 64;
    while (true) {
      absl::StatusOr<storage::ListPage> page =
          deps_.store->List(query, after, kPage);
      if (!page.ok()) return StoreError(page.status());
      for (const v1::Entry& entry : page->entries) {
        if (entry.execution().kernel() != kValueKernel) continue;
        const std::optional<int64_t> at = ExpiresAt(entry);  // no copy
        if (ExpiredAt(at, now)) continue;
        ++keys;
        if (at) ++expires;
      }
      if (page->rows < kPage) break;
      after = page->last_key_id;
    }
    return reply(keys, expires);
  });
}

void RedisServer::Loop::FlushDb(Conn& c, RespCommand& args) {
  const std::string name = Lower(args[0]);
  if (args.size() > 2 || (args.size() == 2 && Lower(args[1]) != "async" &&
                          Lower(args[1]) != "sync")) {
    return AppendError(&c.out, kSyntax);
  }
  if (!deps_.authority->IsOperator(c.peer)) {
    return AppendError(&c.out,
                       absl::StrCat("NOPERM this user has no permissions to "
                                    "run the '",
                                    name, "' command"));
  }
  Async(c, [this]() -> std::string {
    storage::EntryQuery query;
    query.op = kRedisOp;
    absl::StatusOr<std::vector<std::string>> gone =
        deps_.store->DeleteMatching(query);
    if (!gone.ok()) return StoreError(gone.status());
    if (!gone->empty()) deps_.arbiter->Erase(*gone);
    spdlog::info("redis FLUSHDB: {} keys deleted", gone->size());
    return "+OK\r\n";
  });
}

void RedisServer::Loop::Auth(Conn& c, RespCommand& args) {
  if (args.size() > 3) return AppendError(&c.out, kSyntax);
  if (options_.password.empty()) {
    if (args.size() == 2) {
      return AppendError(
          &c.out,
          "ERR AUTH <password> called without any password configured for "
          "the default user. Are you sure your configuration is correct?");
    }
  }
  const bool user_ok = args.size() == 2 || args[1] == "default";
  const std::string& password = args.back();
  if (user_ok && !options_.password.empty() && password == options_.password) {
    c.authed = true;
    return AppendSimple(&c.out, "OK");
  }
  if (user_ok && options_.password.empty()) {
    // "default" with any password: Redis's nopass user accepts it.
    return AppendSimple(&c.out, "OK");
  }
  spdlog::warn("redis connection {}: AUTH failed", c.id);
  AppendError(&c.out,
              "WRONGPASS invalid username-password pair or user is disabled.");
}

void RedisServer::Loop::Hello(Conn& c, RespCommand& args) {
  if (args.size() >= 2) {
    int64_t proto = 0;
    if (!ParseInt(args[1], &proto)) {
      return AppendError(
          &c.out, "ERR Protocol version is not an integer or out of range");
    }
    // RESP3 is not spoken: refused as a RESP2-only server refuses it.
    if (proto != 2) {
      return AppendError(&c.out, "NOPROTO unsupported protocol version");
    }
  }
  std::optional<std::string> setname;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string opt = Lower(args[i]);
    const size_t left = args.size() - i - 1;
    if (opt == "auth" && left >= 2) {
      const bool ok =
          (args[i + 1] == "default") &&
          (options_.password.empty() || args[i + 2] == options_.password);
      if (!ok) {
        return AppendError(
            &c.out,
            "WRONGPASS invalid username-password pair or user is disabled.");
      }
      c.authed = true;
      i += 2;
    } else if (opt == "setname" && left >= 1) {
      setname = args[++i];
    } else {
      return AppendError(
          &c.out,
          absl::StrCat("ERR Syntax error in HELLO option '", args[i], "'"));
    }
  }
  if (!c.authed) {
    return AppendError(
        &c.out,
        "NOAUTH HELLO must be called with the client already authenticated, "
        "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
        "authenticate the client and select the RESP protocol version at the "
        "same time");
  }
  if (setname) c.name = *setname;
  AppendArrayHeader(&c.out, 14);
  AppendBulk(&c.out, "server");
  AppendBulk(&c.out, "redis");
  AppendBulk(&c.out, "version");
  AppendBulk(&c.out, kRedisVersion);
  AppendBulk(&c.out, "proto");
  AppendInteger(&c.out, 2);
  AppendBulk(&c.out, "id");
  AppendInteger(&c.out, static_cast<int64_t>(c.id));
  AppendBulk(&c.out, "mode");
  AppendBulk(&c.out, "standalone");
  AppendBulk(&c.out, "role");
  AppendBulk(&c.out, "master");
  AppendBulk(&c.out, "modules");
  AppendArrayHeader(&c.out, 0);
}

void RedisServer::Loop::Client(Conn& c, RespCommand& args) {
  const std::string sub = Lower(args[1]);
  if (sub == "setname") {
    if (args.size() != 3) return AppendError(&c.out, Arity("client|setname"));
    for (unsigned char ch : args[2]) {
      if (ch < '!' || ch > '~') {
        return AppendError(&c.out,
                           "ERR Client names cannot contain spaces, newlines "
                           "or special characters.");
      }
    }
    c.name = args[2];
    return AppendSimple(&c.out, "OK");
  }
  if (sub == "getname") {
    if (args.size() != 2) return AppendError(&c.out, Arity("client|getname"));
    return c.name.empty() ? AppendNil(&c.out) : AppendBulk(&c.out, c.name);
  }
  if (sub == "id") {
    if (args.size() != 2) return AppendError(&c.out, Arity("client|id"));
    return AppendInteger(&c.out, static_cast<int64_t>(c.id));
  }
  if (sub == "setinfo") {  // Redis 7.2's, which redis-py 5 sends
    if (args.size() != 4) return AppendError(&c.out, Arity("client|setinfo"));
    const std::string attr = Lower(args[2]);
    if (attr != "lib-name" && attr != "lib-ver") {
      return AppendError(
          &c.out, absl::StrCat("ERR Unrecognized option '", args[2], "'"));
    }
    return AppendSimple(&c.out, "OK");
  }
  AppendError(&c.out, UnknownSubcommand(args[1], "CLIENT"));
}

std::string RedisServer::Loop::InfoText(absl::string_view section, int64_t keys,
                                        int64_t expires) {
  const bool all =
      section == "default" || section == "all" || section == "everything";
  std::string out;
  if (all || section == "server") {
    absl::StrAppend(
        &out, "# Server\r\n", "redis_version:", kRedisVersion, "\r\n",
        "redis_mode:standalone\r\n", "gputune_version:", deps_.version, "\r\n",
        "process_id:", getpid(), "\r\n", "multiplexing_api:epoll\r\n");
  }
  if (all || section == "clients") {
    if (!out.empty()) out += "\r\n";
    absl::StrAppend(&out, "# Clients\r\n",
                    "connected_clients:", connections_.load(), "\r\n");
  }
  if (all || section == "keyspace") {
    if (!out.empty()) out += "\r\n";
    out += "# Keyspace\r\n";
    if (keys > 0) {
      absl::StrAppend(&out, "db0:keys=", keys, ",expires=", expires,
                      ",avg_ttl=0\r\n");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------

RespLimits LimitsFor(size_t max_value) {
  RespLimits limits;
  limits.max_bulk_bytes =
      std::max(limits.max_bulk_bytes, max_value + (size_t{1} << 20));
  limits.max_command_bytes =
      std::max(limits.max_command_bytes, limits.max_bulk_bytes + (1 << 20));
  limits.max_buffered_bytes =
      std::max(limits.max_buffered_bytes, limits.max_command_bytes + (1 << 20));
  return limits;
}

absl::Status CheckExposure(const RedisServerOptions& options) {
  for (const std::string& address : options.addresses) {
    if (!UnixSocketPath(address).empty() || IsLoopbackAddress(address)) {
      continue;
    }
    if (options.password.empty() || !options.allow_insecure_tcp) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--redis_listen=", address,
          " is not a loopback address: anyone on the network could read and "
          "write the cache. Use a unix socket or 127.0.0.1, or set "
          "--redis_password_file and pass --allow_insecure_tcp if the network "
          "is trusted"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    const RedisServerOptions& options, const RedisServerDeps& deps) {
  if (absl::Status s = CheckExposure(options); !s.ok()) return s;
  std::unique_ptr<RedisServer> server(new RedisServer());
  server->loop_ = std::make_unique<Loop>(options, deps);
  if (absl::Status s = server->loop_->Open(&server->bound_); !s.ok()) {
    return s;
  }
  for (const std::string& a : server->bound_) {
    spdlog::info("redis front door serving on {}{}", a,
                 options.password.empty() ? "" : " (AUTH required)");
  }
  return server;
}

RedisServer::~RedisServer() { Stop(); }

void RedisServer::Stop() {
  if (loop_) loop_->Stop();
}

}  // namespace gputune::redis
