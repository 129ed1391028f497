// Client::Impl: the state a Client shares with its ClaimGuards and
// WatchStreams (each holds a reference, so it lives as long as any of them).
#ifndef GPUTUNE_CLIENT_SRC_CLIENT_IMPL_H_
#define GPUTUNE_CLIENT_SRC_CLIENT_IMPL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/src/change_stream.h"
#include "client/src/lease_renewer.h"
#include "client/src/memo.h"
#include "client/src/refresher.h"
#include "client/src/rpc.h"
#include "gputune/client.h"

namespace gputune {

// What a granted ClaimGuard holds. Keeps the client alive (a guard may
// outlive its Client).
class ClaimGuard::State {
 public:
  std::shared_ptr<Client::Impl> client;
  uint64_t claim_id = 0;
  v1::Key key;
  std::shared_ptr<std::atomic<bool>> lost;
  bool held = true;  // neither recorded, abandoned nor released
};

class Client::Impl {
 public:
  // `factory` makes a replacement channel (null for a channel given in the
  // options).
  Impl(const ClientOptions& options, std::string endpoint,
       std::shared_ptr<grpc::Channel> channel,
       client_internal::Rpc::ChannelFactory factory);

  // Memoises a HIT (under the cell's key) and wraps the status for the
  // caller. With `since` (memo.generation() before the answer was asked
  // for), not memoised when the change feed changed the memo meanwhile.
  LookupResult Remember(std::shared_ptr<const client_internal::LookupCell> cell,
                        uint64_t since = client_internal::Memo::kAnyGeneration);
  LookupResult Remember(const v1::Key& key, v1::KeyStatus status);
  // BatchLookup of `keys`, in one or more RPCs (see kTwoPartBatchKeys);
  // appends a result per key to `out`. With `parse`, every entry is parsed
  // before it returns (ParseAll: on several threads for a large batch);
  // else each on its first read.
  absl::Status BatchLookupAll(const std::vector<v1::Key>& keys,
                              std::vector<LookupResult>* out, bool parse);
  // The refresher's work: look keys up, memoise HITs, drop the rest.
  void Refresh(const std::vector<v1::Key>& keys);
  // Renews the guard's lease (granted as `claim`) in the background.
  void KeepAlive(const ClaimGuard::State& state, const v1::ClaimInfo& claim);
  absl::StatusOr<v1::AbandonResponse> Abandon(uint64_t claim_id,
                                              absl::string_view reason);

  // Constant after construction.
  const ClientOptions options;
  const std::string holder;
  client_internal::Rpc rpc;

  client_internal::Memo memo;
  client_internal::Refresher refresher;
  client_internal::LeaseRenewer renewer;
  // The change feed, when the memo is on and options.follow_changes; null
  // otherwise. Last: stopped before the memo and the connection go.
  std::unique_ptr<client_internal::ChangeStream> changes;
};

namespace client_internal {

// The daemon's limit on keys per BatchLookup.
inline constexpr size_t kMaxBatchKeys = 100000;
// A BatchLookup of this many keys or more is sent as two RPCs at least, in
// flight together.
inline constexpr size_t kTwoPartBatchKeys = 4096;

// Makes LookupResults (their constructor is not public).
struct ResultAccess {
  static LookupResult Make(std::shared_ptr<const LookupCell> cell,
                           bool from_memo) {
    return LookupResult(std::move(cell), from_memo);
  }
};

// `status` (an error about keys[index] of a batch) with the index as its
// payload, for InvalidKeyIndex.
absl::Status WithKeyIndex(absl::Status status, size_t index);

// Starts a Watch stream (watch_stream.cc).
std::unique_ptr<WatchStream> StartWatch(
    std::shared_ptr<Client::Impl> client,
    std::shared_ptr<const Connection> connection, const v1::Key& key,
    WatchStream::Callback on_status, absl::Duration timeout);

}  // namespace client_internal
}  // namespace gputune

#endif  // GPUTUNE_CLIENT_SRC_CLIENT_IMPL_H_
