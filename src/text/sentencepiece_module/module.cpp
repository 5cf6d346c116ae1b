// libdrope_sentencepiece.so: libsentencepiece behind the C interface of bridge.h. Nothing thrown or
// allocated here crosses the interface.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "bridge.h"

#define DROPE_SPM_EXPORT __attribute__((visibility("default")))

struct drope_spm {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

void report(drope_spm_bytes_fn err, void* ctx, const std::string& msg) { err(ctx, msg.data(), msg.size()); }

// Runs `body`, turning a failed status or any exception into an error report.
template <typename F>
int guarded(drope_spm_bytes_fn err, void* ctx, F&& body) {
  try {
    const sentencepiece::util::Status st = body();
    if (st.ok()) return 0;
    report(err, ctx, st.ToString());
  } catch (const std::bad_alloc&) {
    report(err, ctx, "out of memory");
  } catch (const std::exception& e) {
    report(err, ctx, e.what());
  } catch (...) {
    report(err, ctx, "unknown exception");
  }
  return 1;
}

// Training lines, handed to the trainer one at a time.
class Lines final : public sentencepiece::SentenceIterator {
 public:
  Lines(const char* const* lines, const size_t* sizes, size_t n) : lines_(lines), sizes_(sizes), n_(n) { load(); }
  bool done() const override { return i_ >= n_; }
  void Next() override {
    ++i_;
    load();
  }
  const std::string& value() const override { return cur_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (i_ < n_) cur_.assign(lines_[i_], sizes_[i_]);
  }
  const char* const* lines_;
  const size_t* sizes_;
  size_t n_;
  size_t i_ = 0;
  std::string cur_;
};

}  // namespace

extern "C" {

DROPE_SPM_EXPORT int drope_spm_load(const char* proto, size_t size, drope_spm** out, drope_spm_bytes_fn err,
                                    void* ctx) {
  *out = nullptr;
  drope_spm* m = nullptr;
  const int rc = guarded(err, ctx, [&] {
    m = new drope_spm;
    return m->sp.LoadFromSerializedProto(absl::string_view(proto, size));
  });
  if (rc != 0) {
    delete m;
    return rc;
  }
  *out = m;
  return 0;
}

DROPE_SPM_EXPORT void drope_spm_free(drope_spm* m) { delete m; }

DROPE_SPM_EXPORT void drope_spm_info(const drope_spm* m, int32_t* pieces, int32_t* bos, int32_t* eos) {
  *pieces = m->sp.GetPieceSize();
  *bos = m->sp.bos_id();
  *eos = m->sp.eos_id();
}

DROPE_SPM_EXPORT int drope_spm_encode(const drope_spm* m, const char* text, size_t size, drope_spm_ids_fn ids,
                                      void* ids_ctx, drope_spm_bytes_fn err, void* ctx) {
  return guarded(err, ctx, [&] {
    std::vector<int> v;
    auto st = m->sp.Encode(absl::string_view(text, size), &v);
    if (st.ok()) {
      const std::vector<int32_t> out(v.begin(), v.end());
      ids(ids_ctx, out.data(), out.size());
    }
    return st;
  });
}

DROPE_SPM_EXPORT int drope_spm_decode(const drope_spm* m, const int32_t* ids, size_t n, drope_spm_bytes_fn text,
                                      void* text_ctx, drope_spm_bytes_fn err, void* ctx) {
  return guarded(err, ctx, [&] {
    const std::vector<int> v(ids, ids + n);
    std::string out;
    auto st = m->sp.Decode(v, &out);
    if (st.ok()) text(text_ctx, out.data(), out.size());
    return st;
  });
}

DROPE_SPM_EXPORT int drope_spm_train(const char* const* keys, const char* const* values, size_t n_kwargs,
                                     const char* const* lines, const size_t* sizes, size_t n, drope_spm_bytes_fn proto,
                                     void* proto_ctx, drope_spm_bytes_fn err, void* ctx) {
  return guarded(err, ctx, [&] {
    std::unordered_map<std::string, std::string> kwargs;
    for (size_t i = 0; i < n_kwargs; ++i) kwargs[keys[i]] = values[i];
    Lines it(lines, sizes, n);
    std::string out;
    auto st = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &out);
    if (st.ok()) proto(proto_ctx, out.data(), out.size());
    return st;
  });
}

}  // extern "C"
