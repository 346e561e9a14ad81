// A pre-tokenized training corpus (`orrery run --data FILE --data-dtype uint16|uint32`): a flat
// file of little-endian token ids, nothing else in it (nanoGPT's train.bin is one), memory-mapped
// read-only. The format, its refusals and a one-line way to make one are in docs/formats.md.
//
// Sequences are windows of seq + 1 tokens (inputs and the next-token targets) starting every seq
// tokens: window w holds tokens [w x seq, w x seq + seq + 1), so the corpus has
// (tokens - 1) / seq of them. Row b of step n's global batch of B rows is window
// ((n - 1) x B + b) mod windows: the corpus is read in order, from its start again once it is
// used up. Every rank computes the same rows and reads only its own share of them, so any plan
// trains on the same bytes as one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace orrery::executor {

enum class TokenDtype { kUint16, kUint32 };

// "uint16" or "uint32"; nullopt for anything else.
std::optional<TokenDtype> parse_token_dtype(const std::string& name);
std::string token_dtype_name(TokenDtype dtype);
size_t token_bytes(TokenDtype dtype);

// Where a run's tokens come from: a corpus file and its token width, or, with no file, the
// synthetic tokens of TrainConfig::seed (the default; docs/executor.md, "Data").
struct TokenSource {
  std::string file;
  std::optional<TokenDtype> dtype;  // required with a file
};

class TokenCorpus {
 public:
  // Maps `file`. Refuses, with base::InputError naming the file, the field and the reason: a file
  // that cannot be opened, a size that is not a whole number of tokens, fewer than seq_len + 1
  // tokens (not one sequence). Token ids are checked against vocab_size as they are read
  // (validate_all() checks them all at once).
  TokenCorpus(std::string file, TokenDtype dtype, int64_t vocab_size, int64_t seq_len);
  ~TokenCorpus();
  TokenCorpus(const TokenCorpus&) = delete;
  TokenCorpus& operator=(const TokenCorpus&) = delete;

  int64_t tokens() const { return tokens_; }
  int64_t windows() const { return (tokens_ - 1) / seq_len_; }

  // The seq_len + 1 token ids of row `row` of step `step`'s (1-based) global batch of
  // `global_batch` rows, appended to `out`; a token id >= vocab_size is refused (InputError
  // naming its index in the file).
  void append_row(int64_t step, int64_t row, int64_t global_batch, std::vector<int64_t>& out) const;

  // Every token id < vocab_size, or InputError naming the first that is not.
  void validate_all() const;

 private:
  int64_t token(int64_t index) const;
  void refuse_token(int64_t index, int64_t id) const;

  std::string file_;
  TokenDtype dtype_;
  int64_t vocab_size_, seq_len_;
  int64_t tokens_ = 0;
  const unsigned char* data_ = nullptr;
  size_t mapped_bytes_ = 0;
};

}  // namespace orrery::executor
