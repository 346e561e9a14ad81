#include "spread.hpp"

#include <cstring>
#include <mutex>

#include "orrery/base/error.hpp"
#include "parallel.hpp"

namespace orrery::planner::detail {
namespace {

template <class T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_bytes(std::string& out, const std::string& bytes) {
  put<uint64_t>(out, bytes.size());
  out += bytes;
}

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }
  template <class T>
  T get() {
    ORRERY_CHECK(bytes_.size() - at_ >= sizeof(T), "truncated evaluation record");
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string get_bytes() {
    const auto n = get<uint64_t>();
    ORRERY_CHECK(bytes_.size() - at_ >= n, "truncated evaluation record");
    std::string s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::string encode(const std::vector<const Evaluation*>& evaluations) {
  std::string out;
  for (const Evaluation* e : evaluations) {
    put<uint8_t>(out, static_cast<uint8_t>(e->status));
    put_bytes(out, e->reason);
    put<double>(out, e->peak_bytes);
    put<double>(out, e->capacity_bytes);
    std::string result;
    ORRERY_CHECK(e->result.SerializeToString(&result), "could not serialize a SimResult");
    put_bytes(out, result);
  }
  return out;
}

std::vector<Evaluation> decode(const std::string& bytes) {
  std::vector<Evaluation> out;
  Reader in(bytes);
  while (!in.done()) {
    Evaluation e;
    const auto status = in.get<uint8_t>();
    ORRERY_CHECK(status <= static_cast<uint8_t>(Evaluation::Status::kTimed),
                 "bad evaluation status");
    e.status = static_cast<Evaluation::Status>(status);
    e.reason = in.get_bytes();
    e.peak_bytes = in.get<double>();
    e.capacity_bytes = in.get<double>();
    ORRERY_CHECK(e.result.ParseFromString(in.get_bytes()), "could not parse a SimResult");
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Evaluation> evaluate_spread(size_t n, int threads, const Ranks* ranks,
                                        const std::function<Evaluation(size_t)>& evaluate,
                                        const std::function<void(int64_t, int64_t)>& on_done) {
  if (n == 0) return {};  // every rank has the same n: all skip the all-gather together
  const size_t size = ranks != nullptr ? static_cast<size_t>(ranks->size()) : 1;
  const size_t rank = ranks != nullptr ? static_cast<size_t>(ranks->rank()) : 0;
  // This rank's candidates: rank, rank + size, rank + 2 size, ...
  const size_t mine = n > rank ? (n - rank + size - 1) / size : 0;
  std::vector<Evaluation> local(mine);
  std::mutex done_mutex;
  int64_t done = 0;
  parallel_for(mine, threads, [&](size_t j) {
    local[j] = evaluate(rank + j * size);
    if (on_done) {
      std::lock_guard<std::mutex> lock(done_mutex);
      on_done(++done, static_cast<int64_t>(mine));
    }
  });
  if (size == 1) return local;
  std::vector<const Evaluation*> view;
  for (const auto& e : local) view.push_back(&e);
  const std::vector<std::string> gathered = ranks->allgather(encode(view));
  std::vector<Evaluation> out(n);
  for (size_t r = 0; r < size; ++r) {
    std::vector<Evaluation> theirs = decode(gathered[r]);
    const size_t expected = n > r ? (n - r + size - 1) / size : 0;
    ORRERY_CHECK(theirs.size() == expected, "a rank returned the wrong number of evaluations");
    for (size_t j = 0; j < theirs.size(); ++j) out[r + j * size] = std::move(theirs[j]);
  }
  return out;
}

}  // namespace orrery::planner::detail
