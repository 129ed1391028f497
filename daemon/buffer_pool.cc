#include "daemon/buffer_pool.h"

#include <utility>

namespace gputune {

std::unique_ptr<std::string> BufferPool::Take() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      std::unique_ptr<std::string> buffer = std::move(free_.back());
      free_.pop_back();
      return buffer;
    }
  }
  return std::make_unique<std::string>();
}

void BufferPool::Give(std::unique_ptr<std::string> buffer) {
  if (buffer == nullptr || buffer->capacity() > max_bytes_) return;
  buffer->clear();
  absl::MutexLock lock(&mu_);
  if (free_.size() < max_buffers_) free_.push_back(std::move(buffer));
}

}  // namespace gputune
