#include "hydraulis/base/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hydraulis/base/error.h"

namespace hydraulis {

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidInput(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw InvalidInput(path + ": read error");
  return out.str();
}

namespace {

void WriteInto(const std::string& path, const std::string& shown, const std::string& text) {
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) {
    // A path the user cannot write (no such folder, no permission) is their input's
    // problem; anything else is the machine's.
    const int e = errno;
    const std::string message = shown + ": cannot create: " + std::strerror(e);
    if (e == ENOENT || e == ENOTDIR || e == EACCES || e == EPERM || e == EROFS || e == EISDIR) {
      throw InvalidInput(message);
    }
    throw IoError(message);
  }
  const bool wrote = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const int write_errno = errno;
  const bool flushed = std::fflush(out) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(out) == 0;
  if (!wrote || !flushed || !closed) {
    throw IoError(shown + ": write failed: " + std::strerror(!wrote ? write_errno : flush_errno));
  }
}

}  // namespace

void WriteFileAtomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = path;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    target = fs::weakly_canonical(target, ec);
    if (ec) throw InvalidInput(path + ": cannot resolve the symbolic link: " + ec.message());
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    if (fs::is_character_file(st) || fs::is_fifo(st)) {
      WriteInto(target.string(), path, text);
      return;
    }
    throw InvalidInput(path + ": not a regular file (" +
                       (fs::is_directory(st) ? std::string("a directory") : "a special file") +
                       "); refusing to replace it");
  }
  const std::string tmp = target.string() + ".tmp." + std::to_string(::getpid());
  try {
    WriteInto(tmp, path, text);
  } catch (const IoError&) {
    std::remove(tmp.c_str());
    throw;
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw IoError(path + ": cannot rename temporary file: " + ec.message());
  }
}

void FlushStdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    throw IoError(std::string("stdout: write failed: ") + std::strerror(errno));
  }
}

}  // namespace hydraulis
