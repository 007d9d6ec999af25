#include "kernels/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "util/huge_pages.h"

namespace inferd::kernels {
namespace {

std::string read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// sysfs cache sizes: "8192K", "32M", or plain bytes.
size_t parse_size(const std::string& text) {
  size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    value = value * 10 + size_t(text[i++] - '0');
  if (i < text.size()) {
    switch (text[i]) {
      case 'K':
        return value << 10;
      case 'M':
        return value << 20;
      case 'G':
        return value << 30;
      default:
        break;
    }
  }
  return value;
}

}  // namespace

size_t last_level_cache_bytes(const std::string& cpu_root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int best_level = 0;
  size_t best_size = 0;
  std::set<std::string> instances;  // shared_cpu_list of each instance of the highest level
  for (const fs::directory_entry& cpu : fs::directory_iterator(cpu_root, ec)) {
    const std::string name = cpu.path().filename().string();
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
        name.find_first_not_of("0123456789", 3) != std::string::npos) {
      continue;
    }
    std::error_code ec2;
    for (const fs::directory_entry& index : fs::directory_iterator(cpu.path() / "cache", ec2)) {
      if (index.path().filename().string().compare(0, 5, "index") != 0) continue;
      const std::string type = read_line(index.path() / "type");
      if (type != "Data" && type != "Unified") continue;
      const int level = std::atoi(read_line(index.path() / "level").c_str());
      const size_t size = parse_size(read_line(index.path() / "size"));
      if (level <= 0 || size == 0) continue;
      if (level > best_level) {
        best_level = level;
        best_size = size;
        instances.clear();
      }
      if (level == best_level) {
        best_size = std::max(best_size, size);
        std::string shared = read_line(index.path() / "shared_cpu_list");
        instances.insert(shared.empty() ? name : shared);
      }
    }
  }
  return best_size * instances.size();
}

size_t read_bandwidth_probe_bytes() {
  constexpr size_t kMin = size_t{1} << 30;
  const size_t bytes = std::max(kMin, 8 * last_level_cache_bytes());
  return (bytes + HugePageBuffer::kHugePage - 1) / HugePageBuffer::kHugePage *
         HugePageBuffer::kHugePage;
}

ReadBandwidth measure_read_bandwidth(ThreadPool& pool, size_t bytes, int passes,
                                     const KernelTable& kernels) {
  const int threads = pool.num_threads();
  bytes = std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096 * size_t(threads));
  HugePageBuffer buffer(bytes);
  // Each thread's slice starts on a 4 KiB page (on a 2 MiB one when the slices are that large).
  const size_t align = bytes / size_t(threads) >= HugePageBuffer::kHugePage
                           ? HugePageBuffer::kHugePage
                           : size_t{4096};
  std::vector<size_t> begin(size_t(threads) + 1);
  for (int t = 0; t <= threads; ++t) {
    begin[size_t(t)] = t == threads ? bytes : bytes / size_t(threads) * size_t(t) / align * align;
  }
  uint8_t* data = buffer.data();
  auto fill = [](int t) { return uint8_t(1 + t % 255); };
  pool.run([&](int t, int) {
    uint8_t* p = data + begin[size_t(t)];
    std::memset(p, fill(t), begin[size_t(t) + 1] - begin[size_t(t)]);
  });
  std::vector<uint64_t> sums(size_t(threads) * 8);  // a cache line per thread
  std::vector<double> rates;
  for (int pass = -1; pass < passes; ++pass) {  // pass -1 is the warm-up
    const auto start = std::chrono::steady_clock::now();
    pool.run([&](int t, int) {
      const size_t b = begin[size_t(t)], e = begin[size_t(t) + 1];
      sums[size_t(t) * 8] += kernels.read_stream(data + b, e - b);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass >= 0 && seconds > 0) rates.push_back(double(bytes) / seconds);
  }
  // Every thread summed its slice of fill(t) bytes passes + 1 times: the loads really happened.
  uint64_t expected = 0, total = 0;
  for (int t = 0; t < threads; ++t) {
    const uint64_t n = begin[size_t(t) + 1] - begin[size_t(t)];
    const uint64_t word = 0x0101010101010101ull * fill(t);
    expected += uint64_t(passes + 1) * (n / 8 * word);
    total += sums[size_t(t) * 8];
  }
  ReadBandwidth r;
  r.buffer_bytes = bytes;
  r.passes = passes;
  r.threads = threads;
  r.isa = kernels.isa;
  if (total != expected || rates.empty()) return r;  // zero: no valid measurement
  std::sort(rates.begin(), rates.end());
  r.best_bytes_per_second = rates.back();
  r.median_bytes_per_second = rates[rates.size() / 2];
  return r;
}

}  // namespace inferd::kernels
