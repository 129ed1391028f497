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
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace gputune::wire {

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

// The tag and length of a length-delimited field `field` of `length` bytes,
// to be followed by those bytes; and how many bytes the whole field takes.
void AppendBytesFieldHeader(uint32_t field, size_t length, std::string* out);
size_t BytesFieldSize(uint32_t field, size_t length);

// Appends field `field` holding `bytes` (a string, bytes or message field).
void AppendBytesField(uint32_t field, absl::string_view bytes,
                      std::string* out);

// Appends varint field `field` (an int or enum field) holding `value`.
void AppendVarintField(uint32_t field, uint64_t value, std::string* out);

}  // namespace gputune::wire

#endif  // GPUTUNE_PROTO_WIRE_H_
