// The WatchStream behind Client::Watch: a gRPC callback read reactor.
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/src/client_impl.h"
#include "client/src/lookup_cell.h"
#include "gputune/watch.h"
#include "grpcpp/support/client_callback.h"
#include "proto/key_format.h"

namespace gputune::client_internal {
namespace {

class WatchStreamImpl final
    : public WatchStream,
      public grpc::ClientReadReactor<v1::WatchResponse> {
 public:
  WatchStreamImpl(std::shared_ptr<Client::Impl> client,
                  std::shared_ptr<const Connection> connection,
                  const v1::Key& key, Callback on_status,
                  absl::Duration timeout)
      : client_(std::move(client)),
        connection_(std::move(connection)),
        on_status_(std::move(on_status)),
        timeout_(timeout) {
    *request_.mutable_key() = key;
  }

  void Start() {
    Rpc::SetDeadline(&ctx_, timeout_);
    connection_->tune->async()->Watch(&ctx_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  ~WatchStreamImpl() override {
    Cancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

  void Cancel() override { ctx_.TryCancel(); }

  absl::Status Wait(absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no HIT for ", KeyText(request_.key()), " within ",
                       absl::FormatDuration(timeout)));
    }
    return end_;
  }

  v1::KeyStatus last() const override {
    absl::MutexLock lock(&mu_);
    return last_;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    const v1::KeyStatus& status = response_.status();
    if (status.state() == v1::KEY_STATE_HIT) {
      client_->memo.Put(
          std::make_shared<const LookupCell>(request_.key(), status));
    }
    {
      absl::MutexLock lock(&mu_);
      last_ = status;
    }
    if (on_status_) on_status_(status);
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& s) override {
    absl::Status end;
    switch (s.error_code()) {
      case grpc::StatusCode::OK:
        break;
      case grpc::StatusCode::CANCELLED:
        end = absl::CancelledError("the watch was cancelled");
        break;
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        // Our own timeout: not the daemon's fault.
        end = absl::DeadlineExceededError(absl::StrCat(
            "the watch of ", KeyText(request_.key()), " ended after ",
            absl::FormatDuration(timeout_), " without a HIT"));
        break;
      default:
        end = client_->rpc.Conclude(s, timeout_);
    }
    absl::MutexLock lock(&mu_);
    end_ = std::move(end);
    done_ = true;
  }

 private:
  // Constant after construction.
  const std::shared_ptr<Client::Impl> client_;
  const std::shared_ptr<const Connection> connection_;  // the stream's channel
  const Callback on_status_;
  const absl::Duration timeout_;

  grpc::ClientContext ctx_;
  v1::WatchRequest request_;
  v1::WatchResponse response_;  // owned by the reactor between reads

  mutable absl::Mutex mu_;
  v1::KeyStatus last_ ABSL_GUARDED_BY(mu_);
  absl::Status end_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

std::unique_ptr<WatchStream> StartWatch(
    std::shared_ptr<Client::Impl> client,
    std::shared_ptr<const Connection> connection, const v1::Key& key,
    WatchStream::Callback on_status, absl::Duration timeout) {
  auto stream = std::make_unique<WatchStreamImpl>(
      std::move(client), std::move(connection), key, std::move(on_status),
      timeout);
  stream->Start();
  return stream;
}

}  // namespace gputune::client_internal
