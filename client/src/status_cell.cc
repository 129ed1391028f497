#include "client/src/status_cell.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/wire.h"

namespace gputune::client_internal {

StatusCell::StatusCell(v1::KeyStatus status)
    : state_(status.state()), status_(std::move(status)) {
  absl::call_once(parsed_, [] {});
}

StatusCell::StatusCell(v1::KeyState state, absl::string_view bytes,
                       absl::string_view asked_key,
                       std::shared_ptr<const CallBytes> call)
    : state_(state),
      bytes_(bytes),
      asked_key_(asked_key),
      call_(std::move(call)) {}

const v1::KeyStatus& StatusCell::status() const {
  absl::call_once(parsed_, [this] {
    v1::KeyStatus& status = status_;
    if (!status.ParseFromArray(bytes_.data(),
                               static_cast<int>(bytes_.size())) ||
        (!asked_key_.empty() && !status.has_key() &&
         !status.mutable_key()->ParseFromArray(
             asked_key_.data(), static_cast<int>(asked_key_.size())))) {
      status.Clear();
      status.set_state(state_);
    }
    // Sent without its key (BatchLookupRequest.omit_keys): the asked one.
    if (status.state() == v1::KEY_STATE_HIT && status.has_key() &&
        status.has_entry() && !status.entry().has_key()) {
      *status.mutable_entry()->mutable_key() = status.key();
    }
    call_.reset();
  });
  return status_;
}

namespace {

// A cell for the serialized KeyStatus `status` (of the key `asked_key`, or
// empty), which lies in `call`; null when its state cannot be read.
std::shared_ptr<const StatusCell> CellOf(
    absl::string_view status, absl::string_view asked_key,
    std::shared_ptr<const CallBytes> call) {
  uint64_t state = v1::KEY_STATE_UNSPECIFIED;
  if (!wire::LastVarintField(status, v1::KeyStatus::kStateFieldNumber,
                             &state)) {
    return nullptr;
  }
  return std::make_shared<const StatusCell>(static_cast<v1::KeyState>(state),
                                            status, asked_key, std::move(call));
}

absl::string_view SliceBytes(const grpc::Slice& slice) {
  return absl::string_view(reinterpret_cast<const char*>(slice.begin()),
                           slice.size());
}

// Reads a message that lies in several slices, as gRPC receives a large
// one, copying only what straddles two slices.
class SliceReader {
 public:
  SliceReader(const std::vector<grpc::Slice>& slices,
              std::deque<std::string>* straddling)
      : slices_(slices), straddling_(straddling) {
    Settle();
  }

  bool AtEnd() const { return slice_ == slices_.size(); }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (AtEnd()) return false;
      const uint8_t byte = slices_[slice_].begin()[offset_];
      Advance(1);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return true;
    }
    return false;
  }

  // The next `size` bytes, in place when they lie in one slice.
  bool Read(size_t size, absl::string_view* out) {
    if (size == 0) {
      *out = {};
      return true;
    }
    if (AtEnd()) return false;
    const absl::string_view here = SliceBytes(slices_[slice_]).substr(offset_);
    if (here.size() >= size) {
      *out = here.substr(0, size);
      Advance(size);
      return true;
    }
    std::string& copy = straddling_->emplace_back();
    copy.reserve(size);
    while (copy.size() < size) {
      if (AtEnd()) return false;
      const absl::string_view part =
          SliceBytes(slices_[slice_]).substr(offset_, size - copy.size());
      copy.append(part.data(), part.size());
      Advance(part.size());
    }
    *out = copy;
    return true;
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    Settle();
  }
  // Past the end of this slice (and any empty ones) to the next byte.
  void Settle() {
    while (slice_ < slices_.size() && offset_ >= slices_[slice_].size()) {
      offset_ = 0;
      ++slice_;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  std::deque<std::string>* const straddling_;
  size_t slice_ = 0;
  size_t offset_ = 0;
};

// Calls fn(bytes) for each field `field` of the message received in
// call->answer, as wire::ForEachBytesField does; false when malformed. The
// bytes lie in `call`.
bool ForEachAnswerField(CallBytes* call, uint32_t field,
                        absl::FunctionRef<void(absl::string_view)> fn) {
  if (call->answer.size() <= 1) {
    return wire::ForEachBytesField(
        call->answer.empty() ? "" : SliceBytes(call->answer[0]), field, fn);
  }
  std::vector<absl::string_view> found;
  SliceReader in(call->answer, &call->straddling);
  bool group = false;
  while (!in.AtEnd() && !group) {
    uint64_t tag = 0, value = 0;
    absl::string_view bytes;
    if (!in.ReadVarint(&tag) || (tag >> 3) == 0 || tag > UINT32_MAX) {
      return false;
    }
    const auto type = static_cast<wire::WireType>(tag & 7);
    if ((tag >> 3) == field && type != wire::WireType::kBytes) return false;
    switch (type) {
      case wire::WireType::kVarint:
        if (!in.ReadVarint(&value)) return false;
        break;
      case wire::WireType::kFixed64:
      case wire::WireType::kFixed32:
        if (!in.Read(type == wire::WireType::kFixed64 ? 8 : 4, &bytes)) {
          return false;
        }
        break;
      case wire::WireType::kBytes:
        if (!in.ReadVarint(&value) || !in.Read(value, &bytes)) return false;
        if ((tag >> 3) == field) found.push_back(bytes);
        break;
      default:
        group = true;  // a proto2 group (no gputune message has one)
        break;
    }
  }
  if (group) {  // the general reader, on the message in one piece
    std::string& whole = call->straddling.emplace_back();
    for (const grpc::Slice& slice : call->answer) {
      whole.append(SliceBytes(slice).data(), slice.size());
    }
    return wire::ForEachBytesField(whole, field, fn);
  }
  for (absl::string_view bytes : found) fn(bytes);
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const StatusCell>> CellFromLookupAnswer(
    const grpc::ByteBuffer& answer) {
  auto call = std::make_shared<CallBytes>();
  if (answer.Valid() && !answer.Dump(&call->answer).ok()) {
    return absl::InternalError("cannot read gputuned's Lookup answer");
  }
  absl::string_view status;
  int statuses = 0;
  if (!ForEachAnswerField(call.get(), v1::LookupResponse::kStatusFieldNumber,
                          [&](absl::string_view s) {
                            status = s;
                            ++statuses;
                          })) {
    return absl::InternalError(
        "gputuned's Lookup answer is not a LookupResponse");
  }
  if (statuses != 1) {  // none (an empty status), or parts to merge
    std::string whole;
    for (const grpc::Slice& slice : call->answer) {
      whole.append(SliceBytes(slice).data(), slice.size());
    }
    v1::LookupResponse parsed;
    if (!parsed.ParseFromString(whole)) {
      return absl::InternalError(
          "gputuned's Lookup answer is not a LookupResponse");
    }
    return std::make_shared<const StatusCell>(
        std::move(*parsed.mutable_status()));
  }
  std::shared_ptr<const StatusCell> cell = CellOf(status, {}, std::move(call));
  if (cell == nullptr) {
    return absl::InternalError(
        "gputuned's Lookup answer is not a LookupResponse");
  }
  return cell;
}

absl::StatusOr<std::vector<std::shared_ptr<const StatusCell>>>
CellsFromBatchAnswer(const grpc::ByteBuffer& answer,
                     std::shared_ptr<CallBytes> call,
                     absl::Span<const absl::string_view> asked_keys) {
  if (answer.Valid() && !answer.Dump(&call->answer).ok()) {
    return absl::InternalError("cannot read gputuned's BatchLookup answer");
  }
  std::vector<std::shared_ptr<const StatusCell>> cells;
  cells.reserve(asked_keys.size());
  bool states_ok = true;
  if (!ForEachAnswerField(
          call.get(), v1::BatchLookupResponse::kStatusesFieldNumber,
          [&](absl::string_view status) {
            const size_t i = cells.size();
            cells.push_back(CellOf(
                status, i < asked_keys.size() ? asked_keys[i] : "", call));
            states_ok = states_ok && cells.back() != nullptr;
          }) ||
      !states_ok) {
    return absl::InternalError(
        "gputuned's BatchLookup answer is not a BatchLookupResponse");
  }
  if (cells.size() != asked_keys.size()) {
    return absl::InternalError(absl::StrCat("gputuned answered ", cells.size(),
                                            " statuses for ", asked_keys.size(),
                                            " keys"));
  }
  return cells;
}

}  // namespace gputune::client_internal
