// What `drope-model info` and `drope-model gguf` print: a model's shape, layer plan and parameter count; a GGUF
// file's metadata and tensor table.
#pragma once

#include <string>

#include "drope/formats/gguf.h"
#include "drope/model/transformer.h"

namespace drope::io {

// Four lines: architecture and sizes; positional encoding, scaling, QK-norm, temperature and context; the
// layer plan; the parameter count.
std::string model_info(DecoderLM& m);

// One line naming a GGUF file read for conversion: version, tensor count and the tensors per quantisation type.
std::string gguf_read_summary(const std::string& path, const gguf::Header& h);

// Prints a GGUF file's metadata and tensor table on stdout; with `dequantize_out`, also writes every tensor
// dequantised to float32 (GGUF names, row-major shapes) to that safetensors file, refusing it when it is the
// input (check_output_paths, flag --dequantize).
void print_gguf_info(const std::string& path, const std::string& dequantize_out);

}  // namespace drope::io
