#include "kernels/cuda/execution_params.h"

#include <string>

namespace gputune::kernels {

bool ReadParam(const Execution& execution, const char* name, int64_t min,
               int64_t max, int64_t* value, std::string* error) {
  const auto it = execution.params.find(name);
  if (it == execution.params.end()) {
    *error = execution.kernel + ": param " + name + " is missing";
    return false;
  }
  if (it->second < min || it->second > max) {
    *error = execution.kernel + ": param " + name + "=" +
             std::to_string(it->second) + " is outside [" +
             std::to_string(min) + ", " + std::to_string(max) + "]";
    return false;
  }
  *value = it->second;
  return true;
}

bool OnlyKnownParams(const Execution& execution,
                     std::initializer_list<const char*> known,
                     std::string* error) {
  for (const auto& [name, value] : execution.params) {
    bool found = false;
    for (const char* k : known) found = found || name == k;
    if (!found) {
      *error = execution.kernel + ": unknown param " + name;
      return false;
    }
  }
  return true;
}

}  // namespace gputune::kernels
