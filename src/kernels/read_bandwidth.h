// The memory-bandwidth probe behind `inferd bench`'s roofline: how fast this machine streams
// memory into the cores when every thread of a decode pool reads its own contiguous slice of a
// buffer far larger than the caches, with the read kernel (kernels/read_stream.h) of the ISA the
// dispatcher chose, i.e. the access pattern of a decode step's weight reads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kernels/kernels.h"
#include "util/thread_pool.h"

namespace inferd::kernels {

// The last-level data cache of the CPUs under `cpu_root` (sysfs layout:
// cpuN/cache/indexM/{level,type,size,shared_cpu_list}): the size of the highest level times
// the number of distinct instances of it (one per group of CPUs sharing one, as
// shared_cpu_list tells). 0 when sysfs says nothing.
size_t last_level_cache_bytes(const std::string& cpu_root = "/sys/devices/system/cpu");

// The probe's buffer size: at least 1 GiB and at least 8x the last-level cache, rounded up to
// whole 2 MiB pages.
size_t read_bandwidth_probe_bytes();

struct ReadBandwidth {
  double best_bytes_per_second = 0;    // the fastest timed pass
  double median_bytes_per_second = 0;  // the median pass (how noisy the machine was)
  size_t buffer_bytes = 0;
  int passes = 0;  // timed passes (one untimed warm-up pass precedes them)
  int threads = 0;
  std::string_view isa;  // the read kernel's table
};

// Maps a `bytes` buffer in huge pages, has each of the pool's threads fill its own slice
// (so every page is committed, and on its reader's NUMA node, before any timing), then times
// `passes` passes in which every thread streams its slice with `kernels.read_stream`.
ReadBandwidth measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes,
                                     const KernelTable& kernels = active_kernels());

}  // namespace inferd::kernels
