// The text column of a parquet file, streamed one row group at a time through Apache Arrow C++ (the
// pyarrow wheel's libraries, in the dlopen()ed module libdrope_parquet.so; see
// src/text/parquet_module/bridge.h). Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace drope::text {

// Whether this build has parquet support (pyarrow was found when configuring).
bool parquet_supported();

// Called for each row of the column: its row group, its row within the group (both 0-based) and its text,
// or nullptr for a null value.
using ParquetRowFn = std::function<void(int64_t row_group, int64_t row, const std::string_view* text)>;

// Reads column `column` of the parquet file `path` (a top-level string column) one row group at a time,
// in file order, and calls fn for every row. Fails naming the file (and the row group) on a file that is
// not parquet, a missing or non-string column, or corrupt data; fails saying how to get parquet support
// when this build has none. Exceptions thrown by fn propagate unchanged.
void for_each_parquet_text(const std::string& path, const std::string& column, const ParquetRowFn& fn);

}  // namespace drope::text
