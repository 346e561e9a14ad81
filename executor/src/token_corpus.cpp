#include "orrery/executor/token_corpus.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "orrery/base/error.hpp"

namespace orrery::executor {

std::optional<TokenDtype> parse_token_dtype(const std::string& name) {
  if (name == "uint16") return TokenDtype::kUint16;
  if (name == "uint32") return TokenDtype::kUint32;
  return std::nullopt;
}

std::string token_dtype_name(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? "uint16" : "uint32";
}

size_t token_bytes(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? 2 : 4; }

TokenCorpus::TokenCorpus(std::string file, TokenDtype dtype, int64_t vocab_size, int64_t seq_len)
    : file_(std::move(file)), dtype_(dtype), vocab_size_(vocab_size), seq_len_(seq_len) {
  const int fd = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw base::InputError(file_, 0, "--data", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw base::InputError(file_, 0, "--data", "not a regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  const size_t width = token_bytes(dtype_);
  if (size % width != 0) {
    ::close(fd);
    throw base::InputError(file_, 0, "--data-dtype",
                           "the file's " + std::to_string(size) + " bytes are not a whole number " +
                               "of " + token_dtype_name(dtype_) + " tokens (" +
                               std::to_string(width) + " bytes each)");
  }
  tokens_ = static_cast<int64_t>(size / width);
  if (tokens_ < seq_len_ + 1) {
    ::close(fd);
    throw base::InputError(file_, 0, "--data",
                           "holds " + std::to_string(tokens_) +
                               " tokens, fewer than one sequence (" + "--seq " +
                               std::to_string(seq_len_) + " needs " + std::to_string(seq_len_ + 1) +
                               ": the inputs and the next token)");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    throw base::EnvironmentError(file_ + ": mmap: " + std::string(std::strerror(errno)));
  }
  data_ = static_cast<const unsigned char*>(p);
  mapped_bytes_ = size;
}

TokenCorpus::~TokenCorpus() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), mapped_bytes_);
}

// Little-endian whatever the host's order.
int64_t TokenCorpus::token(int64_t index) const {
  const unsigned char* b = data_ + static_cast<size_t>(index) * token_bytes(dtype_);
  if (dtype_ == TokenDtype::kUint16) return int64_t{b[0]} | (int64_t{b[1]} << 8);
  return int64_t{b[0]} | (int64_t{b[1]} << 8) | (int64_t{b[2]} << 16) | (int64_t{b[3]} << 24);
}

void TokenCorpus::refuse_token(int64_t index, int64_t id) const {
  throw base::InputError(file_, 0, "token " + std::to_string(index),
                         "id " + std::to_string(id) + " is not below the model's vocab_size " +
                             std::to_string(vocab_size_) + " (was the corpus made with another " +
                             "tokenizer, or read with the wrong --data-dtype?)");
}

void TokenCorpus::append_row(int64_t step, int64_t row, int64_t global_batch,
                             std::vector<int64_t>& out) const {
  const int64_t window = ((step - 1) * global_batch + row) % windows();
  const int64_t first = window * seq_len_;
  for (int64_t i = first; i <= first + seq_len_; ++i) {
    const int64_t id = token(i);
    if (id >= vocab_size_) refuse_token(i, id);
    out.push_back(id);
  }
}

void TokenCorpus::validate_all() const {
  for (int64_t i = 0; i < tokens_; ++i) {
    if (const int64_t id = token(i); id >= vocab_size_) refuse_token(i, id);
  }
}

}  // namespace orrery::executor
