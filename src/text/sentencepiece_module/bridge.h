// The C interface of libdrope_sentencepiece.so, the one place that links libsentencepiece.
//
// Why a separate module: libsentencepiece (Debian) and libc10 (the torch wheel) both export global
// gflags-style variables (FLAGS_minloglevel, 4 bytes in c10, a 32-byte flag object in sentencepiece).
// Linked into one executable, the dynamic linker binds both libraries' references to whichever copy it
// finds first, and the other library's initialiser then writes over foreign memory. The module is
// dlopen()ed with RTLD_LOCAL | RTLD_DEEPBIND: its symbols and libsentencepiece's never enter the global
// scope (so libc10 keeps its own), and libsentencepiece resolves its own symbols before the global ones
// (so it keeps its own). Only plain C types cross this interface; memory is never freed on the other
// side (results are handed to callbacks), so the two sides may even use different allocators.
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

// A loaded model (opaque).
struct drope_spm;

// Receives a message (error text or output bytes) or token ids; called zero or more times.
typedef void (*drope_spm_bytes_fn)(void* ctx, const char* data, size_t size);
typedef void (*drope_spm_ids_fn)(void* ctx, const int32_t* ids, size_t n);

// Every function returns 0 on success; on failure non-zero, after passing the error text to `err`.
int drope_spm_load(const char* proto, size_t size, drope_spm** out, drope_spm_bytes_fn err, void* ctx);
void drope_spm_free(drope_spm* m);
// Vocabulary size, BOS and EOS ids (-1 when absent).
void drope_spm_info(const drope_spm* m, int32_t* pieces, int32_t* bos, int32_t* eos);
int drope_spm_encode(const drope_spm* m, const char* text, size_t size, drope_spm_ids_fn ids, void* ids_ctx,
                     drope_spm_bytes_fn err, void* ctx);
int drope_spm_decode(const drope_spm* m, const int32_t* ids, size_t n, drope_spm_bytes_fn text, void* text_ctx,
                     drope_spm_bytes_fn err, void* ctx);
// Trains on `lines` (n strings of the given sizes) with `n_kwargs` key/value pairs (keys[i] = values[i]);
// the serialized model goes to `proto`.
int drope_spm_train(const char* const* keys, const char* const* values, size_t n_kwargs, const char* const* lines,
                    const size_t* sizes, size_t n, drope_spm_bytes_fn proto, void* proto_ctx, drope_spm_bytes_fn err,
                    void* ctx);

// The function table the loader fills with dlsym().
struct drope_spm_api {
  decltype(&drope_spm_load) load;
  decltype(&drope_spm_free) free;
  decltype(&drope_spm_info) info;
  decltype(&drope_spm_encode) encode;
  decltype(&drope_spm_decode) decode;
  decltype(&drope_spm_train) train;
};
}
