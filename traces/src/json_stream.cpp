// Reading a JSON spec file as a stream of parser events (nlohmann's SAX interface): each value goes
// straight into its field, so neither the file's text nor a tree of it is ever held. A measured
// trace of 170 MB took over 6 GB through the text, nlohmann's check, the YAML tree and the
// message; this way it takes the message alone (docs/benchmarks.md, "Large traces"). The checks
// and messages are FieldReader's, as for the YAML walker, with the same precedence: a syntax error
// anywhere in the file is reported before a field error found earlier in it.
#include <cstdio>
#include <exception>
#include <iterator>
#include <memory>
#include <set>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <nlohmann/json.hpp>

#include "orrery/base/error.hpp"
#include "orrery/base/input_file.hpp"
#include "orrery/pb/options.pb.h"
#include "orrery/traces/json_stream.hpp"
#include "orrery/traces/spec_io.hpp"
#include "spec_fields.hpp"

namespace orrery {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The file's bytes one at a time through a buffer, counting lines: token_line() is the line of the
// last byte that was not white space, which is the line of the token the parser just reported (its
// look-ahead past a number is white space or punctuation that ends no token).
class Source {
 public:
  explicit Source(std::FILE* file) : file_(file), buffer_(kBufferBytes) { fill(); }

  bool at_end() const { return pos_ >= size_; }
  const char& current() const { return buffer_[pos_]; }
  void advance() {
    const char c = buffer_[pos_];
    if (c == '\n') {
      ++line_;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      token_line_ = line_;
    }
    if (++pos_ >= size_) fill();
  }
  int token_line() const { return token_line_; }
  bool read_failed() const { return std::ferror(file_) != 0; }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 20;
  void fill() {
    size_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
    pos_ = 0;
  }

  std::FILE* file_;
  std::vector<char> buffer_;
  size_t pos_ = 0, size_ = 0;
  int line_ = 1, token_line_ = 1;
};

// An input iterator over a Source, for nlohmann's iterator adapter; all copies share the Source.
class SourceIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  explicit SourceIterator(Source* source = nullptr) : source_(source) {}
  reference operator*() const { return source_->current(); }
  SourceIterator& operator++() {
    source_->advance();
    return *this;
  }
  bool operator==(const SourceIterator& other) const { return done() == other.done(); }
  bool operator!=(const SourceIterator& other) const { return !(*this == other); }

 private:
  bool done() const { return source_ == nullptr || source_->at_end(); }
  Source* source_;
};

struct Frame {
  bool object = true;
  Message* msg = nullptr;                 // the message filled, or the one holding the list
  const FieldDescriptor* list = nullptr;  // a list: its repeated field
  std::string path;
  int line = 0;                            // of its '{' or '['
  std::set<std::string> seen;              // a mapping: the keys so far
  size_t items = 0;                        // a list: the items so far
  const FieldDescriptor* field = nullptr;  // a mapping: the field of the key just read
  std::string field_path;
  int field_line = 0;
};

// The SAX handler: a stack of the mappings and lists open around the current value.
class Filler {
 public:
  Filler(Message* root, const std::string& file, SourceMap* where, const Source& source)
      : root_(root), file_(file), fields_(file, where), source_(source) {}

  bool null() {
    return guarded([&] { value(detail::kNull, ""); });
  }
  bool boolean(bool v) {
    return guarded([&] { value(detail::kScalar, v ? "true" : "false"); });
  }
  bool number_integer(int64_t v) {
    return guarded([&] { value(detail::kScalar, std::to_string(v)); });
  }
  bool number_unsigned(uint64_t v) {
    return guarded([&] { value(detail::kScalar, std::to_string(v)); });
  }
  bool number_float(double, const std::string& text) {
    return guarded([&] { value(detail::kScalar, text); });
  }
  bool string(std::string& v) {
    return guarded([&] { value(detail::kScalar, v); });
  }
  bool binary(nlohmann::json::binary_t&) { return true; }  // not produced by the JSON parser
  bool start_object(size_t) {
    return guarded([&] { value(detail::kMapping, ""); });
  }
  bool start_array(size_t) {
    return guarded([&] { value(detail::kList, ""); });
  }
  bool key(std::string& k) {
    return guarded([&] { on_key(k); });
  }
  bool end_object() {
    return guarded([&] { close_mapping(); });
  }
  bool end_array() {
    return guarded([&] { close_list(); });
  }

  template <class Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    syntax_ = std::make_unique<Exception>(e);
    return false;
  }

  // Throws the syntax error, else the first field error, if there was one.
  void finish(const std::filesystem::path& file) const;

 private:
  template <class F>
  bool guarded(F&& f) {
    if (error_) return true;  // only a syntax error further on can still change the outcome
    try {
      f();
    } catch (const base::InputError&) {
      error_ = std::current_exception();
    }
    return true;
  }

  void value(const char* kind, const std::string& text);
  void at_root(const char* kind);
  void in_mapping(Frame& f, const char* kind, const std::string& text);
  void in_list(Frame& f, const char* kind, const std::string& text);
  void open_mapping(Message* msg, const std::string& path, int line) {
    Frame f;
    f.msg = msg;
    f.path = path;
    f.line = line;
    stack_.push_back(std::move(f));
  }
  void on_key(const std::string& k);
  void close_mapping();
  void close_list();

  [[noreturn]] void not_a(const std::string& path, int line, const char* kind,
                          const std::string& expected) const {
    fields_.fail(path, line, std::string("got ") + kind + ", expected " + expected);
  }
  static std::string mapping_of(const FieldDescriptor* field) {
    return "a mapping of " + field->message_type()->name() + " fields";
  }

  Message* root_;
  std::string file_;
  detail::FieldReader fields_;
  const Source& source_;
  std::vector<Frame> stack_;
  bool root_seen_ = false;
  std::exception_ptr error_;
  std::unique_ptr<std::exception> syntax_;
};

void Filler::value(const char* kind, const std::string& text) {
  if (stack_.empty()) return at_root(kind);
  Frame& f = stack_.back();
  if (f.object) {
    in_mapping(f, kind, text);
  } else {
    in_list(f, kind, text);
  }
}

void Filler::at_root(const char* kind) {
  ORRERY_CHECK(!root_seen_, "a JSON value after the root one passed the parser");
  root_seen_ = true;
  if (kind == detail::kNull) throw base::InputError(file_, 0, "", "the file is empty");
  fields_.record("", source_.token_line());
  if (kind != detail::kMapping) {
    not_a("", source_.token_line(), kind,
          "a mapping of " + root_->GetDescriptor()->name() + " fields");
  }
  open_mapping(root_, "", source_.token_line());
}

void Filler::in_mapping(Frame& f, const char* kind, const std::string& text) {
  const FieldDescriptor* field = f.field;
  const std::string path = f.field_path;
  const int line = source_.token_line();
  if (kind == detail::kNull) {
    // A key with no value points at the key, as the YAML reader does.
    fields_.fail(path, f.field_line,
                 "got nothing (null), expected " + detail::FieldReader::describe(field));
  }
  if (field->is_repeated()) {
    if (kind != detail::kList) not_a(path, line, kind, "a list");
    Frame list;
    list.object = false;
    list.msg = f.msg;
    list.list = field;
    list.path = path;
    list.line = line;
    stack_.push_back(std::move(list));
  } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (kind != detail::kMapping) not_a(path, line, kind, mapping_of(field));
    open_mapping(f.msg->GetReflection()->MutableMessage(f.msg, field), path, line);
  } else {
    if (kind != detail::kScalar) not_a(path, line, kind, "a single value");
    fields_.set_scalar(f.msg, field, text, path, line);
  }
}

void Filler::in_list(Frame& f, const char* kind, const std::string& text) {
  const std::string path = f.path + "[" + std::to_string(f.items++) + "]";
  const int line = source_.token_line();
  fields_.record(path, line);
  if (f.list->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (kind != detail::kMapping) not_a(path, line, kind, mapping_of(f.list));
    open_mapping(f.msg->GetReflection()->AddMessage(f.msg, f.list), path, line);
  } else {
    if (kind != detail::kScalar) not_a(path, line, kind, "a single value");
    fields_.add_scalar(f.msg, f.list, text, path, line);
  }
}

void Filler::on_key(const std::string& k) {
  Frame& f = stack_.back();
  const int line = source_.token_line();
  const std::string path = detail::child_path(f.path, k);
  if (!f.seen.insert(k).second) fields_.fail(path, line, "appears twice");
  f.field = fields_.field_named(*f.msg->GetDescriptor(), k, path, line);
  fields_.record(path, line);
  f.field_path = path;
  f.field_line = line;
}

void Filler::close_mapping() {
  const Frame& f = stack_.back();
  fields_.check_required(*f.msg, f.seen, f.path, f.line);
  stack_.pop_back();
}

void Filler::close_list() {
  const Frame& f = stack_.back();
  if (f.items == 0 && f.list->options().GetExtension(pb::meta).required())
    fields_.fail(f.path, f.line, "must not be empty");
  stack_.pop_back();
}

// The line of byte `offset` as the whole-text check counted it: newlines before offset - 1.
int line_at(const std::filesystem::path& file, size_t offset) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"), &std::fclose);
  int line = 1;
  if (!in) return line;
  for (size_t i = 0; i + 1 < offset; ++i) {
    const int c = std::fgetc(in.get());
    if (c == EOF) break;
    line += c == '\n';
  }
  return line;
}

void Filler::finish(const std::filesystem::path& file) const {
  if (const auto* e = dynamic_cast<const nlohmann::json::parse_error*>(syntax_.get())) {
    std::string reason = e->what();
    if (auto pos = reason.find("syntax error"); pos != std::string::npos)
      reason = reason.substr(pos);
    throw base::InputError(file_, line_at(file, e->byte), "", "not valid JSON: " + reason);
  }
  if (syntax_) {
    // A number past a double's range ("1e999") is refused, not an exception out of the reader.
    throw base::InputError(
        file_, 0, "",
        "not valid JSON: a number too large for a double (" + std::string(syntax_->what()) + ")");
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace

void read_json_file_streaming(const std::filesystem::path& file, Message* out, SourceMap* where) {
  base::require_input_file(file);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (!in) throw base::EnvironmentError(file.string() + ": exists but cannot be read");
  out->Clear();
  if (where != nullptr) *where = SourceMap(file.string());
  Source source(in.get());
  Filler filler(out, file.string(), where, source);
  nlohmann::json::sax_parse(SourceIterator(&source), SourceIterator(), &filler);
  if (source.read_failed()) throw base::EnvironmentError(file.string() + ": reading failed");
  filler.finish(file);
}

}  // namespace orrery
