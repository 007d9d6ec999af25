#include "cuda/device_info.h"

#include <algorithm>

#include "cuda/device_memory.h"

namespace inferd::cuda {

DeviceInfo probe_device() {
  if (!device_available()) fail("--device cuda: no CUDA device is available");
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, 0), "reading the device's properties");
  DeviceInfo info;
  info.name = props.name;
  info.memory_bytes = props.totalGlobalMem;
  info.multiprocessors = props.multiProcessorCount;
  // Far larger than the L2 (50-60 MB on Hopper), so the copy streams from and to HBM.
  info.copy_buffer_bytes = size_t{2} << 30;
  info.copy_passes = 10;
  DeviceBuffer from(info.copy_buffer_bytes), to(info.copy_buffer_bytes);
  check(cudaMemset(from.get(), 1, from.bytes()), "filling the copy probe");
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "creating an event");
  check(cudaEventCreate(&end), "creating an event");
  float best_ms = 0;
  for (int pass = -1; pass < info.copy_passes; ++pass) {  // pass -1 warms up
    check(cudaEventRecord(begin), "recording an event");
    check(cudaMemcpy(to.get(), from.get(), from.bytes(), cudaMemcpyDeviceToDevice), "copying");
    check(cudaEventRecord(end), "recording an event");
    check(cudaEventSynchronize(end), "timing the copy");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, begin, end), "timing the copy");
    if (pass >= 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  info.copy_bytes_per_second = 2.0 * double(info.copy_buffer_bytes) / (double(best_ms) / 1e3);
  return info;
}

}  // namespace inferd::cuda
