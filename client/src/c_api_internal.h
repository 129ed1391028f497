// What the C API's handles are (gputune.h declares them opaque) and the
// helpers its source files share. Everything is built on the public C++ API
// (gputune/client.h): the C API holds a gputune::Client, LookupResults,
// ClaimGuards and WatchStreams, nothing of its own that talks to the daemon.
#ifndef GPUTUNE_CLIENT_SRC_C_API_INTERNAL_H_
#define GPUTUNE_CLIENT_SRC_C_API_INTERNAL_H_

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gputune/client.h"
#include "gputune/gputune.h"
#include "gputune/v1/tune.pb.h"

struct gputune_client {
  std::unique_ptr<gputune::Client> client;
};

struct gputune_key {
  gputune::v1::Key key;
  std::string text;
};

// A status: a LookupResult (lookup, try_lookup: shares the memo's cell, no
// copy) or a KeyStatus of its own (tune_dense, watch).
struct gputune_result {
  gputune::LookupResult lookup;
  gputune::v1::KeyStatus own;
  bool has_own = false;
  // The execution's params sorted by name, built on first use.
  mutable std::vector<std::pair<const std::string*, int32_t>> sorted_params;
  mutable bool params_sorted = false;

  void Set(gputune::LookupResult r) {
    lookup = std::move(r);
    has_own = false;
    own.Clear();
    params_sorted = false;
  }
  void Set(gputune::v1::KeyStatus s) {
    lookup = gputune::LookupResult();
    own = std::move(s);
    has_own = true;
    params_sorted = false;
  }
  gputune::v1::KeyState state() const {
    return has_own ? own.state() : lookup.state();
  }
  const gputune::v1::KeyStatus& status() const {
    return has_own ? own : lookup.status();
  }
  const gputune::v1::Entry& entry() const {
    return has_own ? own.entry() : lookup.entry();
  }
  bool stale_usable() const {
    return has_own ? own.stale_usable() : lookup.stale_usable();
  }
};

namespace gputune::c_api {

// Records `status`'s message as this thread's last error; returns its code.
gputune_code Fail(const absl::Status& status);
inline gputune_code Fail(absl::StatusCode code, std::string message) {
  return Fail(absl::Status(code, message));
}

// Runs `body` (returning a gputune_code) so that no C++ exception crosses
// into C: bad_alloc is RESOURCE_EXHAUSTED, anything else INTERNAL.
template <typename F>
gputune_code Guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(absl::StatusCode::kResourceExhausted, "gputune: out of memory");
  } catch (const std::exception& e) {
    return Fail(absl::StatusCode::kInternal,
                std::string("gputune: unexpected error: ") + e.what());
  } catch (...) {
    return Fail(absl::StatusCode::kInternal, "gputune: unexpected error");
  }
}

// INVALID_ARGUMENT naming `what` when `p` is null.
inline gputune_code NotNull(const void* p, const char* what) {
  if (p != nullptr) return GPUTUNE_OK;
  return Fail(absl::StatusCode::kInvalidArgument,
              std::string(what) + " must not be NULL");
}

// A caller's struct that begins with struct_size, read into `out` (which
// holds the defaults): only the bytes the caller's struct has are copied, so
// a program built against an older, shorter struct still works.
// INVALID_ARGUMENT when struct_size is smaller than ABI 1's struct.
template <typename T>
gputune_code ReadSized(const T* in, size_t abi1_size, const char* what,
                       T* out) {
  if (gputune_code c = NotNull(in, what); c != GPUTUNE_OK) return c;
  if (in->struct_size < abi1_size) {
    return Fail(absl::StatusCode::kInvalidArgument,
                std::string(what) + "->struct_size is " +
                    std::to_string(in->struct_size) + ", expected at least " +
                    std::to_string(abi1_size) +
                    " (set it to sizeof the struct)");
  }
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(in),
              std::min(in->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return GPUTUNE_OK;
}

// A C string or "" for NULL.
inline const char* Str(const char* s) { return s != nullptr ? s : ""; }

// A copy of `s` the caller frees with gputune_string_free.
char* CopyOut(const std::string& s);

}  // namespace gputune::c_api

#endif  // GPUTUNE_CLIENT_SRC_C_API_INTERNAL_H_
