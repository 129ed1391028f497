// gputune::Client: what an inference server links to share one GPU's tune
// cache with every other process on that GPU (see docs/design.md).
//
//   auto client = gputune::Client::Create(gputune::ClientOptions{});
//   (*client)->Preload(my_keys);                 // one RPC at start-up
//   ...
//   auto r = (*client)->Lookup(key);             // memo hit: no I/O
//   if (r.ok() && r->hit()) Run(r->entry().execution());
//   else RunDefault();                           // tuning never blocks
//
// Every call has a deadline (ClientOptions) and returns no later than it.
// When gputuned is down or slow, calls answer UNAVAILABLE or
// DEADLINE_EXCEEDED; after a few such failures a circuit breaker answers
// UNAVAILABLE at once until a probe reaches the daemon again, and the channel
// reconnects by itself. Error messages say what to do.
//
// Thread-safe: one Client is meant to be shared by every thread of a process.
#ifndef GPUTUNE_CLIENT_H_
#define GPUTUNE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gputune/claim_guard.h"
#include "gputune/options.h"
#include "gputune/v1/tune.pb.h"
#include "gputune/watch.h"

namespace gputune {

namespace client_internal {
class LookupCell;
struct ResultAccess;
}  // namespace client_internal

// The index of the key a BatchLookup or Preload refused as invalid (keys[i]
// of the call), read from the error's payload; nullopt for any other status.
std::optional<size_t> InvalidKeyIndex(const absl::Status& status);

// A key's state as the daemon (or the memo) reported it. Cheap to copy (it
// shares the status). A Lookup's entry is parsed the first time entry() or
// status() reads it (about a microsecond, once per key); BatchLookup and
// Preload return theirs parsed. state() and hit() never parse.
class LookupResult {
 public:
  LookupResult() = default;

  // HIT, MISS, PENDING, STALE or BACKOFF; UNSPECIFIED for an empty result
  // (TryLookup found nothing in the memo).
  v1::KeyState state() const;
  bool hit() const { return state() == v1::KEY_STATE_HIT; }
  // Whether the answer came from the in-process memo (no I/O).
  bool from_memo() const { return from_memo_; }
  // The entry (set for HIT and STALE, without measurements and fingerprint;
  // GetEntry has both). An empty Entry otherwise.
  const v1::Entry& entry() const;
  // The whole status: claim for PENDING, retry_after for BACKOFF,
  // stale_reason for STALE.
  const v1::KeyStatus& status() const;
  // The entry is stale-but-usable (stale-while-revalidate): tuned for this
  // candidate set on the same device model before a driver, CUDA, cuBLASLt
  // or gputune upgrade. STALE, or PENDING / BACKOFF while the key is being
  // re-tuned (the daemon does so in the background). Never parses.
  bool stale_usable() const;
  // What to run: ExecutionToRun(state(), stale_usable(), entry()).
  const v1::Execution& execution_to_run() const;

 private:
  friend struct client_internal::ResultAccess;
  LookupResult(std::shared_ptr<const client_internal::LookupCell> cell,
               bool from_memo)
      : cell_(std::move(cell)), from_memo_(from_memo) {}

  std::shared_ptr<const client_internal::LookupCell> cell_;
  bool from_memo_ = false;
};

// The execution to hand DenseRunner::Run (or the C API's gputune_dense_run)
// for a key in `state`: the entry's for a HIT or a stale-but-usable entry,
// else an empty Execution, which runs the default (a plain STALE's entry
// may be for other kernels or another device). Run checks every
// execution before it runs it (cuBLASLt: rebuilt and
// cublasLtMatmulAlgoCheck'ed; gputune kernels: params and alignment) and
// runs the default when the check fails, so a stale-but-usable execution
// runs only after its replay check passes. Without a usable CUDA device
// there is no runner (DenseRunner::Create says why): run the default.
const v1::Execution& ExecutionToRun(v1::KeyState state, bool stale_usable,
                                    const v1::Entry& entry);

class Client {
 public:
  // Connects lazily: creating a client does no I/O but finding the daemon
  // (FindDaemon, options.h) and cannot fail for an unreachable daemon.
  // INVALID_ARGUMENT for unusable options (e.g. a negative deadline);
  // NOT_FOUND when the GPU meant has no daemon linked by UUID, and
  // FAILED_PRECONDITION when the device cannot be resolved (both say how
  // to fix it).
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      const ClientOptions& options);

  // Stops the background threads (waiting at most one deadline for an RPC in
  // flight). Live ClaimGuards and WatchStreams keep what they need alive.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The endpoint in use (FindDaemon's).
  const std::string& endpoint() const;
  // The GPU this client means (its TuneDense carries it, and a daemon
  // serving another GPU refuses): options.gpu_uuid or the device's UUID;
  // empty when neither is known (a daemon named by endpoint or host index).
  const std::string& gpu_uuid() const;

  // --- Hot path ------------------------------------------------------------

  // The key's state. A key memoised as HIT is answered from the memo without
  // I/O (an entry older than memo_ttl is re-checked in the background);
  // otherwise one Lookup RPC, whose HIT is memoised. INVALID_ARGUMENT for an
  // invalid key (no I/O); UNAVAILABLE / DEADLINE_EXCEEDED when the daemon
  // cannot answer within lookup_deadline.
  absl::StatusOr<LookupResult> Lookup(const v1::Key& key);

  // Never blocks on I/O: the memoised HIT, or an empty result (state
  // UNSPECIFIED) after queueing a background lookup of the key (at most one
  // per refresh_interval per key), whose HIT a later call will see.
  LookupResult TryLookup(const v1::Key& key);

  // The states of many keys, in request order; HITs are memoised. One RPC
  // per 100000 keys. INVALID_ARGUMENT for an invalid key (no I/O): the
  // message names it as keys[i] and InvalidKeyIndex(status) returns i.
  // RESOURCE_EXHAUSTED when the daemon's answer would be too large (keys
  // with very large entries): it says how many keys to ask for at once. The
  // deadline (ClientOptions.deadline) holds for the whole call. Every entry
  // is parsed before it returns, on up to 4 threads for 4096 keys or more
  // (about 1 us an entry on one thread), so that reading one later costs
  // what a memo hit does.
  absl::StatusOr<std::vector<LookupResult>> BatchLookup(
      const std::vector<v1::Key>& keys);

  // BatchLookup for start-up: fills the memo; returns how many keys were HIT.
  absl::StatusOr<size_t> Preload(const std::vector<v1::Key>& keys);

  // Drops a key's memoised entry (its next Lookup asks the daemon).
  void Forget(const v1::Key& key);
  // Drops every memoised entry.
  void ForgetAll();
  // Number of memoised entries.
  size_t memo_size() const;

  // --- Tuning ----------------------------------------------------------------

  // Asks to tune the key (see ClaimGuard). GRANTED: the guard holds the
  // claim, renews its lease every lease_ttl / 3 in the background, and
  // abandons it when destroyed without Record. PENDING / HIT / BACKOFF: the
  // guard holds nothing and says why. Errors: INVALID_ARGUMENT,
  // UNAVAILABLE, DEADLINE_EXCEEDED.
  absl::StatusOr<ClaimGuard> Claim(const v1::Key& key);

  // Lets the daemon benchmark a dense_bf16 key on its own device (concurrent
  // requests for one key share one job). wait=true: the HIT (deadline
  // tune_deadline); wait=false: PENDING at once while the job runs, or the
  // HIT if there is one. A HIT is memoised. Errors as the daemon gives them,
  // with what to do: FAILED_PRECONDITION (no benchmark backend),
  // RESOURCE_EXHAUSTED (queue full), ABORTED/INTERNAL (the job failed), plus
  // UNAVAILABLE / DEADLINE_EXCEEDED.
  absl::StatusOr<v1::KeyStatus> TuneDense(const v1::Key& key, bool wait);

  // Follows a key: on_status gets the current status, then each change, until
  // a HIT (the last call), an error, `timeout`, or the stream's destruction.
  // on_status runs on a gRPC thread and must not block or destroy the
  // stream. A HIT seen here is memoised.
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(
      const v1::Key& key, WatchStream::Callback on_status,
      absl::Duration timeout = absl::Minutes(10));

  // --- Operator calls (gputunectl) ------------------------------------------
  // Each is one RPC with the `deadline` option: the daemon's answer or its
  // error.

  absl::StatusOr<v1::GetStatusResponse> GetStatus();
  absl::StatusOr<v1::ListEntriesResponse> ListEntries(
      const v1::ListEntriesRequest& request);
  // NOT_FOUND when the key has no entry.
  absl::StatusOr<v1::GetEntryResponse> GetEntry(const v1::Key& key);
  // Forgets the deleted keys' memoised entries (by key, or all for a filter).
  absl::StatusOr<uint32_t> DeleteEntries(
      const v1::DeleteEntriesRequest& request);
  // All or nothing; INVALID_ARGUMENT names the bad entry's index.
  absl::StatusOr<uint32_t> ImportEntries(const std::vector<v1::Entry>& entries);
  // Releases any claim by id (an operator clearing a stuck claim).
  absl::StatusOr<v1::AbandonResponse> AbandonClaim(uint64_t claim_id,
                                                   absl::string_view reason);
  // The daemon writes a consistent copy of its database to `path` (absolute,
  // must not exist; ALREADY_EXISTS otherwise); returns its size in bytes.
  absl::StatusOr<uint64_t> Backup(const std::string& path);
  // Changes the daemon's log levels; returns those now in force.
  absl::StatusOr<v1::SetLogLevelResponse> SetLogLevel(
      const v1::SetLogLevelRequest& request);

  class Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace gputune

#endif  // GPUTUNE_CLIENT_H_
