// Token shards (write, validate, mmap), the dataset index, and the block loader.
#include "drope/text/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are little-endian and read in place");

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace drope::text {

namespace {

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

template <typename T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

const char* dtype_name(int token_bytes) { return token_bytes == 2 ? "uint16" : "uint32"; }

// Mixes 64 bits (splitmix64's finaliser).
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Reads index values with errors naming the file and the key.
struct IndexIn {
  const std::string& file;
  [[noreturn]] void bad(const std::string& key, const std::string& what) const { fail("{}: {}: {}", file, key, what); }
  const json& req(const json& o, const std::string& where, const char* key) const {
    if (!o.is_object()) bad(where, "expected an object");
    auto it = o.find(key);
    if (it == o.end()) bad(where.empty() ? key : where + "." + key, "missing");
    return *it;
  }
  int64_t integer(const json& o, const std::string& where, const char* key, int64_t lo, int64_t hi) const {
    const json& v = req(o, where, key);
    const std::string k = where.empty() ? key : where + "." + key;
    const int64_t x = json_int64(v, fmt::format("{}: {}", file, k));
    if (x < lo || x > hi) bad(k, fmt::format("{} is outside [{}, {}]", x, lo, hi));
    return x;
  }
  std::string str(const json& o, const std::string& where, const char* key) const {
    const json& v = req(o, where, key);
    if (!v.is_string())
      bad(where.empty() ? key : where + "." + key, fmt::format("expected a string, got {}", v.type_name()));
    return v.get<std::string>();
  }
};

// A relative path that stays inside the dataset directory.
bool safe_relative(const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return false;
  for (const auto& part : fs::path(p))
    if (part == "..") return false;
  return true;
}

constexpr int64_t kMaxTokens = int64_t{1} << 50;

}  // namespace

int token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// ---------------------------------------------------------------------------------------------------
// index.json

json index_to_json(const DatasetIndex& index) {
  json splits = json::object();
  for (const auto& [name, s] : index.splits) {
    json shards = json::array();
    for (const auto& sh : s.shards) shards.push_back({{"file", sh.file}, {"tokens", sh.tokens}});
    splits[name] = {{"shards", shards}, {"tokens", s.tokens}, {"documents", s.documents}};
  }
  const auto& t = index.tokenizer;
  return {
      {"format", "drope-tokens"},
      {"version", kShardVersion},
      {"dtype", dtype_name(index.token_bytes)},
      {"tokenizer",
       {{"file", t.file}, {"kind", t.kind}, {"vocab_size", t.vocab_size}, {"eos_id", t.eos_id}, {"bos_id", t.bos_id}}},
      {"splits", splits},
      {"meta", index.meta}};
}

DatasetIndex read_index(const std::string& index_path) {
  const json j = read_json_file(index_path, kMaxConfigBytes);
  IndexIn in{index_path};
  if (!j.is_object()) in.bad("(top level)", "expected an object");
  if (in.str(j, "", "format") != "drope-tokens") in.bad("format", "expected \"drope-tokens\"");
  const int64_t version = in.integer(j, "", "version", 0, 1 << 20);
  if (version != kShardVersion)
    in.bad("version", fmt::format("unsupported version {} (this build reads {})", version, kShardVersion));
  DatasetIndex idx;
  const std::string dtype = in.str(j, "", "dtype");
  if (dtype == "uint16") idx.token_bytes = 2;
  else if (dtype == "uint32") idx.token_bytes = 4;
  else in.bad("dtype", fmt::format("expected uint16 or uint32, got \"{}\"", dtype));

  const json& t = in.req(j, "", "tokenizer");
  idx.tokenizer.file = in.str(t, "tokenizer", "file");
  if (!safe_relative(idx.tokenizer.file)) in.bad("tokenizer.file", "expected a path relative to the dataset directory");
  idx.tokenizer.kind = in.str(t, "tokenizer", "kind");
  idx.tokenizer.vocab_size = in.integer(t, "tokenizer", "vocab_size", 1, int64_t{1} << 31);
  idx.tokenizer.eos_id = static_cast<int32_t>(in.integer(t, "tokenizer", "eos_id", -1, idx.tokenizer.vocab_size - 1));
  idx.tokenizer.bos_id = static_cast<int32_t>(in.integer(t, "tokenizer", "bos_id", -1, idx.tokenizer.vocab_size - 1));
  if (idx.tokenizer.vocab_size > 65536 && idx.token_bytes == 2)
    in.bad("dtype", fmt::format("uint16 cannot hold a vocabulary of {}", idx.tokenizer.vocab_size));

  const json& splits = in.req(j, "", "splits");
  if (!splits.is_object()) in.bad("splits", "expected an object");
  for (auto it = splits.begin(); it != splits.end(); ++it) {
    const std::string where = "splits." + it.key();
    SplitInfo s;
    const json& shards = in.req(it.value(), where, "shards");
    if (!shards.is_array()) in.bad(where + ".shards", "expected a list");
    int64_t sum = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string w = fmt::format("{}.shards[{}]", where, i);
      ShardInfo sh;
      sh.file = in.str(shards[i], w, "file");
      if (!safe_relative(sh.file)) in.bad(w + ".file", "expected a path relative to the dataset directory");
      sh.tokens = in.integer(shards[i], w, "tokens", 0, kMaxTokens);
      sum += sh.tokens;
      s.shards.push_back(std::move(sh));
    }
    s.tokens = in.integer(it.value(), where, "tokens", 0, kMaxTokens);
    if (s.tokens != sum)
      in.bad(where + ".tokens", fmt::format("{} does not match the sum over its shards ({})", s.tokens, sum));
    s.documents = in.integer(it.value(), where, "documents", 0, kMaxTokens);
    idx.splits[it.key()] = std::move(s);
  }
  if (auto m = j.find("meta"); m != j.end()) idx.meta = *m;
  return idx;
}

// ---------------------------------------------------------------------------------------------------
// ShardWriter

ShardWriter::ShardWriter(std::string dir, std::string prefix, int token_bytes, int32_t eos_id, int64_t max_tokens)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      token_bytes_(token_bytes),
      eos_id_(eos_id),
      max_tokens_(max_tokens) {
  if (token_bytes_ != 2 && token_bytes_ != 4) fail("shard token bytes must be 2 or 4, got {}", token_bytes_);
  if (max_tokens_ < 1) fail("shard size must be at least one token, got {}", max_tokens_);
}

void ShardWriter::add_document(const std::vector<int32_t>& ids) {
  const uint64_t limit = token_bytes_ == 2 ? 0xFFFFu : 0xFFFFFFFFu;
  auto push = [&](int32_t id) {
    if (id < 0 || static_cast<uint64_t>(id) > limit)
      fail("token id {} does not fit in {}", id, dtype_name(token_bytes_));
    if (token_bytes_ == 2) put(buffer_, static_cast<uint16_t>(id));
    else put(buffer_, static_cast<uint32_t>(id));
    ++tokens_;
    if (++buffered_ == max_tokens_) flush();
  };
  for (int32_t id : ids) push(id);
  if (eos_id_ >= 0) push(eos_id_);
  ++documents_;
}

void ShardWriter::flush() {
  if (buffered_ == 0) return;
  std::string file;
  file.reserve(kShardHeaderBytes + buffer_.size());
  file.append(kShardMagic, sizeof kShardMagic);
  put(file, kShardVersion);
  put(file, static_cast<uint32_t>(kShardHeaderBytes));
  put(file, static_cast<uint32_t>(token_bytes_));
  put(file, eos_id_);
  put(file, static_cast<uint64_t>(buffered_));
  file += buffer_;
  const std::string name = fmt::format("{}_{:05d}.bin", prefix_, written_.size());
  write_file_atomic((fs::path(dir_) / name).string(), file);
  written_.push_back({name, buffered_});
  buffer_.clear();
  buffered_ = 0;
}

std::vector<ShardInfo> ShardWriter::finish() {
  flush();
  return written_;
}

// ---------------------------------------------------------------------------------------------------
// TokenShard

TokenShard::TokenShard(const std::string& path) : path_(path) {
  const InputFile file(path);  // regular files only: a FIFO is refused, not waited on
  const int fd = file.fd();
  const auto file_bytes = file.size();
  if (file_bytes < kShardHeaderBytes)
    fail("{}: truncated shard: {} bytes, smaller than the {}-byte header", path, file_bytes, kShardHeaderBytes);
  unsigned char h[kShardHeaderBytes];
  if (::pread(fd, h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) fail("{}: cannot read the shard header", path);
  if (std::memcmp(h, kShardMagic, sizeof kShardMagic) != 0)
    fail("{}: not a drope token shard (bad magic; expected \"DRPTOK01\")", path);
  const auto version = get<uint32_t>(h + 8);
  if (version != kShardVersion)
    fail("{}: unsupported shard version {} (this build reads {})", path, version, kShardVersion);
  const auto header = get<uint32_t>(h + 12);
  if (header != kShardHeaderBytes) fail("{}: header size {} is not {}", path, header, kShardHeaderBytes);
  const auto tb = get<uint32_t>(h + 16);
  if (tb != 2 && tb != 4) fail("{}: unsupported token size {} bytes (expected 2 = uint16 or 4 = uint32)", path, tb);
  eos_id_ = get<int32_t>(h + 20);
  if (eos_id_ < -1) fail("{}: invalid EOS id {}", path, eos_id_);
  const auto count = get<uint64_t>(h + 24);
  const uint64_t data_bytes = file_bytes - kShardHeaderBytes;
  if (count > data_bytes / tb)
    fail("{}: truncated shard: header claims {} tokens ({} bytes) but the file holds {} bytes of tokens", path, count,
         count > std::numeric_limits<uint64_t>::max() / tb ? std::string("more than 2^64") : std::to_string(count * tb),
         data_bytes);
  if (count * tb != data_bytes)
    fail("{}: {} trailing bytes after the {} tokens the header claims", path, data_bytes - count * tb, count);
  token_bytes_ = static_cast<int>(tb);
  count_ = static_cast<int64_t>(count);
  map_bytes_ = static_cast<size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("{}: mmap failed ({})", path, std::strerror(errno));
  }
  data_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
  watch_mapping(map_, map_bytes_, path);
}

TokenShard::~TokenShard() {
  if (!map_) return;
  unwatch_mapping(map_);
  ::munmap(map_, map_bytes_);
}

uint32_t TokenShard::operator[](int64_t i) const {
  return token_bytes_ == 2 ? get<uint16_t>(data_ + 2 * i) : get<uint32_t>(data_ + 4 * i);
}

// ---------------------------------------------------------------------------------------------------
// TokenStream

std::shared_ptr<TokenStream> TokenStream::from_shards(const std::vector<std::string>& paths, int64_t vocab_size) {
  auto s = std::make_shared<TokenStream>();
  s->vocab_size_ = vocab_size;
  s->name_ = paths.empty() ? std::string("(no shards)") : paths.front();
  for (const auto& p : paths) {
    s->shards_.push_back(std::make_unique<TokenShard>(p));
    s->starts_.push_back(s->total_);
    s->total_ += s->shards_.back()->size();
  }
  return s;
}

std::shared_ptr<TokenStream> TokenStream::open(const std::string& dataset, const std::string& split) {
  std::error_code ec;
  const fs::path index_path = fs::is_directory(dataset, ec) ? fs::path(dataset) / "index.json" : fs::path(dataset);
  const DatasetIndex idx = read_index(index_path.string());
  auto it = idx.splits.find(split);
  if (it == idx.splits.end()) fail("{}: no split \"{}\" in splits", index_path.string(), split);
  std::vector<std::string> paths;
  for (const auto& sh : it->second.shards) paths.push_back((index_path.parent_path() / sh.file).string());
  auto s = from_shards(paths, idx.tokenizer.vocab_size);
  s->name_ = fmt::format("{} (split {})", index_path.string(), split);
  for (size_t i = 0; i < s->shards_.size(); ++i) {
    const TokenShard& sh = *s->shards_[i];
    const ShardInfo& info = it->second.shards[i];
    if (sh.size() != info.tokens)
      fail("{}: holds {} tokens but {} lists {}", sh.path(), sh.size(), index_path.string(), info.tokens);
    if (sh.token_bytes() != idx.token_bytes)
      fail("{}: stores {} but {} says {}", sh.path(), dtype_name(sh.token_bytes()), index_path.string(),
           dtype_name(idx.token_bytes));
    if (sh.eos_id() != idx.tokenizer.eos_id)
      fail("{}: EOS id {} differs from the tokenizer's {} in {}", sh.path(), sh.eos_id(), idx.tokenizer.eos_id,
           index_path.string());
  }
  return s;
}

void TokenStream::read(int64_t begin, int64_t n, int64_t* out) const {
  if (begin < 0 || n < 0 || begin + n > total_)
    fail("{}: read of [{}, {}) past the end ({} tokens)", name_, begin, begin + n, total_);
  auto k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1);
  while (n > 0) {
    while (begin - starts_[k] >= shards_[k]->size()) ++k;
    const TokenShard& sh = *shards_[k];
    const int64_t off = begin - starts_[k];
    const int64_t take = std::min(n, sh.size() - off);
    for (int64_t i = 0; i < take; ++i) {
      const uint32_t v = sh[off + i];
      if (vocab_size_ > 0 && v >= static_cast<uint64_t>(vocab_size_))
        fail("{}: token {} at position {} is outside the vocabulary (size {})", sh.path(), v, off + i, vocab_size_);
      out[i] = v;
    }
    out += take;
    begin += take;
    n -= take;
  }
}

// ---------------------------------------------------------------------------------------------------
// Permutation, LoaderState, TokenLoader

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n), key_(mix64(key)) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n_) ++bits;
  half_bits_ = std::max(1, (bits + 1) / 2);
}

uint64_t Permutation::operator()(uint64_t i) const {
  if (n_ <= 1) return 0;
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t x = i;
  do {
    uint64_t l = x >> half_bits_, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix64(key_ ^ (round << 56) ^ r) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half_bits_) | r;
  } while (x >= n_);
  return x;
}

json LoaderState::to_json() const {
  return {{"epoch", epoch},           {"index", index},     {"seq_len", seq_len}, {"rank", rank},
          {"world_size", world_size}, {"shuffle", shuffle}, {"seed", seed},       {"stream_tokens", stream_tokens}};
}

LoaderState LoaderState::from_json(const json& j, const std::string& where) {
  IndexIn in{where};
  LoaderState s;
  const std::string w = "loader";
  s.epoch = in.integer(j, w, "epoch", 0, std::numeric_limits<int64_t>::max());
  s.index = in.integer(j, w, "index", 0, std::numeric_limits<int64_t>::max());
  s.seq_len = in.integer(j, w, "seq_len", 1, int64_t{1} << 40);
  s.rank = static_cast<int>(in.integer(j, w, "rank", 0, 1 << 24));
  s.world_size = static_cast<int>(in.integer(j, w, "world_size", 1, 1 << 24));
  const json& sh = in.req(j, w, "shuffle");
  if (!sh.is_boolean()) in.bad("loader.shuffle", "expected true or false");
  s.shuffle = sh.get<bool>();
  const json& seed = in.req(j, w, "seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    in.bad("loader.seed", "expected a non-negative integer");
  s.seed = seed.get<uint64_t>();
  s.stream_tokens = in.integer(j, w, "stream_tokens", 0, kMaxTokens);
  return s;
}

TokenLoader::TokenLoader(std::shared_ptr<const TokenStream> stream, LoaderOptions options)
    : stream_(std::move(stream)), opts_(options) {
  if (opts_.seq_len < 1) fail("sequence length must be at least 1, got {}", opts_.seq_len);
  if (opts_.world_size < 1) fail("world size must be at least 1, got {}", opts_.world_size);
  if (opts_.rank < 0 || opts_.rank >= opts_.world_size)
    fail("rank {} is outside [0, {}) (world size {})", opts_.rank, opts_.world_size, opts_.world_size);
  const int64_t n = stream_->size();
  blocks_ = n > 0 ? (n - 1) / opts_.seq_len : 0;
  per_rank_ = blocks_ / opts_.world_size;
  if (per_rank_ == 0)
    fail("{}: {} tokens are too few for one block of {} + 1 tokens per rank ({} ranks)", stream_->name(), n,
         opts_.seq_len, opts_.world_size);
}

int64_t TokenLoader::block_id(int64_t epoch, int64_t i) const {
  const auto slot = static_cast<uint64_t>(i * opts_.world_size + opts_.rank);
  if (!opts_.shuffle) return static_cast<int64_t>(slot);
  const Permutation perm(static_cast<uint64_t>(blocks_),
                         opts_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  return static_cast<int64_t>(perm(slot));
}

void TokenLoader::next(int64_t* out) {
  const int64_t b = block_id(epoch_, index_);
  stream_->read(b * opts_.seq_len, opts_.seq_len + 1, out);
  if (++index_ == per_rank_) {
    index_ = 0;
    ++epoch_;
  }
}

std::vector<int64_t> TokenLoader::next_batch(int64_t batch) {
  std::vector<int64_t> out(static_cast<size_t>(batch * block_tokens()));
  for (int64_t i = 0; i < batch; ++i) next(out.data() + i * block_tokens());
  return out;
}

LoaderState TokenLoader::state() const {
  return {epoch_, index_, opts_.seq_len, opts_.rank, opts_.world_size, opts_.shuffle, opts_.seed, stream_->size()};
}

void TokenLoader::restore(const LoaderState& s) {
  auto mismatch = [&](const char* what, auto saved, auto now) {
    fail("{}: cannot resume the loader: saved {} {} differs from the current {}", stream_->name(), what, saved, now);
  };
  if (s.seq_len != opts_.seq_len) mismatch("seq_len", s.seq_len, opts_.seq_len);
  if (s.world_size != opts_.world_size) mismatch("world_size", s.world_size, opts_.world_size);
  if (s.rank != opts_.rank) mismatch("rank", s.rank, opts_.rank);
  if (s.shuffle != opts_.shuffle) mismatch("shuffle", s.shuffle, opts_.shuffle);
  if (s.seed != opts_.seed) mismatch("seed", s.seed, opts_.seed);
  if (s.stream_tokens != stream_->size()) mismatch("stream size (tokens)", s.stream_tokens, stream_->size());
  if (s.index < 0 || s.index >= per_rank_)
    fail("{}: cannot resume the loader: block index {} is outside [0, {})", stream_->name(), s.index, per_rank_);
  epoch_ = s.epoch;
  index_ = s.index;
}

}  // namespace drope::text
