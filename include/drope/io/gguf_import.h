// Models held as GGUF files (llama.cpp / Ollama): the llama and qwen2 architectures read into our config
// and HF-named float32 weights. A `*.gguf` path works wherever a model directory does (model_io.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "drope/formats/gguf.h"
#include "drope/formats/hf_config.h"

namespace drope::io {

// The HF config.json that the file's `<arch>.*` metadata describes (model_type llama or qwen2): sizes,
// heads, RoPE base and scaling, norm epsilon, context length, tied head when output.weight is absent.
std::string gguf_hf_config_json(const gguf::File& f);
// The same, parsed into our config (errors name the file and metadata key).
HfImport import_gguf_config(const gguf::File& f);

// The HF name and row-major shape of every tensor the model needs, with the GGUF tensor it comes from;
// checked against `cfg` before anything is allocated (a missing, extra or misshapen tensor fails naming it).
struct GgufTensorMap {
  std::string hf_name;
  const gguf::TensorInfo* info = nullptr;
  std::vector<int64_t> shape;
  int64_t permute_heads = 0;  // > 0: llama.cpp's rotary row permutation over this many heads is undone
};
std::vector<GgufTensorMap> map_gguf_tensors(const gguf::File& f, const ModelConfig& cfg);

// One tensor dequantised to float32 in HF layout (rows un-permuted for llama's q/k projections). Fails,
// naming the tensor, when a value is not finite.
at::Tensor read_gguf_tensor(const gguf::File& f, const GgufTensorMap& m);

}  // namespace drope::io
