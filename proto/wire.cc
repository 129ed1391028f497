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

}  // namespace

bool ForEachBytesField(absl::string_view message, uint32_t field,
                       absl::FunctionRef<void(absl::string_view)> fn) {
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
    if (WireFormatLite::GetTagWireType(tag) !=
        WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      return false;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    const size_t at = static_cast<size_t>(in.CurrentPosition());
    if (length > message.size() - at) return false;
    fn(message.substr(at, length));
    if (!in.Skip(static_cast<int>(length))) return false;
  }
}

void AppendBytesField(uint32_t field, absl::string_view bytes,
                      std::string* out) {
  AppendVarint(
      WireFormatLite::MakeTag(static_cast<int>(field),
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
      out);
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

void AppendVarintField(uint32_t field, uint64_t value, std::string* out) {
  AppendVarint(WireFormatLite::MakeTag(static_cast<int>(field),
                                       WireFormatLite::WIRETYPE_VARINT),
               out);
  AppendVarint(value, out);
}

}  // namespace gputune::wire
