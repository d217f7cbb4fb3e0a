// `train --tensorboard DIR`: the step and evaluation records as TensorBoard scalars, written
// by `python -m hydraulis.tensorboard DIR` fed the log's lines on a pipe. TensorBoard's
// format comes from a maintained writer (tensorboardX), not from this program.
#pragma once

#include <cstdio>
#include <string>

namespace hydraulis::tools {

// The writer process and the pipe to it.
class EventWriter {
 public:
  // Starts the writer on `dir` (PackagePython()); IoError when it cannot start.
  explicit EventWriter(const std::string& dir);
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  ~EventWriter();

  // Hands the writer one log line (a JSON record); IoError when the writer stopped.
  void Write(const std::string& line);
  // Waits for the writer to write and close its files; IoError when it failed.
  void Close();

 private:
  std::string dir_;
  std::FILE* pipe_ = nullptr;
};

}  // namespace hydraulis::tools
