#include "util/machine_memory.h"

#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

namespace inferd {

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

uint32_t machine_id() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return 0;
  return static_cast<uint32_t>(std::hash<std::string>{}(name)&0xFFFFFF);
}

}  // namespace inferd
