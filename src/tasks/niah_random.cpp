// NIAH randomness: splitmix64 seed derivation, FNV-1a, unbiased bounded draws from std::mt19937_64,
// and random needle keys/values (adjective-noun words, 7-digit numbers, version-4 UUIDs).
#include "drope/tasks/niah.h"

#include <limits>

#include <fmt/format.h>

#include "drope/core/error.h"

namespace drope::tasks {

// ---- randomness -----------------------------------------------------------------------------------------

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t derive_seed(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t h = mix64(seed);
  for (uint64_t p : parts) h = mix64(h ^ mix64(p));
  return h;
}

uint64_t stable_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64-bit offset basis
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;  // FNV prime
  return h;
}

uint64_t draw_below(std::mt19937_64& rng, uint64_t n) {
  if (n == 0) fail("draw_below: empty range");
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

double draw_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::string draw_needle_item(std::mt19937_64& rng, NeedleKind kind) {
  switch (kind) {
    case NeedleKind::numbers: return std::to_string(1000000 + draw_below(rng, 9000000));
    case NeedleKind::words: {
      const auto& adj = niah_adjectives();
      const auto& noun = niah_nouns();
      const std::string a = adj[draw_below(rng, adj.size())];
      return a + "-" + noun[draw_below(rng, noun.size())];
    }
    case NeedleKind::uuids: {
      uint64_t hi = rng(), lo = rng();
      hi = (hi & ~0xf000ULL) | 0x4000ULL;                     // version 4 (bits 76..79 of the 128)
      lo = (lo & ~(0xc000ULL << 48)) | (0x8000ULL << 48);     // RFC 4122 variant 10xx
      return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48,
                         lo & 0xffffffffffffULL);
    }
  }
  return "";
}

}  // namespace drope::tasks
