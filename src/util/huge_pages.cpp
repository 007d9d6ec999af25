#include "util/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <utility>

#include "util/error.h"

namespace inferd {

HugePageBuffer::HugePageBuffer(size_t bytes) {
  if (bytes == 0) return;
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Map one huge page more than asked and trim, so the buffer starts on a 2 MiB boundary:
  // only whole, aligned 2 MiB ranges can be huge pages.
  const size_t mapped = size + kHugePage;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot map {} bytes of memory", bytes);
  const auto base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) munmap(p, aligned - base);
  const uintptr_t end = base + mapped;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  data_ = reinterpret_cast<uint8_t*>(aligned);
  size_ = size;
  // Advice only: without transparent huge pages the mapping works the same in 4 KiB pages.
  madvise(data_, size_, MADV_HUGEPAGE);
}

HugePageBuffer::~HugePageBuffer() {
  release();
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void HugePageBuffer::prefault() {
  prefault(size_);
}

void HugePageBuffer::prefault(size_t bytes) {
  // A write per 4 KiB page faults it in (a 2 MiB huge page on the first write to its range);
  // the pages are zero already, so writing zero changes nothing.
  constexpr size_t kPage = 4096;
  for (size_t offset = 0; offset < std::min(bytes, size_); offset += kPage)
    reinterpret_cast<volatile uint8_t*>(data_)[offset] = 0;
}

void HugePageArena::prefault() {
  for (HugePageBuffer& b : chunks_) b.prefault();
  for (HugePageBuffer& b : large_) b.prefault();
}

void HugePageBuffer::release() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

uint8_t* HugePageArena::allocate(size_t bytes, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
      alignment > HugePageBuffer::kHugePage) {
    fail("huge-page arena: alignment {} is not a power of two up to 2 MiB", alignment);
  }
  if (bytes > kChunk / 2) {  // a large piece gets a mapping of its own
    large_.emplace_back(bytes);
    return large_.back().data();
  }
  size_t offset = (used_ + alignment - 1) / alignment * alignment;
  if (chunks_.empty() || offset + bytes > chunks_.back().size()) {
    chunks_.emplace_back(kChunk);
    used_ = 0;
    offset = 0;
  }
  used_ = offset + bytes;
  return chunks_.back().data() + offset;
}

}  // namespace inferd
