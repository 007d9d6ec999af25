// This machine's memory as the KV pool is sized from it: what the kernel could give now, and
// which machine it is (ranks of a split model on one machine share its memory).
#pragma once

#include <cstdint>

namespace inferd {

// MemAvailable from /proc/meminfo: what the kernel could give this process now without
// swapping, or -1 where it cannot be read.
int64_t available_memory_bytes();

// This machine, as 24 bits of its host name's hash (exact in a float, as ranks gather it):
// processes with the same id share one machine's memory. Network namespaces on one machine
// (the test hosts, scripts/netns-hosts) keep its host name, and do share its memory.
uint32_t machine_id();

}  // namespace inferd
