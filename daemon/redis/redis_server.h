// RedisServer: gputuned's Redis-protocol front door (--redis_listen). The
// tuners inference servers already run (Triton's RedisRemoteCacheBackend,
// PyTorch Inductor's remote caches) reach the tune cache through it with no
// code change; docs/integrations.md says how, and which commands it answers.
//
//   absl::StatusOr<std::unique_ptr<RedisServer>> s =
//       RedisServer::Start(options, deps);
//   ... (*s)->Stop();   // before the store and the arbiter go away
//
// One event-loop thread (epoll) serves every connection; it never blocks on
// disk or on another client: writes (SET, MSET, EXPIRE, DEL) and claims run
// on the daemon's store executor and answer back through an eventfd, and a
// connection waits for them without holding up the others. Commands of one
// connection are answered in order (pipelining keeps working).
//
// Values are entries of the store (daemon/redis/redis_keys.h). A SET is
// answered once its entry is durable (TuneStore::Put, or the fleet's
// PersistRecord/Import).
//
// Single flight: a GET or MGET miss on a key matching a tuned pattern answers
// nil to the first asker and makes its connection the holder of an arbiter
// claim on the key (lease options.claim_ttl, through the fleet tier when it
// is on). Other connections' reads of the key wait, up to options.wait, for
// the holder's SET and then answer the value. When the holder's connection
// closes (or the lease lapses) the claim ends and one waiter is granted the
// next claim: it gets nil and becomes the holder.
//
// Bounds: the request reader's (RespLimits); replies waiting to be sent
// (max_output_bytes: the connection is not read until they drain);
// idle_timeout (a connection neither sending nor holding a claim nor
// waiting is closed); reserve_fds (connections that would leave fewer
// descriptors free are closed at once).
#ifndef GPUTUNE_DAEMON_REDIS_REDIS_SERVER_H_
#define GPUTUNE_DAEMON_REDIS_REDIS_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/redis/resp_reader.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {
class Arbiter;
class Authority;
class Clock;
class FleetHooks;
class SerialExecutor;
namespace storage {
class TuneStore;
}
}  // namespace gputune

namespace gputune::redis {

struct RedisServerOptions {
  // unix:/path or host:port (e.g. 127.0.0.1:6390; port 0 picks one).
  std::vector<std::string> addresses;
  uint32_t socket_mode = 0660;  // unix sockets
  // Empty: no AUTH needed (then only loopback TCP and unix sockets).
  std::string password;
  bool allow_insecure_tcp = false;
  absl::Duration claim_ttl = absl::Minutes(10);
  absl::Duration wait = absl::Minutes(10);
  absl::Duration idle_timeout = absl::Minutes(10);  // zero: never
  std::vector<std::string> tuned_patterns;
  // The largest value a SET stores (at most kMaxRedisValueBytes); a larger
  // one is refused with a Redis error and nothing stored. With a fleet, a
  // value whose entry is over the fleet's row bound (kMaxFleetEntryBytes) is
  // kept on this daemon only.
  size_t max_value = 8 << 20;
  // Set for max_value by LimitsFor (daemon.cc): values a little over
  // max_value still get that error rather than a closed connection.
  RespLimits limits;
  size_t max_output_bytes = 32 << 20;
  // One reply at most (an MGET of many large values): a larger one is
  // answered with an error instead, so no connection makes the daemon hold
  // more than this for it.
  size_t max_reply_bytes = 64 << 20;
  int reserve_fds = 64;
};

// The request reader's bounds for a door that stores values up to
// `max_value`: an argument may be max_value + 1 MiB (a SET up to that far
// over the bound is answered an error; beyond it, as any over-long argument,
// closes the connection), and a command and the bytes waiting on a
// connection hold at least one such argument.
RespLimits LimitsFor(size_t max_value);

// What the front door uses of the daemon; every pointer but fleet must be
// set and outlive Stop().
struct RedisServerDeps {
  Arbiter* arbiter = nullptr;
  storage::TuneStore* store = nullptr;
  SerialExecutor* executor = nullptr;
  FleetHooks* fleet = nullptr;  // null without --fleet
  Authority* authority = nullptr;
  const Clock* clock = nullptr;
  v1::Fingerprint fingerprint;  // stamped on the entries written
  std::string version;          // gputune's, for INFO
};

// FAILED_PRECONDITION (saying what to do) when an address is TCP and not
// loopback, unless a password is set and allow_insecure_tcp.
absl::Status CheckExposure(const RedisServerOptions& options);

class RedisServer {
 public:
  // Binds every address and starts the loop. CheckExposure's error, or
  // UNAVAILABLE when an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      const RedisServerOptions& options, const RedisServerDeps& deps);
  ~RedisServer();  // Stop()s

  // Closes the listeners and every connection (their claims are
  // abandoned), waits for the store work they started, and joins the loop.
  // Idempotent.
  void Stop();

  // The bound addresses (unix:/path, host:port with the port chosen).
  const std::vector<std::string>& addresses() const { return bound_; }

  class Loop;  // the event loop (redis_server.cc)

 private:
  RedisServer() = default;
  std::vector<std::string> bound_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace gputune::redis

#endif  // GPUTUNE_DAEMON_REDIS_REDIS_SERVER_H_
