// MappedFile: a read-only memory map of a whole file, unmapped on destruction.
// Model weights are used in place from this map; nothing is copied at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace inferd {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. Throws inferd::Error naming the path and the OS error.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Drops this process's pages of the whole pages inside [p, p + n) (a range of bytes()): they
  // stop counting in its memory and are read from the file again if touched. For weights that
  // were copied out (repacked): a model that fills most of RAM must not hold both copies.
  void release_pages(const uint8_t* p, size_t n) const;
  const std::string& path() const { return path_; }

 private:
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace inferd
