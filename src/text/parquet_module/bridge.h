// The C interface of libdrope_parquet.so, the one place that uses Apache Arrow / Parquet C++ (the
// libraries and headers of the PyPI `pyarrow` wheel; Debian bookworm has no libarrow-dev).
//
// Why a separate module: Arrow's headers need C++20 while the project is C++17, so they stay in one
// translation unit (module.cpp, compiled as C++20) behind this header of plain C types; the build works
// without pyarrow (the module is simply not built and reading parquet fails with a message saying so);
// and dlopen()ing it with RTLD_LOCAL | RTLD_DEEPBIND keeps libarrow's many exported symbols out of the
// global scope of processes that also load LibTorch (see sentencepiece_module/bridge.h). Memory is never
// freed on the other side: results are handed to callbacks.
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

// An open parquet file and the text column chosen (opaque).
struct drope_pq;

// Receives an error message.
typedef void (*drope_pq_bytes_fn)(void* ctx, const char* data, size_t size);
// Receives row `row` (0-based within its row group) of the text column: its bytes, or is_null = 1.
// Returns 0 to go on, non-zero to stop reading.
typedef int (*drope_pq_row_fn)(void* ctx, int64_t row, const char* data, size_t size, int is_null);

// Opens `path` and selects the top-level column `column`, which must hold strings (string, large_string,
// string_view, or a dictionary of them). 0 on success; else non-zero after passing the message to `err`.
int drope_pq_open(const char* path, const char* column, drope_pq** out, drope_pq_bytes_fn err, void* ctx);
void drope_pq_free(drope_pq* f);
// Row groups and rows of the file.
void drope_pq_info(const drope_pq* f, int64_t* row_groups, int64_t* rows);
// Reads row group `group` (only the text column; page checksums verified when the file has them) and
// calls `fn` for each of its rows in order. 0: done; 1: error (message to `err`); 2: stopped by `fn`.
int drope_pq_read_row_group(drope_pq* f, int64_t group, drope_pq_row_fn fn, void* fn_ctx, drope_pq_bytes_fn err,
                            void* ctx);

// The function table the loader fills with dlsym().
struct drope_pq_api {
  decltype(&drope_pq_open) open;
  decltype(&drope_pq_free) free;
  decltype(&drope_pq_info) info;
  decltype(&drope_pq_read_row_group) read_row_group;
};
}
