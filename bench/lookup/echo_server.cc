#include "bench/lookup/echo_server.h"

#include <signal.h>

#include <iostream>

#include "echo.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace gputune::bench {
namespace {

// Answers inline from the reaction, as gputuned's Lookup does.
class EchoServiceImpl final : public Echo::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx,
                                 const EchoRequest* request,
                                 EchoReply* reply) override {
    reply->mutable_payload()->assign(request->reply_size(), 'e');
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace

int RunEchoServer(const std::string& listen) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // As gputuned builds its server (daemon/daemon.cc).
  grpc::EnableDefaultHealthCheckService(true);
  EchoServiceImpl service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    std::cerr << "echo server: cannot listen on " << listen << "\n";
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  server->Shutdown();
  return 0;
}

}  // namespace gputune::bench
