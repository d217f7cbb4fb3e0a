#include "hydraulis/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

// Closes the descriptor on every path out of the constructor; the mapping stays valid
// after close.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

MappedFile::MappedFile(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw InvalidInput(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw InvalidInput(path + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) throw InvalidInput(path + ": not a regular file");
  size_ = static_cast<std::size_t>(st.st_size);
  // mmap rejects a zero length; an empty file is an empty span.
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) {
    size_ = 0;
    throw InvalidInput(path + ": cannot map: " + std::strerror(errno));
  }
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() { Unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::Release(std::span<const std::byte> range) const noexcept {
  if (range.empty() || data_ == nullptr) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(range.data());
  const std::uintptr_t begin = (first + page - 1) / page * page;
  const std::uintptr_t end = (first + range.size()) / page * page;
  // Advice only: a failure leaves the pages resident, which is never wrong.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::Unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace hydraulis
