// Reading an Execution's params back into typed fields, with errors that name
// the param. Shared by the kernel families of the CUDA backend.
#ifndef GPUTUNE_KERNELS_CUDA_EXECUTION_PARAMS_H_
#define GPUTUNE_KERNELS_CUDA_EXECUTION_PARAMS_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/dense.h"

namespace gputune::kernels {

// Reads params[name] into *value. Returns false and sets *error
// ("<kernel>: param <name> ...") when it is missing or outside [min, max].
bool ReadParam(const Execution& execution, const char* name, int64_t min,
               int64_t max, int64_t* value, std::string* error);

// Returns false and sets *error naming the first param of the execution that
// is not in `known` (an execution from another kernel version).
bool OnlyKnownParams(const Execution& execution,
                     std::initializer_list<const char*> known,
                     std::string* error);

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_EXECUTION_PARAMS_H_
