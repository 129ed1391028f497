// DeviceBuffer: owns one cudaMalloc allocation on the device that was current
// when it was made.
#ifndef GPUTUNE_KERNELS_CUDA_DEVICE_BUFFER_H_
#define GPUTUNE_KERNELS_CUDA_DEVICE_BUFFER_H_

#include <cstddef>

namespace gputune::kernels {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates bytes (none when 0) with cudaMalloc, so the memory is aligned to
  // at least 256 bytes. Throws std::runtime_error when cudaMalloc fails.
  explicit DeviceBuffer(size_t bytes);
  // Frees with cudaFree, ignoring errors (a destructor cannot report them).
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_CUDA_DEVICE_BUFFER_H_
