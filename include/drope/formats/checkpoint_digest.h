// Checkpoint integrity, without LibTorch: the digests state.json records for every file beside it (CRC-32C
// per tensor of a safetensors file, of the whole content of any other file) and the run identity that
// safetensors files carry in their metadata, computed at save and compared on load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "drope/formats/checkpoint_state.h"

namespace drope::train {

// CRC-32C of `n` bytes continuing `crc`, equal to drope::crc32c; with the SSE4.2 instruction where the CPU has
// it (docs/formats.md gives the speed).
uint32_t fast_crc32c(const void* data, size_t n, uint32_t crc = 0);

// The metadata keys of a checkpoint's safetensors files that name the run and step they were written for.
constexpr const char* kRunMetadataKey = "drope.run";
constexpr const char* kStepMetadataKey = "drope.step";
std::map<std::string, std::string> identity_metadata(const TrainState& st);

// The digest of the file `dir`/`name`: per tensor (bytes, dtype, shape) for *.safetensors, else of the content.
FileDigest digest_file(const std::string& dir, const std::string& name);
// The digests of every regular file in `dir` but state.json.
std::map<std::string, FileDigest> digest_directory(const std::string& dir);

// Whether `name` is one of the files a model loader reads (drope.yaml, config.json, model*.safetensors and
// its index), as opposed to the training state beside them (optimizer files, run.yaml).
bool is_model_file(const std::string& name);
// Whether a loader reads `name` from a checkpoint: the model files, run.yaml, the optimizer state (whole or pieces).
bool is_checkpoint_file(const std::string& name);

// What loading checkpoint `dir` (its state `st`) finds wrong with its integrity, one line each naming the file
// and the tensor: state.json's own digest, the run identity in the safetensors files' metadata, the recorded
// files that are missing, the tensors and files whose content differs from their digests, and the files a
// loader would read (model files, run.yaml, optimizer files) that are not recorded. Only the files that `select`
// accepts are read or listed.
std::vector<std::string> check_checkpoint_integrity(const std::string& dir, const TrainState& st,
                                                    bool (*select)(const std::string& name));

// Reports the outcome of check_checkpoint_integrity: fails with the first problem, or with `allow_foreign`
// (weights grafted on purpose) warns once per problem and returns. A checkpoint of an older build (no
// digests) gets one warning that its files are not verified.
void enforce_checkpoint_integrity(const std::string& dir, const TrainState& st,
                                  const std::vector<std::string>& problems, bool allow_foreign);

}  // namespace drope::train
