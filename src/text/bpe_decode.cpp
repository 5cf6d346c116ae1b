// HF `tokenizer.json` byte-level BPE, decoding: GPT-2's byte ↔ printable-character table (also used
// by the ByteLevel pre-tokeniser) and the ByteLevel decoder.
#include "bpe_internal.h"
#include "drope/core/error.h"

namespace drope::text::bpe_detail {

ByteTable::ByteTable() {
  to_byte.fill(-1);
  uint32_t extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : extra++;
    utf8_append(to_text[b], cp);
    to_byte[cp] = b;
  }
}

const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const auto& table = byte_table();
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_ || (id_to_token_[id].empty() && !added_by_id_.count(id)))
      fail("token id {} at index {} is not in the vocabulary of {} (size {})", id, i, path_, vocab_size_);
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end() && skip_special && added->second.special) continue;
    const std::string& tok = added != added_by_id_.end() ? added->second.raw : id_to_token_[id];
    // ByteLevel decoder: a token whose characters are all in the byte table becomes those bytes,
    // any other token is kept as its own UTF-8.
    std::string mapped;
    bool all = true;
    for (size_t k = 0; k < tok.size();) {
      const uint32_t cp = utf8_next(tok, k);
      if (cp >= table.to_byte.size() || table.to_byte[cp] < 0) {
        all = false;
        break;
      }
      mapped += static_cast<char>(table.to_byte[cp]);
    }
    bytes += all ? mapped : tok;
  }
  return utf8_lossy(bytes);
}

}  // namespace drope::text::bpe_detail
