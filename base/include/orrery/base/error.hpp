// The three kinds of failure orrery reports, with one message shape:
//   InputError        the user's mistake:   "file:line: field.path: reason"
//   EnvironmentError  the machine's failure (a missing file, a tool that is not installed)
//   InternalError     a bug in orrery (ORRERY_CHECK never compiles out)
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace orrery::base {

class InputError : public std::runtime_error {
 public:
  // Any of file, field may be empty; line 0 means unknown.
  InputError(std::string file, int line, std::string field, std::string reason);

  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_;
  int line_;
  std::string field_;
  std::string reason_;
};

class EnvironmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_check(const char* condition, const char* file, int line,
                             std::string_view what);

// " (did you mean 'x'?)" for the closest candidate within a small edit distance, otherwise
// " (expected one of: a, b, c)"; empty when there are no candidates.
std::string suggest(std::string_view got, const std::vector<std::string>& candidates);

}  // namespace orrery::base

// An invariant of orrery's own code. Always checked: a wrong prediction is worse than a crash.
#define ORRERY_CHECK(cond, what)                                                \
  do {                                                                          \
    if (!(cond)) ::orrery::base::fail_check(#cond, __FILE__, __LINE__, (what)); \
  } while (0)
