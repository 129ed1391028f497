// Conversions between the kernel library's plain structs (kernels/dense.h,
// which must build without protobuf) and their gputune.v1 messages.
#ifndef GPUTUNE_PROTO_EXECUTION_CONVERT_H_
#define GPUTUNE_PROTO_EXECUTION_CONVERT_H_

#include "gputune/v1/tune.pb.h"
#include "kernels/dense.h"

namespace gputune {

v1::Execution ToProto(const kernels::Execution& exec);
kernels::Execution FromProto(const v1::Execution& exec);
v1::Fingerprint ToProto(const kernels::Fingerprint& fp);
// The shape of a dense key (M = tokens, N = output, K = input features).
kernels::DenseShape ShapeOf(const v1::DenseBf16Key& key);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_EXECUTION_CONVERT_H_
