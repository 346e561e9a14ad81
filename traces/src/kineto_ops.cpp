// FLOPs and bytes of the PyTorch ops the Kineto importer knows (see kineto_ops.hpp). The
// per-element FLOP counts are models/src/layer_ops_build.hpp's: softmax 5 (max, subtract, exp,
// sum, normalize), LayerNorm 8, RMSNorm 4, add and multiply 1, copies none; GEMMs 2mnk plus mn
// for a bias.
#include "kineto_ops.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <stdexcept>

namespace orrery::detail {
namespace {

using nlohmann::json;
using Dims = std::vector<int64_t>;

constexpr double kSoftmaxFlopsPerElement = 5;
constexpr double kLayerNormFlopsPerElement = 8;
constexpr double kRmsNormFlopsPerElement = 4;
constexpr double kPointwiseFlopsPerElement = 1;

const std::map<std::string_view, pb::OpClass>& compute_ops() {
  static const std::map<std::string_view, pb::OpClass> ops = {
      {"aten::mm", pb::OP_CLASS_GEMM},
      {"aten::addmm", pb::OP_CLASS_GEMM},
      {"aten::bmm", pb::OP_CLASS_GEMM},
      {"aten::baddbmm", pb::OP_CLASS_GEMM},
      {"aten::matmul", pb::OP_CLASS_GEMM},
      {"aten::linear", pb::OP_CLASS_GEMM},
      {"aten::scaled_dot_product_attention", pb::OP_CLASS_ATTENTION},
      {"aten::softmax", pb::OP_CLASS_ELEMENTWISE},
      {"aten::_softmax", pb::OP_CLASS_ELEMENTWISE},
      {"aten::_safe_softmax", pb::OP_CLASS_ELEMENTWISE},
      {"aten::add", pb::OP_CLASS_ELEMENTWISE},
      {"aten::mul", pb::OP_CLASS_ELEMENTWISE},
      {"aten::layer_norm", pb::OP_CLASS_NORM},
      {"aten::native_layer_norm", pb::OP_CLASS_NORM},
      {"aten::rms_norm", pb::OP_CLASS_NORM},
      {"aten::embedding", pb::OP_CLASS_EMBEDDING},
      {"aten::clone", pb::OP_CLASS_COPY},
      {"aten::copy_", pb::OP_CLASS_COPY},
  };
  return ops;
}

std::string dims_text(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

double numel(const Dims& d) {
  double n = 1;
  for (int64_t x : d) n *= static_cast<double>(x);
  return n;
}

// The k-th input's dims when it is a tensor with at least one dimension.
std::optional<Dims> tensor_dims(const json& args, size_t k) {
  const auto it = args.find("Input Dims");
  if (it == args.end() || !it->is_array() || k >= it->size()) return std::nullopt;
  const json& d = (*it)[k];
  if (!d.is_array() || d.empty()) return std::nullopt;
  Dims out;
  for (const json& x : d) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0) return std::nullopt;
    out.push_back(x.get<int64_t>());
  }
  return out;
}

std::string input_type(const json& args, size_t k) {
  const auto it = args.find("Input type");
  if (it == args.end() || !it->is_array() || k >= it->size() || !(*it)[k].is_string()) return "";
  return (*it)[k].get<std::string>();
}

[[noreturn]] void contradicts(std::string_view name, const std::string& expected,
                              const std::vector<Dims>& got) {
  std::string text;
  for (size_t i = 0; i < got.size(); ++i) text += (i ? " x " : "") + dims_text(got[i]);
  throw std::invalid_argument(std::string(name) + " expects " + expected + ", got " + text);
}

// Broadcast shape of two shapes (numpy rules); nullopt when they do not broadcast.
std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = std::max(x, y);
  }
  return out;
}

// A GEMM of `batch` products of [m, k] x [k, n], reading `read_elements` in all.
ComputeCount gemm(double batch, int64_t m, int64_t n, int64_t k, double read_elements, bool bias,
                  double e) {
  ComputeCount c;
  const double mn = batch * static_cast<double>(m) * static_cast<double>(n);
  c.flops = 2.0 * mn * static_cast<double>(k) + (bias ? mn : 0.0);
  c.bytes_read = read_elements * e;
  c.bytes_written = mn * e;
  c.shape = {static_cast<int64_t>(batch) * m, n, k};
  return c;
}

std::optional<ComputeCount> count_gemm(std::string_view name, const json& args, double e,
                                       std::string& why) {
  const bool has_bias_arg = name == "aten::addmm" || name == "aten::baddbmm";
  const size_t a_at = has_bias_arg ? 1 : 0;
  const auto a = tensor_dims(args, a_at), b = tensor_dims(args, a_at + 1);
  if (!a || !b) {
    why = "no Input Dims (profile with record_shapes=True)";
    return std::nullopt;
  }
  const auto bias = has_bias_arg             ? tensor_dims(args, 0)
                    : name == "aten::linear" ? tensor_dims(args, 2)
                                             : std::nullopt;
  const double bias_elements = bias ? numel(*bias) : 0;
  if (name == "aten::mm" || name == "aten::addmm") {
    if (a->size() != 2 || b->size() != 2 || (*a)[1] != (*b)[0])
      contradicts(name, "[m, k] x [k, n]", {*a, *b});
    return gemm(1, (*a)[0], (*b)[1], (*a)[1], numel(*a) + numel(*b) + bias_elements,
                bias.has_value(), e);
  }
  if (name == "aten::bmm" || name == "aten::baddbmm") {
    if (a->size() != 3 || b->size() != 3 || (*a)[0] != (*b)[0] || (*a)[2] != (*b)[1]) {
      contradicts(name, "[b, m, k] x [b, k, n]", {*a, *b});
    }
    return gemm(static_cast<double>((*a)[0]), (*a)[1], (*b)[2], (*a)[2],
                numel(*a) + numel(*b) + bias_elements, bias.has_value(), e);
  }
  if (name == "aten::linear") {
    // input [..., k] times weight [n, k] transposed.
    if (b->size() != 2 || a->back() != (*b)[1]) contradicts(name, "[..., k] x [n, k]", {*a, *b});
    const int64_t k = a->back();
    const auto m = static_cast<int64_t>(numel(*a) / static_cast<double>(std::max<int64_t>(k, 1)));
    return gemm(1, m, (*b)[0], k, numel(*a) + numel(*b) + bias_elements, bias.has_value(), e);
  }
  // aten::matmul: vectors become a row (left) or a column (right); leading dims broadcast.
  Dims x = *a, y = *b;
  if (x.size() == 1) x.insert(x.begin(), 1);
  if (y.size() == 1) y.push_back(1);
  if (x[x.size() - 1] != y[y.size() - 2]) contradicts(name, "[..., m, k] x [..., k, n]", {*a, *b});
  const auto batch = broadcast(Dims(x.begin(), x.end() - 2), Dims(y.begin(), y.end() - 2));
  if (!batch) contradicts(name, "batch dimensions that broadcast", {*a, *b});
  return gemm(numel(*batch), x[x.size() - 2], y.back(), x.back(), numel(*a) + numel(*b), false, e);
}

std::optional<ComputeCount> count_attention(std::string_view name, const json& args, double e,
                                            std::string& why) {
  const auto q = tensor_dims(args, 0), k = tensor_dims(args, 1), v = tensor_dims(args, 2);
  if (!q || !k || !v) {
    why = "no Input Dims (profile with record_shapes=True)";
    return std::nullopt;
  }
  if (q->size() != 4 || k->size() != 4 || v->size() != 4 || (*q)[3] != (*k)[3] ||
      (*k)[2] != (*v)[2]) {
    contradicts(name, "q [b, h, s, d], k [b, h_kv, s_kv, d], v [b, h_kv, s_kv, d_v]", {*q, *k, *v});
  }
  // is_causal is the sixth argument; the profiler records scalars in "Concrete Inputs".
  bool causal = false;
  if (const auto it = args.find("Concrete Inputs");
      it != args.end() && it->is_array() && it->size() > 5) {
    causal = (*it)[5] == "True";
  }
  const double b = static_cast<double>((*q)[0]), h = static_cast<double>((*q)[1]);
  const double s = static_cast<double>((*q)[2]), skv = static_cast<double>((*k)[2]);
  const double d = static_cast<double>((*q)[3]), dv = static_cast<double>((*v)[3]);
  ComputeCount c;
  c.flops = (causal ? 0.5 : 1.0) * 2.0 * b * h * s * skv * (d + dv);
  c.bytes_read = (numel(*q) + numel(*k) + numel(*v)) * e;
  c.bytes_written = b * h * s * dv * e;
  c.shape = {(*q)[0], (*q)[1], (*q)[2], (*k)[2], (*q)[3]};
  return c;
}

std::optional<ComputeCount> count_memory_bound(std::string_view name, pb::OpClass op_class,
                                               const json& args, double e, std::string& why) {
  const auto x = tensor_dims(args, 0);
  if (!x) {
    why = "no Input Dims (profile with record_shapes=True)";
    return std::nullopt;
  }
  ComputeCount c;
  const double n = numel(*x);
  if (op_class == pb::OP_CLASS_EMBEDDING) {
    // embedding(weight [V, H], indices [...]): gathers one row per index.
    const auto idx = tensor_dims(args, 1);
    if (x->size() != 2 || !idx) contradicts(name, "weight [V, H] and indices", {*x});
    const double rows = numel(*idx), width = static_cast<double>((*x)[1]);
    const auto index_type = element_type(input_type(args, 1));
    c.bytes_read = rows * width * e + rows * (index_type ? index_type->bytes : 8.0);
    c.bytes_written = rows * width * e;
    c.shape = {static_cast<int64_t>(rows), (*x)[1]};
    return c;
  }
  double out = n, read = n;
  if (name == "aten::add" || name == "aten::mul") {
    const auto y = tensor_dims(args, 1);  // absent: a scalar operand
    if (y) {
      const auto shape = broadcast(*x, *y);
      if (!shape) contradicts(name, "operands that broadcast", {*x, *y});
      out = numel(*shape);
      read += numel(*y);
    }
    c.flops = out * kPointwiseFlopsPerElement;
  } else if (op_class == pb::OP_CLASS_COPY) {
    // clone(self) and copy_(self, src): every element read once and written once, no FLOPs.
  } else if (op_class == pb::OP_CLASS_NORM) {
    // layer_norm(input, normalized_shape, weight, bias, ...), rms_norm(input, shape, weight, eps).
    const bool rms = name == "aten::rms_norm";
    for (size_t k : {size_t{2}, size_t{3}}) {
      if (rms && k == 3) break;
      if (const auto p = tensor_dims(args, k)) read += numel(*p);
    }
    c.flops = n * (rms ? kRmsNormFlopsPerElement : kLayerNormFlopsPerElement);
  } else {
    c.flops = n * kSoftmaxFlopsPerElement;
  }
  c.bytes_read = read * e;
  c.bytes_written = out * e;
  c.shape = {static_cast<int64_t>(out)};
  return c;
}

std::string normalized_collective(std::string_view name) {
  std::string s;
  for (char ch : name) s += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* word : {"_into_tensor", "_tensor", "_coalesced", "_base"}) {
    for (size_t at; (at = s.find(word)) != std::string::npos;)
      s.erase(at, std::string_view(word).size());
  }
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return s;
}

}  // namespace

pb::CollectiveKind collective_from_name(std::string_view name) {
  static const std::map<std::string, pb::CollectiveKind> kinds = {
      {"allreduce", pb::COLLECTIVE_KIND_ALL_REDUCE},
      {"allgather", pb::COLLECTIVE_KIND_ALL_GATHER},
      {"reducescatter", pb::COLLECTIVE_KIND_REDUCE_SCATTER},
      {"alltoall", pb::COLLECTIVE_KIND_ALL_TO_ALL},
      {"alltoallv", pb::COLLECTIVE_KIND_ALL_TO_ALL},
      {"broadcast", pb::COLLECTIVE_KIND_BROADCAST},
      {"reduce", pb::COLLECTIVE_KIND_REDUCE},
      {"barrier", pb::COLLECTIVE_KIND_BARRIER},
  };
  const auto it = kinds.find(normalized_collective(name));
  return it == kinds.end() ? pb::COLLECTIVE_KIND_UNSPECIFIED : it->second;
}

KinetoOpClass classify_kineto_op(std::string_view name) {
  KinetoOpClass c;
  if (name == "record_param_comms") {
    c.kind = KinetoOpKind::kCollective;  // the kind is in its args
    return c;
  }
  for (std::string_view prefix : {"c10d::", "nccl:", "gloo:"}) {
    if (name.substr(0, prefix.size()) == prefix) {
      c.collective = collective_from_name(name.substr(prefix.size()));
      if (c.collective != pb::COLLECTIVE_KIND_UNSPECIFIED) c.kind = KinetoOpKind::kCollective;
      return c;
    }
  }
  if (const auto it = compute_ops().find(name); it != compute_ops().end()) {
    c.kind = KinetoOpKind::kCompute;
    c.op_class = it->second;
  }
  return c;
}

std::optional<ElementType> element_type(std::string_view t) {
  static const std::map<std::string_view, ElementType> types = {
      {"float", {4, "fp32"}},
      {"Float", {4, "fp32"}},
      {"double", {8, "fp64"}},
      {"Double", {8, "fp64"}},
      {"c10::Half", {2, "fp16"}},
      {"Half", {2, "fp16"}},
      {"c10::BFloat16", {2, "bf16"}},
      {"BFloat16", {2, "bf16"}},
      {"c10::Float8_e4m3fn", {1, "fp8"}},
      {"c10::Float8_e5m2", {1, "fp8"}},
      {"Float8_e4m3fn", {1, "fp8"}},
      {"Float8_e5m2", {1, "fp8"}},
      {"long int", {8, "int64"}},
      {"Long", {8, "int64"}},
      {"int", {4, "int32"}},
      {"Int", {4, "int32"}},
      {"unsigned char", {1, "uint8"}},
      {"Byte", {1, "uint8"}},
      {"signed char", {1, "int8"}},
      {"Char", {1, "int8"}},
      {"bool", {1, "bool"}},
      {"Bool", {1, "bool"}},
  };
  const auto it = types.find(t);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

std::optional<ComputeCount> count_compute(std::string_view name, pb::OpClass op_class,
                                          const json& args, std::string& why) {
  if (!args.contains("Input Dims")) {
    why = "no Input Dims (profile with record_shapes=True)";
    return std::nullopt;
  }
  const std::string type = input_type(args, 0);
  const auto element = element_type(type);
  if (!element) {
    why = type.empty() ? "no Input type (profile with record_shapes=True)"
                       : "element type '" + type + "' unknown";
    return std::nullopt;
  }
  std::optional<ComputeCount> c;
  switch (op_class) {
    case pb::OP_CLASS_GEMM:
      c = count_gemm(name, args, element->bytes, why);
      break;
    case pb::OP_CLASS_ATTENTION:
      c = count_attention(name, args, element->bytes, why);
      break;
    default:
      c = count_memory_bound(name, op_class, args, element->bytes, why);
      break;
  }
  if (c) c->dtype = element->dtype;
  return c;
}

}  // namespace orrery::detail
