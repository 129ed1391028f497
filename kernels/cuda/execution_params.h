// Reading an Execution's params back into typed fields, with errors that name
// the param. Shared by the kernel families of the CUDA backend.
#ifndef GPUTUNE_KERNELS_CUDA_EXECUTION_PARAMS_H_
#define GPUTUNE_KERNELS_CUDA_EXECUTION_PARAMS_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/dense.h"
#include "kernels/status.h"

namespace gputune::kernels {

// Reads params[name] into *value. kInvalidArgument ("<kernel>: param <name>
// ...") when it is missing or outside [min, max].
Status ReadParam(const Execution& execution, const char* name, int64_t min,
                 int64_t max, int64_t* value);

// kInvalidArgument naming the first param of the execution that is not in
// `known` (an execution from another kernel version).
Status OnlyKnownParams(const Execution& execution,
                       std::initializer_list<const char*> known);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_EXECUTION_PARAMS_H_
