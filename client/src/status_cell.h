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
// Each cell has its own reference count: threads looking up different keys
// of one batch share no cache line on the memo's hot path.
#ifndef GPUTUNE_CLIENT_SRC_STATUS_CELL_H_
#define GPUTUNE_CLIENT_SRC_STATUS_CELL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::client_internal {

class StatusCell {
 public:
  // A status parsed already.
  explicit StatusCell(v1::KeyStatus status);
  // A serialized KeyStatus of the given state: `bytes`, which lie in
  // `answer`.
  StatusCell(v1::KeyState state, absl::string_view bytes,
             std::shared_ptr<const std::string> answer);

  StatusCell(const StatusCell&) = delete;
  StatusCell& operator=(const StatusCell&) = delete;

  v1::KeyState state() const { return state_; }
  // The status, parsed on the first call. Bytes that do not parse (never
  // from gputuned) read as a status with only the state set.
  const v1::KeyStatus& status() const;

 private:
  const v1::KeyState state_;
  const absl::string_view bytes_;
  mutable absl::once_flag parsed_;
  mutable v1::KeyStatus status_;
  mutable std::shared_ptr<const std::string> answer_;  // dropped once parsed
};

// The status of a serialized LookupResponse. An error for bytes that are
// not a LookupResponse.
absl::StatusOr<std::shared_ptr<const StatusCell>> CellFromLookupAnswer(
    std::string answer);

// Splits a serialized BatchLookupResponse into one cell per status, in
// order. An error for bytes that are not a BatchLookupResponse.
absl::StatusOr<std::vector<std::shared_ptr<const StatusCell>>>
CellsFromBatchAnswer(std::string answer);

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_STATUS_CELL_H_
