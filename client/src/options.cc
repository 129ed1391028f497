#include "gputune/options.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/support/channel_arguments.h"

namespace gputune {

std::string DefaultEndpoint(int device) {
  return absl::StrCat("unix:///run/gputuned/gpu", device, ".sock");
}

std::string ResolveEndpoint(const ClientOptions& options) {
  absl::StatusOr<DaemonTarget> target = FindDaemon(options);
  if (target.ok()) return target->endpoint;
  return DefaultEndpoint(options.device);
}

grpc::ChannelArguments ChannelArgumentsFor(const ClientOptions& options) {
  (void)options;
  grpc::ChannelArguments args;
  // A restarted daemon is found again within about a second: gRPC's default
  // backoff grows to two minutes. (The breaker's probes also reset it.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // How long one connection attempt may take: a daemon that is starting, or
  // a loaded machine, can take a while to answer the HTTP/2 handshake.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  // Our own subchannels: a channel the client replaces (see Rpc::Admit)
  // must not inherit a stuck connection attempt from a shared pool.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return args;
}

}  // namespace gputune
