// kernels::Status and StatusOr: the kernel library's errors, absl-shaped.
#include "kernels/status.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

TEST_CASE("a status carries absl's code numbers and its message") {
  CHECK(Status().ok());
  CHECK(OkStatus().message().empty());
  const Status s = FailedPreconditionError("no device");
  CHECK_FALSE(s.ok());
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message() == "no device");
  // The numbers absl::StatusCode (and gRPC) use, so a code converts as is.
  CHECK(static_cast<int>(CancelledError("").code()) == 1);
  CHECK(static_cast<int>(InvalidArgumentError("").code()) == 3);
  CHECK(static_cast<int>(ResourceExhaustedError("").code()) == 8);
  CHECK(static_cast<int>(FailedPreconditionError("").code()) == 9);
  CHECK(static_cast<int>(InternalError("").code()) == 13);
  CHECK(static_cast<int>(UnavailableError("").code()) == 14);
  // An OK status has no message, whatever it was given.
  CHECK(Status(StatusCode::kOk, "ignored") == OkStatus());
  CHECK(IsCancelled(CancelledError("cancelled")));
  CHECK_FALSE(IsCancelled(InternalError("cancelled")));
}

TEST_CASE("a StatusOr holds a value or the status saying why not") {
  StatusOr<std::unique_ptr<int>> value = std::make_unique<int>(7);
  REQUIRE(value.ok());
  CHECK(**value == 7);
  std::unique_ptr<int> taken = std::move(value).value();
  CHECK(*taken == 7);

  const StatusOr<int> failed = UnavailableError("device lost");
  CHECK_FALSE(failed.ok());
  CHECK(failed.status() == UnavailableError("device lost"));

  // An OK status is no value: it becomes an internal error, never an OK
  // StatusOr without a value.
  const StatusOr<int> empty = OkStatus();
  CHECK_FALSE(empty.ok());
  CHECK(empty.status().code() == StatusCode::kInternal);
}

Status FailsAt(int step, int* reached) {
  for (int i = 0; i < 3; ++i) {
    *reached = i;
    GPUTUNE_KERNELS_RETURN_IF_ERROR(
        i == step ? InternalError("step " + std::to_string(i)) : OkStatus());
  }
  return OkStatus();
}

TEST_CASE("RETURN_IF_ERROR returns the first failure and nothing after it") {
  int reached = -1;
  CHECK(FailsAt(1, &reached) == InternalError("step 1"));
  CHECK(reached == 1);
  CHECK(FailsAt(5, &reached).ok());
  CHECK(reached == 2);
}

TEST_CASE("CurrentExceptionMessage names what a boundary caught") {
  std::string message;
  try {
    throw std::runtime_error("cudaMalloc: out of memory");
  } catch (...) {
    message = CurrentExceptionMessage();
  }
  CHECK(message == "cudaMalloc: out of memory");
  try {
    throw 42;
  } catch (...) {
    message = CurrentExceptionMessage();
  }
  CHECK(message == "unknown exception (not derived from std::exception)");
}

}  // namespace
}  // namespace gputune::kernels
