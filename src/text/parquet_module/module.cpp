// libdrope_parquet.so: the text column of a parquet file, one row group at a time, through Apache
// Arrow's parquet::arrow::FileReader. Compiled as C++20 (Arrow's headers need it); only bridge.h's C
// interface leaves this file.
#include "bridge.h"

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <arrow/api.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/properties.h>

struct drope_pq {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  int leaf = -1;  // the text column's leaf (parquet column) index
  int64_t row_groups = 0, rows = 0;
};

namespace {

void report(drope_pq_bytes_fn err, void* ctx, const std::string& msg) { err(ctx, msg.data(), msg.size()); }

bool is_string_type(const arrow::DataType& t) {
  switch (t.id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW: return true;
    case arrow::Type::DICTIONARY: return is_string_type(*static_cast<const arrow::DictionaryType&>(t).value_type());
    default: return false;
  }
}

// Value i of a string / large_string / string_view array (not null).
std::string_view view_of(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case arrow::Type::STRING: return static_cast<const arrow::StringArray&>(a).GetView(i);
    case arrow::Type::LARGE_STRING: return static_cast<const arrow::LargeStringArray&>(a).GetView(i);
    case arrow::Type::STRING_VIEW: return static_cast<const arrow::StringViewArray&>(a).GetView(i);
    default: throw std::runtime_error("the column's data is " + a.type()->ToString() + ", not strings");
  }
}

// Calls fn for each row of one chunk (row numbers continue across chunks); false when fn asked to stop.
bool each_row(const arrow::Array& a, int64_t& row, drope_pq_row_fn fn, void* ctx) {
  const bool dictionary = a.type_id() == arrow::Type::DICTIONARY;
  const auto* d = dictionary ? static_cast<const arrow::DictionaryArray*>(&a) : nullptr;
  for (int64_t i = 0; i < a.length(); ++i) {
    const arrow::Array& values = dictionary ? *d->dictionary() : a;
    const int64_t k = a.IsNull(i) ? -1 : dictionary ? d->GetValueIndex(i) : i;
    const bool null = k < 0 || values.IsNull(k);
    const std::string_view v = null ? std::string_view() : view_of(values, k);
    if (fn(ctx, row++, v.data(), v.size(), null ? 1 : 0) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int drope_pq_open(const char* path, const char* column, drope_pq** out,
                                                         drope_pq_bytes_fn err, void* ctx) {
  try {
    auto f = std::make_unique<drope_pq>();
    parquet::ReaderProperties props = parquet::default_reader_properties();
    props.set_page_checksum_verification(true);
    parquet::arrow::FileReaderBuilder builder;
    auto st = builder.OpenFile(path, /*memory_map=*/false, props);
    if (!st.ok()) return report(err, ctx, "not a readable parquet file (" + st.message() + ")"), 1;
    auto built = builder.Build();
    if (!built.ok()) return report(err, ctx, "not a readable parquet file (" + built.status().message() + ")"), 1;
    f->reader = std::move(*built);
    std::shared_ptr<arrow::Schema> schema;
    st = f->reader->GetSchema(&schema);
    if (!st.ok()) return report(err, ctx, "cannot read the schema (" + st.message() + ")"), 1;
    const int idx = schema->GetFieldIndex(column);
    if (idx < 0) {
      std::string names;
      for (const auto& fld : schema->fields()) names += (names.empty() ? "" : ", ") + fld->name();
      const bool dup = !schema->GetAllFieldIndices(column).empty();
      return report(err, ctx,
                    std::string(dup ? "more than one column named \"" : "no column \"") + column +
                        "\" (columns: " + (names.empty() ? "none" : names) + ")"),
             1;
    }
    const auto& field = *schema->field(idx);
    const auto& sf = f->reader->manifest().schema_fields[static_cast<size_t>(idx)];
    if (!is_string_type(*field.type()) || !sf.is_leaf())
      return report(err, ctx,
                    std::string("column \"") + column + "\" holds " + field.type()->ToString() +
                        ", expected strings (string, large_string or string_view)"),
             1;
    f->leaf = sf.column_index;
    f->row_groups = f->reader->num_row_groups();
    f->rows = f->reader->parquet_reader()->metadata()->num_rows();
    *out = f.release();
    return 0;
  } catch (const std::exception& e) {
    return report(err, ctx, std::string("not a readable parquet file (") + e.what() + ")"), 1;
  }
}

__attribute__((visibility("default"))) void drope_pq_free(drope_pq* f) { delete f; }

__attribute__((visibility("default"))) void drope_pq_info(const drope_pq* f, int64_t* row_groups, int64_t* rows) {
  *row_groups = f->row_groups;
  *rows = f->rows;
}

__attribute__((visibility("default"))) int drope_pq_read_row_group(drope_pq* f, int64_t group, drope_pq_row_fn fn,
                                                                   void* fn_ctx, drope_pq_bytes_fn err, void* ctx) {
  try {
    auto table = f->reader->ReadRowGroup(static_cast<int>(group), {f->leaf});
    if (!table.ok()) return report(err, ctx, table.status().message()), 1;
    int64_t row = 0;
    for (const auto& chunk : (*table)->column(0)->chunks())
      if (!each_row(*chunk, row, fn, fn_ctx)) return 2;
    return 0;
  } catch (const std::exception& e) {
    return report(err, ctx, e.what()), 1;
  }
}

}  // extern "C"
