// Rpc: one daemon connection as the client uses it: the stubs, the circuit
// breaker, and the translation of gRPC failures into errors that say what to
// do ("cannot reach gputuned at unix:///run/gputuned/gpu0.sock: is the service
// running? systemctl status gputuned@0").
//
//   v1::LookupResponse response;
//   absl::Status s = rpc.Call(&v1::TuneService::Stub::Lookup, request,
//                             &response, absl::Milliseconds(250));
//
// Thread-safe.
#ifndef GPUTUNE_CLIENT_SRC_RPC_H_
#define GPUTUNE_CLIENT_SRC_RPC_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/src/circuit_breaker.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace gputune::client_internal {

// A channel and its stubs. Replaced as a whole when the channel is stuck.
struct Connection {
  explicit Connection(std::shared_ptr<grpc::Channel> channel);

  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::TuneService::Stub> tune;
  const std::unique_ptr<v1::AdminService::Stub> admin;

  template <typename Stub>
  Stub* StubFor() const;
};

template <>
inline v1::TuneService::Stub* Connection::StubFor<v1::TuneService::Stub>()
    const {
  return tune.get();
}
template <>
inline v1::AdminService::Stub* Connection::StubFor<v1::AdminService::Stub>()
    const {
  return admin.get();
}

class Rpc {
 public:
  // Makes a fresh channel to the endpoint (null: the channel was given and is
  // kept whatever its state).
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>()>;

  Rpc(std::string endpoint, std::shared_ptr<grpc::Channel> channel,
      ChannelFactory factory, const BreakerOptions& breaker);

  // One unary call on either service with `deadline`. Refused at once while
  // the breaker is open. Errors keep their gRPC code; transport failures get
  // a message that names the endpoint and what to check.
  template <typename Stub, typename Request, typename Response>
  absl::Status Call(grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                 const Request&, Response*),
                    const Request& request, Response* response,
                    absl::Duration deadline) {
    std::shared_ptr<const Connection> connection;
    if (absl::Status s = Admit(&connection); !s.ok()) return s;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, deadline);
    const grpc::Status status =
        (connection->StubFor<Stub>()->*method)(&ctx, request, response);
    return Conclude(status, deadline);
  }

  // Call, returning the response.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Ask(
      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                   Response*),
      const Request& request, absl::Duration deadline) {
    Response response;
    if (absl::Status s = Call(method, request, &response, deadline); !s.ok()) {
      return s;
    }
    return response;
  }

  // The breaker's verdict for a call about to start and, when OK, the
  // connection to make it on (for a stream). A probe (the first call after the
  // breaker's open time) first makes sure the channel tries the daemon now: a
  // channel that is not connected is replaced by a fresh one. (gRPC's own
  // reconnect backoff can leave a channel failing for seconds after the daemon
  // is back: a connection attempt made while it restarted times out only after
  // the connect timeout.)
  absl::Status Admit(std::shared_ptr<const Connection>* connection,
                     bool may_probe = true) ABSL_LOCKS_EXCLUDED(mu_);

  // What a probe does, for a stream outside the breaker that failed on
  // `failed` (unless the connection was replaced already): a channel that is
  // not connected is replaced, else its reconnect backoff reset.
  void RetryNow(const Connection* failed) ABSL_LOCKS_EXCLUDED(mu_);

  // Reports a finished call (also a stream) to the breaker and translates
  // its status (see Call); Translate only translates.
  absl::Status Conclude(const grpc::Status& status, absl::Duration deadline);
  absl::Status Translate(const grpc::Status& status,
                         absl::Duration deadline) const;
  static void SetDeadline(grpc::ClientContext* ctx, absl::Duration deadline) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoNanoseconds(deadline));
  }

  const std::string& endpoint() const { return endpoint_; }

 private:
  // Constant after construction.
  const std::string endpoint_;
  const ChannelFactory factory_;
  // What to check when the daemon cannot be reached.
  const std::string hint_;

  CircuitBreaker breaker_;

  void RetryNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::shared_ptr<const Connection> connection_ ABSL_GUARDED_BY(mu_);
};

// Whether a failed call means the daemon cannot be used now (unreachable,
// too slow, or shutting down) as opposed to an answer about the request.
bool IsTransportFailure(const grpc::Status& status);

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_RPC_H_
