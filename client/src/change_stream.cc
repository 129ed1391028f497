#include "client/src/change_stream.h"

#include <algorithm>
#include <utility>

#include "client/src/lookup_cell.h"

namespace gputune::client_internal {
namespace {

// Drops or replaces what one change concerns.
void ApplyChange(const v1::Change& change, Memo* memo) {
  v1::KeyStatus status;
  if (!status.mutable_entry()->ParseFromString(change.entry())) {
    // Which key it concerns is unknown (gputuned sends only entries it
    // parsed): forget everything.
    memo->InvalidateAll();
    return;
  }
  const v1::Key key = status.entry().key();  // status moves on
  const std::string& replaced = change.replaced_candidate_set();
  if (!replaced.empty() && replaced != key.candidate_set()) {
    v1::Key old = key;
    old.set_candidate_set(replaced);
    memo->Invalidate(old);
  }
  if (change.kind() != v1::CHANGE_KIND_RECORDED || change.stale()) {
    memo->Invalidate(key);
    return;
  }
  *status.mutable_key() = key;
  status.set_state(v1::KEY_STATE_HIT);
  memo->Replace(std::make_shared<const LookupCell>(key, std::move(status)));
}

}  // namespace

ChangeStream::ChangeStream(Rpc* rpc, Memo* memo) : rpc_(rpc), memo_(memo) {
  thread_ = std::thread([this] { Loop(); });
}

ChangeStream::~ChangeStream() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  thread_.join();
}

void ChangeStream::Apply(const v1::SubscribeChangesResponse& message,
                         Memo* memo, uint64_t* epoch, uint64_t* last_seq) {
  const auto& changes = message.changes();
  if (message.reset() || message.epoch() != *epoch) {
    // Another start of the daemon, or changes it no longer has: whatever
    // the memo holds may be out of date. (Not on the first stream: what
    // the memo took before it is as new as the stream's start, give or take
    // a change in between, which memo_ttl catches.)
    if (*epoch != 0) memo->InvalidateAll();
    *epoch = message.epoch();
    *last_seq = changes.empty() ? message.head_seq() : changes[0].seq() - 1;
  }
  for (const v1::Change& change : changes) {
    if (change.seq() != *last_seq + 1) {
      // A gap (never sent by gputuned): nothing in between can be trusted.
      memo->InvalidateAll();
    }
    *last_seq = change.seq();
    ApplyChange(change, memo);
  }
}

void ChangeStream::Loop() {
  uint64_t epoch = 0;
  uint64_t last_seq = 0;
  absl::Duration backoff = kMinBackoff;
  while (true) {
    std::shared_ptr<const Connection> connection;
    bool delivered = false;
    if (rpc_->Admit(&connection, /*may_probe=*/false).ok()) {
      grpc::ClientContext ctx;
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return;
        ctx_ = &ctx;
      }
      v1::SubscribeChangesRequest request;
      request.set_epoch(epoch);
      request.set_after_seq(epoch != 0 ? last_seq : 0);
      auto reader = connection->tune->SubscribeChanges(&ctx, request);
      v1::SubscribeChangesResponse message;
      while (reader->Read(&message)) {
        delivered = true;
        Apply(message, memo_, &epoch, &last_seq);
      }
      (void)reader->Finish();  // cut off, the daemon gone, or cancelled
      {
        absl::MutexLock lock(&mu_);
        ctx_ = nullptr;
      }
      if (!delivered) {
        // The daemon may be restarting: have the channel try it again now
        // rather than after gRPC's own reconnect backoff.
        rpc_->RetryNow(connection.get());
      }
    }
    backoff = delivered ? kMinBackoff : std::min(backoff * 2, kMaxBackoff);
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), backoff)) return;
  }
}

}  // namespace gputune::client_internal
