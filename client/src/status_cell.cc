#include "client/src/status_cell.h"

#include <utility>

#include "proto/wire.h"

namespace gputune::client_internal {

StatusCell::StatusCell(v1::KeyStatus status)
    : state_(status.state()), status_(std::move(status)) {
  absl::call_once(parsed_, [] {});
}

StatusCell::StatusCell(v1::KeyState state, absl::string_view bytes,
                       std::shared_ptr<const std::string> answer)
    : state_(state), bytes_(bytes), answer_(std::move(answer)) {}

const v1::KeyStatus& StatusCell::status() const {
  absl::call_once(parsed_, [this] {
    if (!status_.ParseFromArray(bytes_.data(),
                                static_cast<int>(bytes_.size()))) {
      status_.Clear();
      status_.set_state(state_);
    }
    answer_.reset();
  });
  return status_;
}

namespace {

// A cell for the serialized KeyStatus `status`, which lies in `answer`; null
// when its state cannot be read.
std::shared_ptr<const StatusCell> CellOf(
    absl::string_view status, std::shared_ptr<const std::string> answer) {
  uint64_t state = v1::KEY_STATE_UNSPECIFIED;
  if (!wire::LastVarintField(status, v1::KeyStatus::kStateFieldNumber,
                             &state)) {
    return nullptr;
  }
  return std::make_shared<const StatusCell>(static_cast<v1::KeyState>(state),
                                            status, std::move(answer));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const StatusCell>> CellFromLookupAnswer(
    std::string answer) {
  auto bytes = std::make_shared<const std::string>(std::move(answer));
  absl::string_view status;
  int statuses = 0;
  if (!wire::ForEachBytesField(*bytes, v1::LookupResponse::kStatusFieldNumber,
                               [&](absl::string_view s) {
                                 status = s;
                                 ++statuses;
                               })) {
    return absl::InternalError(
        "gputuned's Lookup answer is not a LookupResponse");
  }
  if (statuses != 1) {  // none (an empty status), or parts to merge
    v1::LookupResponse parsed;
    if (!parsed.ParseFromString(*bytes)) {
      return absl::InternalError(
          "gputuned's Lookup answer is not a LookupResponse");
    }
    return std::make_shared<const StatusCell>(
        std::move(*parsed.mutable_status()));
  }
  std::shared_ptr<const StatusCell> cell = CellOf(status, std::move(bytes));
  if (cell == nullptr) {
    return absl::InternalError(
        "gputuned's Lookup answer is not a LookupResponse");
  }
  return cell;
}

absl::StatusOr<std::vector<std::shared_ptr<const StatusCell>>>
CellsFromBatchAnswer(std::string answer) {
  auto bytes = std::make_shared<const std::string>(std::move(answer));
  std::vector<std::shared_ptr<const StatusCell>> cells;
  bool states_ok = true;
  if (!wire::ForEachBytesField(
          *bytes, v1::BatchLookupResponse::kStatusesFieldNumber,
          [&](absl::string_view status) {
            cells.push_back(CellOf(status, bytes));
            states_ok = states_ok && cells.back() != nullptr;
          }) ||
      !states_ok) {
    return absl::InternalError(
        "gputuned's BatchLookup answer is not a BatchLookupResponse");
  }
  return cells;
}

}  // namespace gputune::client_internal
