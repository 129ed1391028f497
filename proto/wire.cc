#include "proto/wire.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace gputune::wire {

namespace {

using google::protobuf::internal::WireFormatLite;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

uint32_t BytesTag(uint32_t field) {
  return WireFormatLite::MakeTag(static_cast<int>(field),
                                 WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

}  // namespace

namespace {

// Calls read(&in) at each occurrence of field `field` whose wire type is
// `type`, positioned after the tag; read must consume the value. Other
// fields are skipped. False when `message` is malformed, an occurrence has
// another wire type, or read returns false.
bool ReadField(
    absl::string_view message, uint32_t field, WireFormatLite::WireType type,
    absl::FunctionRef<bool(google::protobuf::io::CodedInputStream*)> read) {
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(message.data()),
      static_cast<int>(message.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.ConsumedEntireMessage();  // end, or malformed
    if (static_cast<uint32_t>(WireFormatLite::GetTagFieldNumber(tag)) !=
        field) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    if (WireFormatLite::GetTagWireType(tag) != type || !read(&in)) {
      return false;
    }
  }
}

}  // namespace

bool ForEachBytesField(absl::string_view message, uint32_t field,
                       absl::FunctionRef<void(absl::string_view)> fn) {
  return ReadField(message, field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED,
                   [&](google::protobuf::io::CodedInputStream* in) {
                     uint32_t length = 0;
                     if (!in->ReadVarint32(&length)) return false;
                     const size_t at =
                         static_cast<size_t>(in->CurrentPosition());
                     if (length > message.size() - at) return false;
                     fn(message.substr(at, length));
                     return in->Skip(static_cast<int>(length));
                   });
}

bool LastVarintField(absl::string_view message, uint32_t field,
                     uint64_t* value) {
  return ReadField(message, field, WireFormatLite::WIRETYPE_VARINT,
                   [&](google::protobuf::io::CodedInputStream* in) {
                     return in->ReadVarint64(value);
                   });
}

void AppendBytesFieldHeader(uint32_t field, size_t length, std::string* out) {
  AppendVarint(BytesTag(field), out);
  AppendVarint(length, out);
}

size_t BytesFieldSize(uint32_t field, size_t length) {
  return VarintSize(BytesTag(field)) + VarintSize(length) + length;
}

void AppendBytesField(uint32_t field, absl::string_view bytes,
                      std::string* out) {
  AppendBytesFieldHeader(field, bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

void AppendVarintField(uint32_t field, uint64_t value, std::string* out) {
  AppendVarint(WireFormatLite::MakeTag(static_cast<int>(field),
                                       WireFormatLite::WIRETYPE_VARINT),
               out);
  AppendVarint(value, out);
}

}  // namespace gputune::wire
