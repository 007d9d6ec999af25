// What `inferd bench --device cuda` reports of the device: its name and its measured copy
// bandwidth, the bound a decode step's weight reads are held against.
#pragma once

#include <cstddef>
#include <string>

namespace inferd::cuda {

struct DeviceInfo {
  std::string name;
  size_t memory_bytes = 0;
  int multiprocessors = 0;
  // A device-to-device copy of copy_buffer_bytes, timed with events over `copy_passes` passes
  // (the best), counting the bytes read and the bytes written.
  double copy_bytes_per_second = 0;
  size_t copy_buffer_bytes = 0;
  int copy_passes = 0;
};

// Device 0's; an inferd::Error without a CUDA device or in a build without CUDA.
DeviceInfo probe_device();

}  // namespace inferd::cuda
