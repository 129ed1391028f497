#include "kernels/cuda/execution_params.h"

#include <string>

namespace gputune::kernels {

Status ReadParam(const Execution& execution, const char* name, int64_t min,
                 int64_t max, int64_t* value) {
  const auto it = execution.params.find(name);
  if (it == execution.params.end()) {
    return InvalidArgumentError(execution.kernel + ": param " + name +
                                " is missing");
  }
  if (it->second < min || it->second > max) {
    return InvalidArgumentError(execution.kernel + ": param " + name + "=" +
                                std::to_string(it->second) + " is outside [" +
                                std::to_string(min) + ", " +
                                std::to_string(max) + "]");
  }
  *value = it->second;
  return OkStatus();
}

Status OnlyKnownParams(const Execution& execution,
                       std::initializer_list<const char*> known) {
  for (const auto& [name, value] : execution.params) {
    bool found = false;
    for (const char* k : known) found = found || name == k;
    if (!found) {
      return InvalidArgumentError(execution.kernel + ": unknown param " + name);
    }
  }
  return OkStatus();
}

}  // namespace gputune::kernels
