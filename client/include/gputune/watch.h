// WatchStream: a key followed with Client::Watch.
//
//   auto watch = client->Watch(key, [](const v1::KeyStatus& s) {
//     std::cerr << "now " << v1::KeyState_Name(s.state()) << "\n";
//   });
//   absl::Status end = (*watch)->Wait(absl::Seconds(30));  // OK after a HIT
//
// The stream delivers the current status, then each change, and ends after a
// HIT, on an error, at its timeout, or when cancelled.
#ifndef GPUTUNE_WATCH_H_
#define GPUTUNE_WATCH_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {

class WatchStream {
 public:
  // Runs on a gRPC thread: must not block, and must not destroy the stream.
  using Callback = std::function<void(const v1::KeyStatus&)>;

  // Cancels the stream and waits until the callback can no longer run.
  virtual ~WatchStream() = default;

  // Ends the stream (Wait then returns CANCELLED). Idempotent.
  virtual void Cancel() = 0;

  // Blocks until the stream ends or `timeout` passes. OK when it ended after a
  // HIT; DEADLINE_EXCEEDED when `timeout` passed first (the stream goes on)
  // or the watch's own timeout ended it; the stream's error otherwise.
  virtual absl::Status Wait(absl::Duration timeout) = 0;

  // The last status delivered (an empty KeyStatus before the first).
  virtual v1::KeyStatus last() const = 0;
};

}  // namespace gputune

#endif  // GPUTUNE_WATCH_H_
