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

// The exact check (Backend::RunAndCompareExact). With uniform inputs a
// dropped or repeated K term hides in the tolerance from K of about 9,000
// (the absolute tolerance passes 1 there). These inputs make any correct
// kernel exact instead: x is +-1 everywhere and row n of W is +-1 where
// k % P == n % P and 0 elsewhere, with P = ExactCheckPeriod(K), so every
// output sums at most kExactCheckMaxTerms terms of +-1. Every partial sum, in
// any order, split or precision (fp32 or bf16), is then an integer in
// [-256, 256], which bf16 holds exactly: a correct kernel matches the
// reference bit for bit, and one that drops or repeats a nonzero term is off
// by 1. Each K position is nonzero in the rows n with n % P == k % P, so
// every K position is checked when N >= P (N >= K / 256).
inline constexpr int64_t kExactCheckMaxTerms = 256;
inline constexpr uint64_t kStreamExactX = 3;
inline constexpr uint64_t kStreamExactW = 4;

constexpr int64_t ExactCheckPeriod(int64_t k) {
  return k <= kExactCheckMaxTerms
             ? 1
             : (k + kExactCheckMaxTerms - 1) / kExactCheckMaxTerms;
}

// Element i of the row-major [rows, k] exact-check matrix of `stream`
// (kStreamExactX for x, kStreamExactW for W): 1.0, -1.0 or (W only) 0.
constexpr Bf16 ExactCheckBf16(uint64_t seed, uint64_t stream, uint64_t i,
                              int64_t k) {
  constexpr Bf16 kOne = 0x3f80;
  constexpr Bf16 kMinusOne = 0xbf80;
  if (stream == kStreamExactW) {
    const int64_t period = ExactCheckPeriod(k);
    const auto row = static_cast<int64_t>(i / static_cast<uint64_t>(k));
    const auto col = static_cast<int64_t>(i % static_cast<uint64_t>(k));
    if (col % period != row % period) return 0;
  }
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const uint64_t bits = Mix64(Mix64(seed + stream * kGamma) + (i + 1) * kGamma);
  return (bits >> 63) != 0 ? kMinusOne : kOne;
}

// Fills the row-major [rows, k] exact-check matrix of `stream`.
inline void FillExactCheckBf16(uint64_t seed, uint64_t stream, Bf16* out,
                               int64_t rows, int64_t k) {
  const auto count = static_cast<uint64_t>(rows * k);
  for (uint64_t i = 0; i < count; ++i) {
    out[i] = ExactCheckBf16(seed, stream, i, k);
  }
}

}  // namespace gputune::kernels

#endif  // GPUTUNE_KERNELS_BF16_H_
