// Conversions between absl time types and google.protobuf Timestamp/Duration.
#ifndef GPUTUNE_PROTO_PROTO_TIME_H_
#define GPUTUNE_PROTO_PROTO_TIME_H_

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace gputune {

google::protobuf::Timestamp ToProto(absl::Time t);
google::protobuf::Duration ToProto(absl::Duration d);
absl::Time FromProto(const google::protobuf::Timestamp& t);
absl::Duration FromProto(const google::protobuf::Duration& d);
// Seconds (from the engine) to a Duration, rounded to nanoseconds.
google::protobuf::Duration SecondsToProto(double seconds);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_PROTO_TIME_H_
