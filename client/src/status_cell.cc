#include "client/src/status_cell.h"

#include <utility>

#include "proto/wire.h"

namespace gputune::client_internal {

StatusCell::StatusCell(v1::KeyStatus status)
    : state_(status.state()), status_(std::move(status)) {
  absl::call_once(parsed_, [] {});
}

StatusCell::StatusCell(v1::KeyState state, absl::string_view bytes)
    : state_(state), bytes_(bytes) {}

const v1::KeyStatus& StatusCell::status() const {
  absl::call_once(parsed_, [this] {
    if (!status_.ParseFromArray(bytes_.data(),
                                static_cast<int>(bytes_.size()))) {
      status_.Clear();
      status_.set_state(state_);
    }
  });
  return status_;
}

namespace {

// The bytes and every cell pointing into them, freed with the last cell.
struct BatchAnswer {
  std::string bytes;
  std::deque<StatusCell> cells;  // emplace_back never moves a cell
};

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<const StatusCell>>>
CellsFromBatchAnswer(std::string answer) {
  auto block = std::make_shared<BatchAnswer>();
  block->bytes = std::move(answer);
  bool states_ok = true;
  if (!wire::ForEachBytesField(
          block->bytes, v1::BatchLookupResponse::kStatusesFieldNumber,
          [&](absl::string_view status) {
            uint64_t state = v1::KEY_STATE_UNSPECIFIED;
            states_ok = states_ok &&
                        wire::LastVarintField(
                            status, v1::KeyStatus::kStateFieldNumber, &state);
            block->cells.emplace_back(static_cast<v1::KeyState>(state), status);
          }) ||
      !states_ok) {
    return absl::InternalError(
        "gputuned's BatchLookup answer is not a BatchLookupResponse");
  }
  std::vector<std::shared_ptr<const StatusCell>> cells;
  cells.reserve(block->cells.size());
  for (const StatusCell& cell : block->cells) cells.emplace_back(block, &cell);
  return cells;
}

}  // namespace gputune::client_internal
