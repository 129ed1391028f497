#include "proto_time.h"

#include <cmath>

namespace gputune {

google::protobuf::Timestamp ToProto(absl::Time t) {
  const int64_t ns = absl::ToUnixNanos(t);
  google::protobuf::Timestamp out;
  int64_t secs = ns / 1000000000;
  int64_t nanos = ns % 1000000000;
  if (nanos < 0) {
    nanos += 1000000000;
    --secs;
  }
  out.set_seconds(secs);
  out.set_nanos(static_cast<int32_t>(nanos));
  return out;
}

google::protobuf::Duration ToProto(absl::Duration d) {
  google::protobuf::Duration out;
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out.set_seconds(ns / 1000000000);
  out.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return out;
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

google::protobuf::Duration SecondsToProto(double seconds) {
  return ToProto(absl::Nanoseconds(std::llround(seconds * 1e9)));
}

}  // namespace gputune
