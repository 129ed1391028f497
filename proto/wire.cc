#include "proto/wire.h"

namespace gputune::wire {

bool Reader::ReadLongVarint(uint64_t* value) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64 && at_ < end_; shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(*at_++);
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) {
      *value = result;
      return true;
    }
  }
  return false;  // truncated, or longer than ten bytes
}

bool Reader::ReadLongTag(uint32_t* tag) {
  uint32_t result = 0;
  for (int i = 0; i < 5 && at_ < end_; ++i) {
    const uint8_t byte = static_cast<uint8_t>(*at_++);
    result |= static_cast<uint32_t>(byte & 0x7f) << (7 * i);
    if (byte < 0x80) {
      *tag = result;
      return true;
    }
  }
  return false;  // truncated, or longer than five bytes
}

bool Reader::ReadOtherValue() {
  switch (type_) {
    case WireType::kFixed64:
    case WireType::kFixed32: {
      const size_t size = type_ == WireType::kFixed64 ? 8 : 4;
      if (static_cast<size_t>(end_ - at_) < size) return false;
      bytes_ = absl::string_view(at_, size);
      for (size_t i = size; i-- > 0;) {
        number_ = number_ << 8 | static_cast<uint8_t>(at_[i]);
      }
      at_ += size;
      return true;
    }
    case WireType::kStartGroup:
    case WireType::kEndGroup:
      return true;  // the caller matches them
    default:
      return false;  // wire types 6 and 7 do not exist
  }
}

bool Reader::SkipGroup() {
  // To the matching end-group, through nested groups (as deep as
  // protobuf's own parser allows).
  constexpr int kMaxDepth = 100;
  uint32_t open[kMaxDepth];
  int depth = 0;
  open[depth++] = field_;
  while (depth > 0) {
    if (at_ == end_ || !ReadTagAndValue()) return false;
    if (type_ == WireType::kStartGroup) {
      if (depth == kMaxDepth) return false;
      open[depth++] = field_;
    } else if (type_ == WireType::kEndGroup && open[--depth] != field_) {
      return false;
    }
  }
  // The group is the current field, with no value.
  type_ = WireType::kStartGroup;
  bytes_ = {};
  number_ = 0;
  return true;
}

bool ForEachBytesField(absl::string_view message, uint32_t field,
                       absl::FunctionRef<void(absl::string_view)> fn) {
  Reader r(message);
  while (r.Next()) {
    if (r.field() != field) continue;
    if (r.type() != WireType::kBytes) return false;
    fn(r.bytes());
  }
  return r.ok();
}

bool LastVarintField(absl::string_view message, uint32_t field,
                     uint64_t* value) {
  Reader r(message);
  while (r.Next()) {
    if (r.field() != field) continue;
    if (r.type() != WireType::kVarint) return false;
    *value = r.number();
  }
  return r.ok();
}

}  // namespace gputune::wire
