// A read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace hydraulis {

// Maps `path` read-only for the object's lifetime. Reading through the mapping lets a large
// index be validated and summed without a copy of the file in memory; pages the reader
// never touches are never read from disk. Not copyable; movable.
class MappedFile {
 public:
  // InvalidInput naming the path when it cannot be opened, is not a regular file, or
  // cannot be mapped. An empty file maps to an empty span.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  // Drops the pages lying wholly inside `range` (a part of bytes()) from this process's
  // memory; they are read from the file again if touched. A reader streaming a large file
  // (a 13 GB checkpoint) so keeps only what it still needs resident.
  void Release(std::span<const std::byte> range) const noexcept;

 private:
  void Unmap() noexcept;

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace hydraulis
