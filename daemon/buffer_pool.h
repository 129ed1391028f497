// BufferPool: a few large answer buffers, reused.
//
// A BatchLookup of 10,000 HITs answers ~1.6 MB that gRPC sends from the
// buffer itself. A fresh buffer of that size comes from mmap, and touching
// it costs a page fault per 4 KiB (~0.7 ms a call on a 2-core VM, a third of
// the call); a reused one is already mapped.
//
//   auto pool = std::make_shared<BufferPool>(4, 4 << 20);
//   std::unique_ptr<std::string> buffer = pool->Take();  // empty
//   ... fill it, send it ...
//   pool->Give(std::move(buffer));  // when the transport is done with it
#ifndef GPUTUNE_DAEMON_BUFFER_POOL_H_
#define GPUTUNE_DAEMON_BUFFER_POOL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gputune {

// Thread-safe.
class BufferPool {
 public:
  // Keeps at most `max_buffers` buffers of at most `max_bytes` capacity
  // each; larger ones are freed when given back.
  BufferPool(size_t max_buffers, size_t max_bytes)
      : max_buffers_(max_buffers), max_bytes_(max_bytes) {}

  // An empty buffer: one given back earlier, or a new one.
  std::unique_ptr<std::string> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Returns a buffer for later Takes (or frees it).
  void Give(std::unique_ptr<std::string> buffer) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_buffers_;
  const size_t max_bytes_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<std::string>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_BUFFER_POOL_H_
