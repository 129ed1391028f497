// metrics: the daemon's counters, as it writes them to --metrics_textfile.
#include "client/gputunectl/commands.h"
#include "client/gputunectl/entry_io.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/proto_time.h"

namespace gputune::ctl {

int RunMetrics(Context& ctx) {
  if (!ctx.cl.args.empty()) {
    return UsageError(ctx, "metrics takes no arguments");
  }
  // The client library has no call for this admin RPC: a channel of its own,
  // with the library's arguments, to the same endpoint.
  ClientOptions options;
  options.endpoint = ctx.client.endpoint();
  auto stub = v1::AdminService::NewStub(grpc::CreateCustomChannel(
      ctx.client.endpoint(), grpc::InsecureChannelCredentials(),
      ChannelArgumentsFor(options)));
  grpc::ClientContext call;
  call.set_deadline(absl::ToChronoTime(absl::Now() + ctx.timeout));
  v1::GetMetricsResponse response;
  const grpc::Status status =
      stub->GetMetrics(&call, v1::GetMetricsRequest(), &response);
  if (!status.ok()) {
    const bool transport = status.error_code() == grpc::StatusCode::UNAVAILABLE;
    return Fail(
        ctx, "metrics",
        transport
            ? absl::UnavailableError(absl::StrCat("cannot reach gputuned at ",
                                                  ctx.client.endpoint(), " (",
                                                  status.error_message(), ")"))
            : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                           status.error_message()));
  }
  if (ctx.json) {
    ctx.out << ToJson(response, /*pretty=*/true) << "\n";
  } else {
    ctx.out << response.text();
  }
  return kExitOk;
}

}  // namespace gputune::ctl
