// bf16 storage, the input generator, Execution's text form and the reference.
#include "kernels/dense.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/reference.h"
#include "tests/support/catch.h"

namespace gputune::kernels {
namespace {

TEST_CASE("bf16 conversion rounds to nearest, ties to even") {
  CHECK(FloatToBf16(1.0f) == 0x3f80);
  // 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd): rounds down.
  CHECK(FloatToBf16(1.0f + 0x1p-8f) == 0x3f80);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  CHECK(FloatToBf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  // Just above the tie rounds up.
  CHECK(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(FloatToBf16(-2.0f) == 0xc000);
  CHECK(FloatToBf16(-0.0f) == 0x8000);
}

TEST_CASE("bf16 conversion keeps NaN and overflows to infinity") {
  CHECK(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must not become Inf.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  CHECK(std::isnan(Bf16ToFloat(FloatToBf16(low_payload_nan))));
  CHECK(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::max())) ==
        std::numeric_limits<float>::infinity());
  CHECK(FloatToBf16(-std::numeric_limits<float>::infinity()) == 0xff80);
}

TEST_CASE("every bf16 value survives a round trip through float") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<Bf16>(bits);
    if (std::isnan(Bf16ToFloat(b))) continue;
    REQUIRE(FloatToBf16(Bf16ToFloat(b)) == b);
  }
}

TEST_CASE("the input generator is deterministic and uniform between -1 and 1") {
  std::vector<Bf16> a(4096), b(4096), other_stream(4096), other_seed(4096);
  FillUniformBf16(7, kStreamX, a.data(), a.size());
  FillUniformBf16(7, kStreamX, b.data(), b.size());
  FillUniformBf16(7, kStreamW, other_stream.data(), other_stream.size());
  FillUniformBf16(8, kStreamX, other_seed.data(), other_seed.size());
  CHECK(a == b);
  CHECK(a != other_stream);
  CHECK(a != other_seed);

  double sum = 0, sum_sq = 0;
  std::set<Bf16> distinct;
  for (Bf16 v : a) {
    const double f = Bf16ToFloat(v);
    REQUIRE(f >= -1.0);
    REQUIRE(f <= 1.0);  // rounding to bf16 may reach 1.0 itself
    sum += f;
    sum_sq += f * f;
    distinct.insert(v);
  }
  CHECK(std::abs(sum / a.size()) < 0.05);
  CHECK(sum_sq / a.size() == Approx(1.0 / 3.0).epsilon(0.05));
  CHECK(distinct.size() > 500);
  // Element i does not depend on the buffer it is generated into.
  CHECK(UniformBf16(7, kStreamX, 1234) == a[1234]);
}

TEST_CASE("an execution prints as kernel(params) and parses back") {
  const Execution blocked{"host.blocked",
                          {{"tile_n", 16}, {"tile_m", 4}, {"tile_k", 256}}};
  CHECK(blocked.ToString() == "host.blocked(tile_k=256,tile_m=4,tile_n=16)");
  CHECK(Execution{"host.naive", {}}.ToString() == "host.naive()");
  const Execution with_workspace{"cublaslt", {{"algo_id", -3}}, 4096};
  CHECK(with_workspace.ToString() ==
        "cublaslt(algo_id=-3) workspace_bytes=4096");

  for (const Execution& e : {blocked, with_workspace, Execution{"k", {}}}) {
    CHECK(ParseExecution(e.ToString()) == e);
  }
  CHECK(ParseExecution("host.naive") == Execution{"host.naive", {}});
  CHECK(ParseExecution(" fault.fixed( time_us = 97 ) ") ==
        Execution{"fault.fixed", {{"time_us", 97}}});
}

TEST_CASE("ParseExecution rejects malformed text") {
  for (const char* bad :
       {"", "(a=1)", "k(a=1", "k(a)", "k(a=)", "k(a=1,)", "k(a=1,a=2)",
        "k(a=x)", "k(a=99999999999999999999)", "k() trailing", "k)",
        "k() workspace_bytes=-1", "k(a=1)(b=2)"}) {
    INFO(bad);
    CHECK_FALSE(ParseExecution(bad).has_value());
  }
}

TEST_CASE("the reference is the exact dot product of the bf16 inputs") {
  // x = [1, 2; 3, 4] (m=2, k=2), w = [0.5, -1] (n=1).
  const std::vector<Bf16> x = {FloatToBf16(1), FloatToBf16(2), FloatToBf16(3),
                               FloatToBf16(4)};
  const std::vector<Bf16> w = {FloatToBf16(0.5f), FloatToBf16(-1)};
  const std::vector<float> ref =
      ReferenceDense(DenseShape{.m = 2, .n = 1, .k = 2}, x.data(), w.data())
          .value();
  CHECK(ref == std::vector<float>{-1.5f, -2.5f});
}

TEST_CASE("the comparison counts out-of-tolerance and non-finite outputs") {
  const std::vector<float> ref = {1.0f, 100.0f, -2.0f, 0.0f};
  const std::vector<Bf16> out = {FloatToBf16(1.25f), FloatToBf16(100.5f),
                                 FloatToBf16(std::nanf("")), FloatToBf16(0.0f)};
  // Tolerance: 0.1 + 0.01*|ref|: 1.25 is off (0.25 > 0.11), 100.5 is not
  // (0.5 <= 1.1).
  const Comparison c =
      CompareWithReference(out.data(), ref.data(), ref.size(), 0.1, 0.01);
  CHECK(c.mismatches == 1);
  CHECK(c.non_finite == 1);
  CHECK(c.max_abs_error == Approx(0.5));
}

}  // namespace
}  // namespace gputune::kernels
