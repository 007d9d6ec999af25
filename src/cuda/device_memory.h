// Device memory and error checks for the CUDA executor (host code).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "util/error.h"

namespace inferd::cuda {

// Fails with the CUDA error's name and what was being done.
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    fail("CUDA: {} failed: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status));
}

// Where a CudaBuffer's memory comes from.
struct DeviceMemory {  // the device's (cudaMalloc)
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static void release(void* p) { cudaFree(p); }
  static constexpr const char* kWhat = "allocating device memory";
};
struct PinnedHostMemory {  // page-locked host memory: steps' uploads, fast copies back
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static void release(void* p) { cudaFreeHost(p); }
  static constexpr const char* kWhat = "allocating pinned host memory";
};

// One allocation, freed with the object.
template <typename Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check(Memory::allocate(&data_, bytes), Memory::kWhat);
  }
  CudaBuffer(CudaBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer() { release(); }

  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (data_ != nullptr) Memory::release(data_);
    data_ = nullptr;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<DeviceMemory>;
using PinnedBuffer = CudaBuffer<PinnedHostMemory>;

// Whether a CUDA device is present (false without a driver or a GPU, never an error).
inline bool device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace inferd::cuda
