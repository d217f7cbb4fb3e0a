#include "measurements_file.h"

#include "hydraulis/base/error.h"

namespace hydraulis::tools {

MeasurementsFile::MeasurementsFile(const std::string& path, const MeasuredRunHeader& header)
    : path_(path), out_(path, std::ios::trunc) {
  if (!out_) throw InvalidInput("--save-measurements: cannot write " + path);
  Put(MeasuredRunHeaderLine(header));
}

void MeasurementsFile::Write(int step, const MeasuredStep& measured) {
  Put(MeasuredRunStepLine(step, measured));
}

void MeasurementsFile::Put(const std::string& line) {
  out_ << line << '\n' << std::flush;
  if (!out_) throw IoError("--save-measurements " + path_ + ": write failed");
}

}  // namespace hydraulis::tools
