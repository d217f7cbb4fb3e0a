// Streaming the texts of a JSON-lines corpus (one object per line, the text in one string
// field) without holding the file in memory: the input of preprocessing.
#pragma once

#include <cstddef>
#include <fstream>
#include <string>

namespace hydraulis {

// Reads one document text per non-blank line, in file order. Errors use the style of
// ParseJsonLinesLengths: InvalidInput "<path>:<line>: ..." naming the field.
class JsonLinesTextReader {
 public:
  // Opens `path`; InvalidInput naming it when it cannot be opened. `field` is the string
  // field holding each document's text.
  JsonLinesTextReader(const std::string& path, std::string field);

  // Reads the next document's text into `text` (UTF-8, JSON escapes decoded); false at the
  // end of the file. InvalidInput "<path>:<line>: ..." for invalid JSON, a line that is not
  // an object, a missing field or a field that is not a string; "<path>: read error".
  bool Next(std::string& text);

  // The 1-based line of the document Next returned last (0 before the first).
  std::size_t line() const { return line_; }

 private:
  std::string path_;
  std::string field_;
  std::ifstream in_;
  std::string buffer_;
  std::size_t line_ = 0;
};

}  // namespace hydraulis
