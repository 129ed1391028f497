// A client process for the fleet tests: asks one gputuned for TuneDense
// (wait=true) of every key given, all at once (one thread per key), and
// exits 0 when every answer was a HIT. Its own process, started with exec:
// gRPC does not survive fork() in a process that has used it.
//
//   gputune_fleet_tune_client unix:///tmp/x/gputuned.sock 1x128x128 4x256x128
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/support/daemon_process.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ENDPOINT MxKxN...\n", argv[0]);
    return 2;
  }
  const std::string endpoint = argv[1];
  auto stub = gputune::v1::TuneService::NewStub(
      grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  std::atomic<int> hits{0};
  std::vector<std::thread> asks;
  for (int i = 2; i < argc; ++i) {
    unsigned m = 0, k = 0, n = 0;
    if (std::sscanf(argv[i], "%ux%ux%u", &m, &k, &n) != 3) {
      std::fprintf(stderr, "bad key %s (want MxKxN)\n", argv[i]);
      return 2;
    }
    asks.emplace_back([&, m, k, n] {
      gputune::v1::TuneDenseRequest req;
      *req.mutable_key() = gputune::testing::DenseKey(m, k, n);
      req.set_wait(true);
      gputune::v1::TuneDenseResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
      const grpc::Status s = stub->TuneDense(&ctx, req, &resp);
      if (s.ok() && resp.status().state() == gputune::v1::KEY_STATE_HIT) {
        ++hits;
      } else {
        std::fprintf(stderr, "%s: TuneDense %ux%ux%u: %s %s\n",
                     endpoint.c_str(), m, k, n, s.error_message().c_str(),
                     resp.status().ShortDebugString().c_str());
      }
    });
  }
  for (auto& t : asks) t.join();
  return hits == argc - 2 ? 0 : 1;
}
