#include "drope/io/model_info.h"

#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drope/core/files.h"
#include "drope/io/safetensors.h"

namespace drope::io {

namespace {

const char* kind_name(PositionalKind k) {
  switch (k) {
    case PositionalKind::kRope: return "rope";
    case PositionalKind::kNope: return "nope";
    case PositionalKind::kAlibi: return "alibi";
  }
  return "?";
}

}  // namespace

std::string model_info(DecoderLM& m) {
  const auto& c = m->config();
  std::string out =
      fmt::format("arch {}  vocab {}  hidden {}  mlp {}  layers {}  heads {}/{} (kv)  head_dim {}  tied {}\n", c.arch,
                  c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
                  c.resolved_head_dim(), c.tie_embeddings);
  out += fmt::format("positional {}  theta {}  scaling {} (x{})  qk_norm {}  temperature c={}  context {}{}\n",
                     c.positional.type, c.positional.rope_theta, c.positional.scaling.type, c.positional.scaling.factor,
                     c.qk_norm, c.softmax_temperature, c.max_position,
                     c.softmax_scale > 0 ? fmt::format("  softmax_scale {}", c.softmax_scale) : "");
  std::string plan;
  for (const auto& l : c.layer_plan())
    plan += fmt::format("{}{} ", kind_name(l.kind), l.window ? fmt::format("/w{}", l.window) : "");
  out += fmt::format("layers: {}\n", plan);
  out += fmt::format("parameters: {} ({:.2f}M)\n", m->num_parameters(), m->num_parameters() / 1e6);
  return out;
}

std::string gguf_read_summary(const std::string& path, const gguf::Header& h) {
  std::map<std::string, int> types;
  for (const auto& t : h.tensors) ++types[gguf::type_traits(t.type)->name];
  std::string counts;
  for (const auto& [name, n] : types) counts += fmt::format(" {}x{}", name, n);
  return fmt::format("read {}: GGUF v{}, {} tensors ({}), dequantised to float32\n", path, h.version, h.tensors.size(),
                     counts.empty() ? "none" : counts.substr(1));
}

void print_gguf_info(const std::string& path, const std::string& out) {
  if (!out.empty()) check_output_paths("--dequantize", out, {out}, {{"--file", path}});
  const gguf::File f(path);
  const auto& h = f.header();
  fmt::print("GGUF v{}  {} metadata keys  {} tensors  alignment {}\n", h.version, h.meta.size(), h.tensors.size(),
             h.alignment);
  for (const auto& [key, v] : h.meta) {
    std::string shown = v.type == gguf::ValueType::kArray
                            ? fmt::format("[{} x {}]", v.value.size(), gguf::value_type_name(v.elem_type))
                            : v.value.dump();
    if (shown.size() > 100) shown = shown.substr(0, 97) + "...";
    fmt::print("  {} = {}\n", key, shown);
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& t : h.tensors) {
    fmt::print("  {:<40} {:<10} {}\n", t.name, gguf::type_traits(t.type)->name, c10::str(at::IntArrayRef(t.shape())));
    if (out.empty()) continue;
    at::Tensor x = at::empty(t.shape(), at::kFloat);
    f.read_float(t, x.data_ptr<float>());
    tensors.emplace_back(t.name, x);
  }
  if (!out.empty()) {
    save_safetensors(out, tensors);
    fmt::print("wrote {} tensors as float32 to {}\n", tensors.size(), out);
  }
}

}  // namespace drope::io
