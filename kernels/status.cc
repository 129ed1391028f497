#include "kernels/status.h"

#include <exception>
#include <string>

namespace gputune::kernels {

std::string CurrentExceptionMessage() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception (not derived from std::exception)";
  }
}

}  // namespace gputune::kernels
