// FNV-1a 64-bit hash: ids, checksums and settings fingerprints that every rank must compute alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus {

/// FNV-1a over `len` bytes, starting from `seed` (the standard offset basis by default).
inline uint64_t fnv1a64(const void* data, size_t len, uint64_t seed = 0xcbf29ce484222325ull) {
  uint64_t h = seed;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/// FNV-1a of a string.
inline uint64_t fnv1a64(const std::string& s) { return fnv1a64(s.data(), s.size()); }

}  // namespace chorus
