// `train --save-measurements`: rank 0's file of what each step measured, the input of
// `hydraulis replay` (assign/measured_run.h). Written line by line as steps end, like
// --log-json, so a run that stops early leaves every step it finished.
#pragma once

#include <fstream>
#include <string>

#include "hydraulis/assign/measured_run.h"

namespace hydraulis::tools {

class MeasurementsFile {
 public:
  // Creates (truncates) `path` and writes the header line; InvalidInput naming the flag
  // when it cannot.
  MeasurementsFile(const std::string& path, const MeasuredRunHeader& header);
  // Appends step `step`'s line; IoError naming the file when the write fails.
  void Write(int step, const MeasuredStep& measured);

 private:
  void Put(const std::string& line);

  std::string path_;
  std::ofstream out_;
};

}  // namespace hydraulis::tools
