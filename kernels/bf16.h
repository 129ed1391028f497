// bfloat16 storage and conversions, and the deterministic input generator that
// every backend uses for the dense problem (ToleranceFor in engine.h is
// derived for its value range).
//
//   std::vector<Bf16> x(m * k);
//   FillUniformBf16(seed, kStreamX, x.data(), x.size());
//   float first = Bf16ToFloat(x[0]);
//
// Header-only and constexpr so that CUDA host code can use it as is.
#ifndef GPUTUNE_KERNELS_BF16_H_
#define GPUTUNE_KERNELS_BF16_H_

#include <bit>
#include <cstddef>
#include <cstdint>

namespace gputune::kernels {

// A bfloat16 is stored as its bit pattern: the top 16 bits of an IEEE-754
// binary32. A plain uint16_t rather than a struct so that buffers handed over
// by torch or CUDA (and RunHostExecution's arguments) need no casts.
using Bf16 = uint16_t;

// Machine epsilon of bf16: 8 significant bits, so ulp(1) = 2^-7.
inline constexpr double kBf16Epsilon = 0x1p-7;

// Exact: every bf16 is a float.
constexpr float Bf16ToFloat(Bf16 b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Rounds to nearest, ties to even (as CUDA's __float2bfloat16_rn). A NaN stays
// a (quiet) NaN; finite values beyond bf16's range become infinities.
constexpr Bf16 FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<Bf16>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<Bf16>((u + 0x7fffu + lsb) >> 16);
}

// Input streams of the dense problem: x and W are generated from the same seed
// but never share values.
inline constexpr uint64_t kStreamX = 1;
inline constexpr uint64_t kStreamW = 2;

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijection on
// 64-bit values whose outputs pass BigCrush for consecutive gamma steps.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Element i of `stream` under `seed`: uniform in [-1, 1), rounded to bf16.
// Counter-based, so any element can be generated on its own (one per GPU
// thread, say) and every backend sees the same inputs for a seed.
constexpr Bf16 UniformBf16(uint64_t seed, uint64_t stream, uint64_t i) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const uint64_t base = Mix64(seed + stream * kGamma);
  const uint64_t bits = Mix64(base + (i + 1) * kGamma);
  // The top 24 bits scaled by 2^-23 give [0, 2) exactly in a float.
  const float unit = static_cast<float>(bits >> 40) * 0x1p-23f;
  return FloatToBf16(unit - 1.0f);
}

// Fills out[0, count) with elements 0..count-1 of `stream`.
inline void FillUniformBf16(uint64_t seed, uint64_t stream, Bf16* out,
                            size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = UniformBf16(seed, stream, i);
}

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_BF16_H_
