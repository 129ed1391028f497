// Protobuf wire format by hand, for the lookup hot path.
//
// The daemon answers Lookup and BatchLookup from serialized bytes it already
// holds (each entry's summary is stored serialized, and a status echoes the
// asker's key as sent), so a HIT is answered by copying bytes instead of
// parsing them into messages and serializing those again. What these helpers
// write is ordinary protobuf: any client parses it as the messages in
// gputune/v1/tune.proto.
#ifndef GPUTUNE_PROTO_WIRE_H_
#define GPUTUNE_PROTO_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/base/attributes.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace gputune::wire {

// Protobuf wire types.
enum class WireType : uint8_t {
  kVarint = 0,
  kFixed64 = 1,
  kBytes = 2,  // length-delimited: string, bytes, message, packed
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Walks the fields of a serialized message in order, as protobuf's parser
// reads them, without building a message:
//
//   wire::Reader r(bytes);
//   while (r.Next()) {
//     if (r.field() == 1 && r.type() == wire::WireType::kBytes) Use(r.bytes());
//   }
//   if (!r.ok()) ...  // malformed
//
// A group (a proto2 feature no gputune message has) is skipped whole, as an
// unknown field is.
class Reader {
 public:
  explicit Reader(absl::string_view message)
      : at_(message.data()), end_(message.data() + message.size()) {}

  // Moves to the next field. False at the end of the message, and for bytes
  // that are not protobuf (then ok() is false too).
  // Inlined: it runs for every field of every key of a BatchLookup.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Next() {
    if (!ok_ || at_ == end_) return false;
    if (!ReadTagAndValue() || type_ == WireType::kEndGroup) return Fail();
    if (type_ == WireType::kStartGroup && !SkipGroup()) return Fail();
    return true;
  }
  // False once Next() met malformed bytes.
  bool ok() const { return ok_; }

  // The current field.
  uint32_t field() const { return field_; }
  WireType type() const { return type_; }
  // Its value: for kVarint, kFixed64 and kFixed32 as an integer; for kBytes
  // (and the fixed types, little-endian) its bytes.
  uint64_t number() const { return number_; }
  absl::string_view bytes() const { return bytes_; }

 private:
  bool Fail() { return ok_ = false; }
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool ReadVarint(uint64_t* value) {
    if (at_ != end_ && static_cast<uint8_t>(*at_) < 0x80) {  // most are
      *value = static_cast<uint8_t>(*at_++);
      return true;
    }
    if (end_ - at_ >= 2 && static_cast<uint8_t>(at_[1]) < 0x80) {  // < 2^14
      *value = (static_cast<uint8_t>(at_[0]) & 0x7fu) |
               static_cast<uint64_t>(static_cast<uint8_t>(at_[1])) << 7;
      at_ += 2;
      return true;
    }
    return ReadLongVarint(value);
  }
  bool ReadLongVarint(uint64_t* value);
  // As protobuf reads a tag: at most five bytes, kept to 32 bits.
  bool ReadLongTag(uint32_t* tag);
  // One tag and, except for groups, its value; false when malformed.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool ReadTagAndValue() {
    uint32_t tag = 0;
    if (at_ != end_ && static_cast<uint8_t>(*at_) < 0x80) {  // most are
      tag = static_cast<uint8_t>(*at_++);
    } else if (!ReadLongTag(&tag)) {
      return false;
    }
    if ((tag >> 3) == 0) return false;
    field_ = tag >> 3;
    type_ = static_cast<WireType>(tag & 7);
    bytes_ = {};
    number_ = 0;
    if (type_ == WireType::kVarint) return ReadVarint(&number_);
    if (type_ == WireType::kBytes) {
      uint64_t length = 0;
      if (!ReadVarint(&length) || length > static_cast<uint64_t>(end_ - at_)) {
        return false;
      }
      bytes_ = absl::string_view(at_, static_cast<size_t>(length));
      number_ = length;
      at_ += length;
      return true;
    }
    return ReadOtherValue();
  }
  // The value of a fixed-size field; true for a group's tag.
  bool ReadOtherValue();
  // Past the rest of the group the current field starts.
  bool SkipGroup();

  const char* at_;
  const char* const end_;
  bool ok_ = true;
  uint32_t field_ = 0;
  WireType type_ = WireType::kVarint;
  uint64_t number_ = 0;
  absl::string_view bytes_;
};

// Calls fn(bytes) for each occurrence of length-delimited field `field` in
// the serialized message `message`, in order; other fields are skipped (as
// unknown fields are). False when `message` is not well-formed protobuf or
// a field `field` is not length-delimited.
bool ForEachBytesField(absl::string_view message, uint32_t field,
                       absl::FunctionRef<void(absl::string_view)> fn);

// Sets *value to the last occurrence of varint field `field` (an int or
// enum) in `message`, leaving it unchanged when there is none. False when
// `message` is not well-formed protobuf or field `field` is not a varint.
bool LastVarintField(absl::string_view message, uint32_t field,
                     uint64_t* value);

// How many bytes `value` takes as a varint, and writes it at `at`,
// returning the end. Inline, as everything below: BatchLookup writes a few
// of these for each of thousands of statuses.
inline size_t VarintSize(uint64_t value) {
  return 1 + static_cast<size_t>(63 - __builtin_clzll(value | 1)) / 7;
}
inline char* WriteVarint(uint64_t value, char* at) {
  while (value >= 0x80) {
    *at++ = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  *at++ = static_cast<char>(value);
  return at;
}

// The tag of field `field` with wire type `type`.
inline uint32_t Tag(uint32_t field, WireType type) {
  return field << 3 | static_cast<uint32_t>(type);
}

// Fields written at `at`, which has room for them (see the *Size functions
// below); each returns the end of what it wrote.
inline char* WriteBytesFieldHeader(uint32_t field, size_t length, char* at) {
  return WriteVarint(length, WriteVarint(Tag(field, WireType::kBytes), at));
}
inline char* WriteBytesField(uint32_t field, absl::string_view bytes,
                             char* at) {
  at = WriteBytesFieldHeader(field, bytes.size(), at);
  memcpy(at, bytes.data(), bytes.size());
  return at + bytes.size();
}
inline char* WriteVarintField(uint32_t field, uint64_t value, char* at) {
  return WriteVarint(value, WriteVarint(Tag(field, WireType::kVarint), at));
}

// The same, appended to *out. The tag and length of a length-delimited
// field `field` of `length` bytes, to be followed by those bytes; and how
// many bytes the whole field takes.
inline void AppendBytesFieldHeader(uint32_t field, size_t length,
                                   std::string* out) {
  char header[20];
  const char* end = WriteBytesFieldHeader(field, length, header);
  out->append(header, static_cast<size_t>(end - header));
}
inline size_t BytesFieldSize(uint32_t field, size_t length) {
  return VarintSize(Tag(field, WireType::kBytes)) + VarintSize(length) + length;
}

// Appends field `field` holding `bytes` (a string, bytes or message field).
inline void AppendBytesField(uint32_t field, absl::string_view bytes,
                             std::string* out) {
  AppendBytesFieldHeader(field, bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Appends varint field `field` (an int or enum field) holding `value`; and
// how many bytes that takes.
inline void AppendVarintField(uint32_t field, uint64_t value,
                              std::string* out) {
  char bytes[20];
  const char* end = WriteVarintField(field, value, bytes);
  out->append(bytes, static_cast<size_t>(end - bytes));
}
inline size_t VarintFieldSize(uint32_t field, uint64_t value) {
  return VarintSize(Tag(field, WireType::kVarint)) + VarintSize(value);
}

}  // namespace gputune::wire

#endif  // GPUTUNE_PROTO_WIRE_H_
