// Status and StatusOr<T>: how every fallible call of the kernel library
// reports an error, in the shape of absl::Status / absl::StatusOr.
//
//   StatusOr<std::unique_ptr<Workload>> w = backend.Prepare(shape, seed);
//   if (!w.ok()) return w.status();   // code() and message() say why
//   use(**w);
//
// Why not absl itself: the kernel library depends on the C++ standard
// library alone (and CUDA for kernels/cuda), so that it builds with CMake and
// a compiler on a machine that has nothing else (GPUTUNE_KERNELS_ONLY: the
// GPU machine that bench/gpu/run.sh builds on has no Abseil). The codes are
// absl's (and gRPC's) numbers with absl's names, and the methods absl's, so
// code above the kernels (which uses absl) reads a kernels status the same
// way and a code passes through unchanged: absl::StatusCode(s.code()).
//
// The library's entry points (the engine, the backends, HostKernel,
// DensePlan's resolution, DenseRunner, the CUDA module's open call) never
// throw: errors are these values, and a function that calls a C++ library
// that can throw (std::bad_alloc, std::system_error from a thread) converts
// at its own boundary. Only inside kernels/cuda do the low-level device
// helpers (CheckCuda and the launches and buffers built on it) report by
// throwing; cuda_status.h says where that is converted.
#ifndef GPUTUNE_KERNELS_STATUS_H_
#define GPUTUNE_KERNELS_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace gputune::kernels {

// absl::StatusCode's values.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  // A code of kOk makes an OK status and drops the message.
  Status(StatusCode code, std::string message)
      : code_(code),
        message_(code == StatusCode::kOk ? std::string() : std::move(message)) {
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // Empty when ok().
  const std::string& message() const { return message_; }

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status CancelledError(std::string message) {
  return Status(StatusCode::kCancelled, std::move(message));
}
inline Status InvalidArgumentError(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status FailedPreconditionError(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
inline Status ResourceExhaustedError(std::string message) {
  return Status(StatusCode::kResourceExhausted, std::move(message));
}
inline Status InternalError(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}
inline Status UnavailableError(std::string message) {
  return Status(StatusCode::kUnavailable, std::move(message));
}
inline Status UnknownError(std::string message) {
  return Status(StatusCode::kUnknown, std::move(message));
}

inline bool IsCancelled(const Status& s) {
  return s.code() == StatusCode::kCancelled;
}

// A T, or the Status saying why there is none. Constructed from an OK
// Status it holds kInternal (as absl's does): an OK StatusOr has a value.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit
  StatusOr(Status status)                          // NOLINT: implicit
      : status_(status.ok() ? InternalError("StatusOr made from an OK Status")
                            : std::move(status)) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // The value; only when ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

// The message of the exception being handled, for a boundary that converts
// what a C++ library threw into a Status; call only inside a catch block.
std::string CurrentExceptionMessage();

}  // namespace gputune::kernels

// Returns the Status of `expr` from the enclosing function unless it is OK.
#define GPUTUNE_KERNELS_RETURN_IF_ERROR(expr)            \
  do {                                                   \
    ::gputune::kernels::Status gputune_status_ = (expr); \
    if (!gputune_status_.ok()) return gputune_status_;   \
  } while (false)

#endif  // GPUTUNE_KERNELS_STATUS_H_
