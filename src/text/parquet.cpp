// Parquet input through libdrope_parquet.so (loaded on first use).
#include "drope/text/parquet.h"

#include <exception>
#include <memory>
#include <mutex>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "module_loader.h"
#include "parquet_module/bridge.h"

namespace drope::text {

namespace {

#ifdef DROPE_PARQUET_MODULE
// The module's functions, loaded on first use.
const drope_pq_api& pq() {
  static std::mutex mu;
  static std::unique_ptr<drope_pq_api> api;
  std::lock_guard<std::mutex> lock(mu);
  if (!api) {
    constexpr const char* kFile = "libdrope_parquet.so";
    void* h = detail::open_module(kFile, DROPE_PARQUET_MODULE, "parquet support, Apache Arrow from the pyarrow wheel");
    drope_pq_api a{};
    detail::resolve(h, a.open, "drope_pq_open", kFile);
    detail::resolve(h, a.free, "drope_pq_free", kFile);
    detail::resolve(h, a.info, "drope_pq_info", kFile);
    detail::resolve(h, a.read_row_group, "drope_pq_read_row_group", kFile);
    api = std::make_unique<drope_pq_api>(a);
  }
  return *api;
}

void append_bytes(void* ctx, const char* data, size_t size) { static_cast<std::string*>(ctx)->append(data, size); }

// What the row callback needs: the user's function, and the exception it threw (rethrown after the module
// has returned, so no exception crosses the C interface).
struct RowContext {
  const ParquetRowFn* fn;
  int64_t group;
  std::exception_ptr error;
};

int on_row(void* ctx, int64_t row, const char* data, size_t size, int is_null) {
  auto* c = static_cast<RowContext*>(ctx);
  try {
    const std::string_view text(data ? data : "", size);
    (*c->fn)(c->group, row, is_null ? nullptr : &text);
    return 0;
  } catch (...) {
    c->error = std::current_exception();
    return 1;
  }
}
#endif

}  // namespace

bool parquet_supported() {
#ifdef DROPE_PARQUET_MODULE
  return true;
#else
  return false;
#endif
}

void for_each_parquet_text(const std::string& path, const std::string& column, const ParquetRowFn& fn) {
  {
    const InputFile check(path);
  }  // a regular file (a FIFO or device is refused, not waited on)
#ifdef DROPE_PARQUET_MODULE
  const auto& api = pq();
  std::string err;
  drope_pq* f = nullptr;
  if (api.open(path.c_str(), column.c_str(), &f, append_bytes, &err) != 0) fail("{}: {}", path, err);
  std::unique_ptr<drope_pq, void (*)(drope_pq*)> file(f, api.free);
  int64_t groups = 0, rows = 0;
  api.info(f, &groups, &rows);
  for (int64_t g = 0; g < groups; ++g) {
    RowContext ctx{&fn, g, nullptr};
    const int rc = api.read_row_group(f, g, on_row, &ctx, append_bytes, &err);
    if (ctx.error) std::rethrow_exception(ctx.error);
    if (rc != 0) fail("{}: row group {}: {}", path, g, err);
  }
#else
  (void)column;
  (void)fn;
  fail("{}: this build of drope cannot read parquet: Apache Arrow comes from the pyarrow wheel, which was not "
       "found when configuring (pip install -r requirements.txt into the project venv, then re-run cmake)",
       path);
#endif
}

}  // namespace drope::text
