// StatusCell: one key's status as the client holds it (in the memo and in
// LookupResults), parsed on first use.
//
// A BatchLookup answer of 10,000 HITs is a few megabytes of protobuf that
// take ~1 µs a status to parse into messages, several times the RPC itself.
// Preload fills the memo with cells that hold each status's bytes and its
// state (read from the bytes without parsing); a cell parses its status the
// first time the entry is read, once, under absl::call_once. A Lookup RPC's
// answer is held the same way: the RPC itself allocates three objects
// instead of some twenty-five. The answer's bytes stay alive while a cell
// that has not parsed them does.
//
// A BatchLookup asks for statuses without keys (omit_keys): the client has
// them already, in its request. A cell then holds its key's bytes too, and
// puts the key back into the status (and a HIT's entry) when it parses.
//
// It also asks for each execution once (share_executions): a status whose
// execution equals an earlier one's holds that status's bytes, and takes
// the execution from them when it parses.
//
// Each cell has its own reference count: threads looking up different keys
// of one batch share no cache line on the memo's hot path.
#ifndef GPUTUNE_CLIENT_SRC_STATUS_CELL_H_
#define GPUTUNE_CLIENT_SRC_STATUS_CELL_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gputune/v1/tune.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace gputune::client_internal {

// The bytes of one call that its cells read: its request (where a
// BatchLookup's asked keys lie) and its answer, as gRPC received it (a few
// dozen slices for a large answer, read in place), plus copies of the
// statuses that straddle two slices.
struct CallBytes {
  std::string request;
  std::vector<grpc::Slice> answer;
  std::deque<std::string> straddling;  // a deque: the strings never move
};

class StatusCell {
 public:
  // A status parsed already.
  explicit StatusCell(v1::KeyStatus status);
  // A serialized KeyStatus of the given state: `bytes`, which lie in
  // `call`. `asked_key`: empty, or the serialized key asked for (also in
  // `call`), for a status that may have been sent without it.
  // `execution_source`: empty, or the serialized status its execution_ref
  // names (one that has no execution_ref itself), also in `call`.
  StatusCell(v1::KeyState state, absl::string_view bytes,
             absl::string_view asked_key, std::shared_ptr<const CallBytes> call,
             absl::string_view execution_source = {});

  StatusCell(const StatusCell&) = delete;
  StatusCell& operator=(const StatusCell&) = delete;

  v1::KeyState state() const { return state_; }
  // The status, parsed on the first call. Bytes that do not parse (never
  // from gputuned) read as a status with only the state set.
  const v1::KeyStatus& status() const;

 private:
  const v1::KeyState state_;
  mutable absl::once_flag parsed_;
  const absl::string_view bytes_;
  const absl::string_view asked_key_;
  // In the cell, not allocated when parsed: reading a memoised entry is the
  // hot path, and one more pointer to follow cost a cache miss there.
  mutable v1::KeyStatus status_;
  const absl::string_view execution_source_;
  mutable std::shared_ptr<const CallBytes> call_;  // dropped once parsed
};

// The status of a LookupResponse as received. An error for bytes that are
// not a LookupResponse.
absl::StatusOr<std::shared_ptr<const StatusCell>> CellFromLookupAnswer(
    const grpc::ByteBuffer& answer);

// Splits a BatchLookupResponse as received into one cell per status, in
// order; asked_keys[i] (in call->request, which the cells keep) is the key of
// status i. An error for bytes that are not a BatchLookupResponse, that
// hold another number of statuses than asked_keys, or whose execution_refs
// do not each name an earlier HIT or STALE status without one.
absl::StatusOr<std::vector<std::shared_ptr<const StatusCell>>>
CellsFromBatchAnswer(const grpc::ByteBuffer& answer,
                     std::shared_ptr<CallBytes> call,
                     absl::Span<const absl::string_view> asked_keys);

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_STATUS_CELL_H_
