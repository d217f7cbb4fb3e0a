// The project's exception hierarchy. Every error that crosses a public API boundary is one
// of these, with a message a user can act on (which file, which field, which value).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hydraulis {

// Base of all hydraulis errors.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The user's input (a file, a flag, a value) is invalid. The CLI exits with status 2.
class InvalidInput : public Error {
 public:
  explicit InvalidInput(const std::string& message) : Error(message) {}
};

// The input is valid but admits no solution (e.g. a document no candidate can hold and the
// user asked to reject rather than truncate).
class Infeasible : public Error {
 public:
  explicit Infeasible(const std::string& message) : Error(message) {}
};

// Reading or writing failed for a reason outside the input's content (a full disk, a
// closed stdout, an unreachable peer). The CLI exits with status 1 and the reason.
class IoError : public Error {
 public:
  explicit IoError(const std::string& message) : Error(message) {}
};

// A broken internal invariant (a bug), detected by a checker.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

// `value` as it may appear inside an error message: in single quotes, at most `max_chars`
// characters of it (then "...(N bytes)"). Printable ASCII and well-formed UTF-8 letters
// show as they are (a tokenizer's 'Ġthe' stays readable); control bytes, the backslash,
// bytes that are not UTF-8, and code points that could break or reorder the line (C1
// controls, U+2028/2029, bidirectional controls, the BOM) are escaped as \xHH per byte. So
// echoing a user's input never floods the terminal or breaks the one-line message.
std::string QuoteForMessage(std::string_view value, std::size_t max_chars = 60);

}  // namespace hydraulis
