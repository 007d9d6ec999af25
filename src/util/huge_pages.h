// Memory for the large buffers a step streams through every time (packed weights, the KV
// cache, the activation workspaces), in 2 MiB-aligned anonymous mappings the kernel is asked to
// back with transparent huge pages (madvise). With 4 KiB pages a batched decode step touches
// tens of thousands of pages, far more than the TLB holds, and pays a page walk for each;
// measured on SmolLM2-135M with 16 sequences, huge pages for both weights and KV made the step
// about 9% faster (either alone did not). The workspaces matter for prompts: a matmul's output
// rows lie a whole row (6 KiB and more) apart, so each row a tile stores is another page.
// Where the kernel has transparent huge pages off, the memory simply stays in small pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace inferd {

// One mapping: zero-filled, committed page by page on first touch (so a large, mostly unused
// buffer costs address space only), unmapped on destruction.
class HugePageBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugePageBuffer() = default;
  // Throws inferd::Error when the mapping fails (out of address space or memory).
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Touches every page now, so the kernel's page faults and zeroing happen at start-up rather
  // than inside the first request (they made its TTFT several times longer). For buffers that
  // every forward pass uses; not for the KV cache, which is filled as sequences grow.
  void prefault();
  // The same for the first `bytes` only.
  void prefault(size_t bytes);

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Hands out pieces of huge-page buffers for many medium-sized allocations (a model's packed
// matrices, most well under 2 MiB: each in its own mapping would waste the rest of its huge
// page). Pieces live as long as the arena; not thread-safe (models load on one thread).
class HugePageArena {
 public:
  // `bytes` zeroed bytes aligned to `alignment` (a power of two, at most 2 MiB).
  uint8_t* allocate(size_t bytes, size_t alignment = 64);
  // `count` zeroed values of T (a trivially copyable type whose zero bytes are its zero).
  template <typename T>
  std::span<T> allocate_array(size_t count) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
    return {reinterpret_cast<T*>(allocate(count * sizeof(T), 64)), count};
  }
  // HugePageBuffer::prefault for every buffer of the arena.
  void prefault();

 private:
  static constexpr size_t kChunk = size_t{32} << 20;
  std::vector<HugePageBuffer> chunks_;  // shared by small pieces, the last one being filled
  size_t used_ = 0;                     // bytes handed out of chunks_.back()
  std::vector<HugePageBuffer> large_;   // one per piece over half a chunk
};

}  // namespace inferd
