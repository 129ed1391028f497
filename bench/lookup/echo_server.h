// The echo server of the lookup benchmark: the same gRPC callback API,
// server options and unix socket kind as gputuned, and nothing else, so its
// latency is the floor for any gRPC call on the machine.
#ifndef GPUTUNE_BENCH_LOOKUP_ECHO_SERVER_H_
#define GPUTUNE_BENCH_LOOKUP_ECHO_SERVER_H_

#include <string>

namespace gputune::bench {

// Serves on `listen` (unix:///path) until SIGTERM; returns the exit code.
int RunEchoServer(const std::string& listen);

}  // namespace gputune::bench

#endif  // GPUTUNE_BENCH_LOOKUP_ECHO_SERVER_H_
