#include "client/src/status_cell.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "proto/wire.h"

namespace gputune::client_internal {

StatusCell::StatusCell(v1::KeyStatus status)
    : state_(status.state()), status_(std::move(status)) {
  absl::call_once(parsed_, [] {});
}

StatusCell::StatusCell(v1::KeyState state, absl::string_view bytes,
                       absl::string_view asked_key,
                       std::shared_ptr<const CallBytes> call,
                       absl::string_view execution_source)
    : state_(state),
      bytes_(bytes),
      asked_key_(asked_key),
      execution_source_(execution_source),
      call_(std::move(call)) {}

namespace {

// Merges the execution of the serialized KeyStatus `status` (its
// entry.execution) into *out, as protobuf would parse it.
void MergeExecution(absl::string_view status, v1::Execution* out) {
  wire::ForEachBytesField(
      status, v1::KeyStatus::kEntryFieldNumber, [out](absl::string_view entry) {
        wire::ForEachBytesField(
            entry, v1::Entry::kExecutionFieldNumber,
            [out](absl::string_view execution) {
              google::protobuf::io::CodedInputStream in(
                  reinterpret_cast<const uint8_t*>(execution.data()),
                  static_cast<int>(execution.size()));
              out->MergeFromCodedStream(&in);
            });
      });
}

}  // namespace

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
    // Sent without its execution (share_executions): the earlier status's.
    if (!execution_source_.empty() && status.execution_ref() != 0) {
      MergeExecution(execution_source_,
                     status.mutable_entry()->mutable_execution());
      status.clear_execution_ref();
    }
    call_.reset();
  });
  return status_;
}

namespace {

// The state and execution_ref of the serialized KeyStatus `status`, read
// without parsing it; false when it is not protobuf or either field is not
// a varint.
bool ReadStateAndRef(absl::string_view status, v1::KeyState* state,
                     uint64_t* execution_ref) {
  *state = v1::KEY_STATE_UNSPECIFIED;
  *execution_ref = 0;
  wire::Reader r(status);
  while (r.Next()) {
    const bool is_state = r.field() == v1::KeyStatus::kStateFieldNumber;
    const bool is_ref = r.field() == v1::KeyStatus::kExecutionRefFieldNumber;
    if (!is_state && !is_ref) continue;
    if (r.type() != wire::WireType::kVarint) return false;
    if (is_state) {
      *state = static_cast<v1::KeyState>(r.number());
    } else {
      *execution_ref = r.number();
    }
  }
  return r.ok();
}

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

// Calls fn(bytes) for each field `field` of the answer in call->answer, as
// wire::ForEachBytesField does; false when malformed (after calls for the
// fields before the fault, which the caller then drops). A large answer
// arrives in several slices: each field is read in place, and copied into
// call->straddling only when it spans two slices.
bool ForEachAnswerField(CallBytes* call, uint32_t field,
                        absl::FunctionRef<void(absl::string_view)> fn) {
  if (call->answer.size() <= 1) {
    return wire::ForEachBytesField(
        call->answer.empty() ? "" : SliceBytes(call->answer[0]), field, fn);
  }
  using google::protobuf::internal::WireFormatLite;
  // Over the slices in `call`, which the views must point into: a slice of
  // a few bytes keeps them in itself, so the answer's own copy of it goes
  // away with the answer.
  std::deque<google::protobuf::io::ArrayInputStream> parts;
  std::vector<google::protobuf::io::ZeroCopyInputStream*> streams;
  size_t total = 0;
  for (const grpc::Slice& slice : call->answer) {
    parts.emplace_back(slice.begin(), static_cast<int>(slice.size()));
    streams.push_back(&parts.back());
    total += slice.size();
  }
  google::protobuf::io::ConcatenatingInputStream joined(
      streams.data(), static_cast<int>(streams.size()));
  google::protobuf::io::CodedInputStream in(&joined);
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {  // the end, or malformed
      if (!in.ConsumedEntireMessage()) return false;
      break;
    }
    if (static_cast<uint32_t>(WireFormatLite::GetTagFieldNumber(tag)) !=
        field) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    uint32_t length = 0;
    if (WireFormatLite::GetTagWireType(tag) !=
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
        !in.ReadVarint32(&length) ||
        length > total - static_cast<size_t>(in.CurrentPosition())) {
      return false;
    }
    const void* data = nullptr;
    int size = 0;
    if (in.GetDirectBufferPointer(&data, &size) &&
        static_cast<uint32_t>(size) >= length) {
      fn(absl::string_view(static_cast<const char*>(data), length));
      if (!in.Skip(static_cast<int>(length))) return false;
    } else {
      std::string& copy = call->straddling.emplace_back();
      if (!in.ReadString(&copy, static_cast<int>(length))) return false;
      fn(copy);  // a deque's strings never move
    }
  }
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
  // Each status's bytes, and whether it has an execution_ref: a ref may
  // only name one without, so that a cell's parse looks back one step.
  struct Seen {
    absl::string_view bytes;
    bool refers;
  };
  std::vector<Seen> seen;
  seen.reserve(asked_keys.size());
  std::string error;
  if (!ForEachAnswerField(
          call.get(), v1::BatchLookupResponse::kStatusesFieldNumber,
          [&](absl::string_view status) {
            if (!error.empty()) return;
            const size_t i = cells.size();
            v1::KeyState state;
            uint64_t ref = 0;
            if (!ReadStateAndRef(status, &state, &ref)) {
              error = "is not a BatchLookupResponse";
              return;
            }
            absl::string_view source;
            if (ref != 0) {
              if (ref > i || seen[ref - 1].refers ||
                  (cells[ref - 1]->state() != v1::KEY_STATE_HIT &&
                   cells[ref - 1]->state() != v1::KEY_STATE_STALE)) {
                error = absl::StrCat("refers status ", i + 1, " to status ",
                                     ref, ", which has no execution to share");
                return;
              }
              source = seen[ref - 1].bytes;
            }
            seen.push_back({status, ref != 0});
            cells.push_back(std::make_shared<const StatusCell>(
                state, status, i < asked_keys.size() ? asked_keys[i] : "", call,
                source));
          })) {
    error = "is not a BatchLookupResponse";
  }
  if (!error.empty()) {
    return absl::InternalError(
        absl::StrCat("gputuned's BatchLookup answer ", error));
  }
  if (cells.size() != asked_keys.size()) {
    return absl::InternalError(absl::StrCat("gputuned answered ", cells.size(),
                                            " statuses for ", asked_keys.size(),
                                            " keys"));
  }
  return cells;
}

}  // namespace gputune::client_internal
