#include "event_writer.h"

#include <cerrno>
#include <csignal>
#include <cstring>

#include "commands.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {

EventWriter::EventWriter(const std::string& dir) : dir_(dir) {
  std::string quoted = "'";
  for (const char c : dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  // A writer that died must fail the write, not kill this rank.
  std::signal(SIGPIPE, SIG_IGN);
  pipe_ = popen((PackagePython() + " -m hydraulis.tensorboard " + quoted).c_str(), "w");
  if (pipe_ == nullptr) {
    throw IoError("--tensorboard " + dir + ": cannot start the event writer (" +
                  std::strerror(errno) + ")");
  }
}

EventWriter::~EventWriter() {
  if (pipe_ != nullptr) pclose(pipe_);
}

void EventWriter::Write(const std::string& line) {
  if (std::fputs((line + "\n").c_str(), pipe_) == EOF || std::fflush(pipe_) != 0) {
    throw IoError("--tensorboard " + dir_ +
                  ": the event writer stopped (its message is above; scripts/requirements.txt "
                  "pins tensorboardX for .venv)");
  }
}

void EventWriter::Close() {
  const int status = pclose(pipe_);
  pipe_ = nullptr;
  if (status != 0) {
    throw IoError("--tensorboard " + dir_ + ": the event writer failed (status " +
                  std::to_string(status) + "; its message is above)");
  }
}

}  // namespace hydraulis::tools
