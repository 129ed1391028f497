#include "client/src/rpc.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gputune::client_internal {
namespace {

// "systemctl status gputuned@N" for the systemd unit's socket, else a
// generic check. The unit's socket is also what a caller that named no
// daemon gets (GPU 0's), so that hint says how to name another one: a
// newcomer's daemon from scripts/run.sh listens in ./var.
std::string HintFor(absl::string_view endpoint) {
  absl::string_view rest = endpoint;
  int device = 0;
  if (absl::ConsumePrefix(&rest, "unix:///run/gputuned/gpu") &&
      absl::ConsumeSuffix(&rest, ".sock") && absl::SimpleAtoi(rest, &device)) {
    return absl::StrCat(
        "is the service running? systemctl status gputuned@", device,
        "; a daemon elsewhere: --endpoint or $GPUTUNE_ENDPOINT");
  }
  return absl::StrCat("is gputuned running and listening on ", endpoint,
                      "? (--endpoint, $GPUTUNE_ENDPOINT or --device choose "
                      "the daemon)");
}

}  // namespace

bool IsTransportFailure(const grpc::Status& status) {
  // gputuned answers UNAVAILABLE only when it is going away (shutting down)
  // or cannot serve claims; per-key refusals (BACKOFF, a full queue) have
  // their own codes. So both codes mean: the daemon cannot be used now.
  return status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         status.error_code() == grpc::StatusCode::UNAVAILABLE;
}

Connection::Connection(std::shared_ptr<grpc::Channel> channel)
    : channel(std::move(channel)),
      tune(v1::TuneService::NewStub(this->channel)),
      admin(v1::AdminService::NewStub(this->channel)) {}

Rpc::Rpc(std::string endpoint, std::shared_ptr<grpc::Channel> channel,
         ChannelFactory factory, const BreakerOptions& breaker)
    : endpoint_(std::move(endpoint)),
      factory_(std::move(factory)),
      hint_(HintFor(endpoint_)),
      breaker_(breaker, absl::StrCat("gputuned at ", endpoint_)),
      connection_(std::make_shared<const Connection>(std::move(channel))) {}

absl::Status Rpc::Admit(std::shared_ptr<const Connection>* connection,
                        bool may_probe) {
  bool probe = false;
  if (absl::Status s = breaker_.Admit(may_probe, &probe); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (probe) RetryNowLocked();
  *connection = connection_;
  return absl::OkStatus();
}

void Rpc::RetryNowLocked() {
  if (factory_ != nullptr &&
      connection_->channel->GetState(/*try_to_connect=*/false) !=
          GRPC_CHANNEL_READY) {
    connection_ = std::make_shared<const Connection>(factory_());
  } else {
    grpc::experimental::ChannelResetConnectionBackoff(
        connection_->channel.get());
  }
}

void Rpc::RetryNow(const Connection* failed) {
  absl::MutexLock lock(&mu_);
  if (connection_.get() == failed) RetryNowLocked();
}

absl::Status Rpc::Conclude(const grpc::Status& status,
                           absl::Duration deadline) {
  absl::Status translated = Translate(status, deadline);
  if (IsTransportFailure(status)) {
    breaker_.ReportFailure(translated);
  } else {
    breaker_.ReportSuccess();
  }
  return translated;
}

absl::Status Rpc::Translate(const grpc::Status& status,
                            absl::Duration deadline) const {
  if (!IsTransportFailure(status)) {
    if (status.ok()) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  absl::Status failure;
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    failure = absl::DeadlineExceededError(
        absl::StrCat("gputuned at ", endpoint_, " did not answer within ",
                     absl::FormatDuration(deadline),
                     ": is it overloaded or stopped? ", hint_));
  } else {
    failure = absl::UnavailableError(absl::StrCat("cannot reach gputuned at ",
                                                  endpoint_, ": ", hint_, " (",
                                                  status.error_message(), ")"));
  }
  return failure;
}

}  // namespace gputune::client_internal
