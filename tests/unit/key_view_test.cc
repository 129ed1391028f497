// proto/key_view.h: reading a Key's bytes without a message must give what
// protobuf's parser gives, for every input it accepts.
#include "proto/key_view.h"

#include <random>
#include <string>
#include <vector>

#include "gputune/v1/tune.pb.h"
#include "proto/key_format.h"
#include "proto/validation.h"
#include "proto/wire.h"
#include "tests/support/catch.h"

namespace gputune {
namespace {

// ReadKeyView and protobuf agree on `bytes`: both refuse them, or both read
// the same key.
void RequireSameAsProtobuf(const std::string& bytes) {
  v1::Key parsed;
  const bool protobuf_ok = parsed.ParseFromString(bytes);
  KeyView view;
  const bool view_ok = ReadKeyView(bytes, &view);
  REQUIRE(view_ok == protobuf_ok);
  if (protobuf_ok) {
    CHECK(view.Tie() == KeyView::Of(parsed).Tie());
  }
}

std::string Dense(int phase, const std::string& role, uint32_t m, uint32_t k,
                  uint32_t n) {
  v1::DenseBf16Key d;
  d.set_phase(static_cast<v1::Phase>(phase));
  d.set_role(role);
  d.set_tokens(m);
  d.set_input_features(k);
  d.set_output_features(n);
  return d.SerializeAsString();
}

std::string Custom(const std::string& op, const std::string& params) {
  v1::CustomKey c;
  c.set_op(op);
  c.set_params(params);
  return c.SerializeAsString();
}

std::string Field(uint32_t field, const std::string& bytes) {
  std::string out;
  wire::AppendBytesField(field, bytes, &out);
  return out;
}

std::string Varint(uint32_t field, uint64_t value) {
  std::string out;
  wire::AppendVarintField(field, value, &out);
  return out;
}

}  // namespace

TEST_CASE("a Key's bytes read as the same fields protobuf parses") {
  const std::string dense =
      Field(1, Dense(v1::PHASE_DECODE, "attn.qkv", 16, 4096, 6144));
  const std::string custom = Field(2, Custom("my_attention", "b=8,h=32"));
  const std::string set = Field(3, "cs1");
  RequireSameAsProtobuf(dense + set);
  RequireSameAsProtobuf(custom + set);
  RequireSameAsProtobuf(set);  // no op
  RequireSameAsProtobuf("");
  // Field order does not matter; the last candidate set wins.
  RequireSameAsProtobuf(set + dense + Field(3, "cs2"));
  // A repeated message merges: the second sets only the role.
  v1::DenseBf16Key role_only;
  role_only.set_role("mlp.down");
  RequireSameAsProtobuf(dense + Field(1, role_only.SerializeAsString()) + set);
  // Setting the other member of the oneof clears the first.
  RequireSameAsProtobuf(dense + custom + set);
  RequireSameAsProtobuf(custom + dense + set);
  RequireSameAsProtobuf(dense + custom +
                        Field(1, role_only.SerializeAsString()));
  // Unknown fields of every wire type, at both levels, are skipped.
  const std::string unknown = Varint(9, 300) + Field(10, "x") +
                              std::string("\x59", 1) + std::string(8, '\0') +
                              std::string("\x65\x01\x02\x03\x04", 5) +
                              std::string("\x6b\x08\x01\x6c", 4);  // a group
  RequireSameAsProtobuf(unknown + dense + unknown + set);
  RequireSameAsProtobuf(
      Field(1, unknown + Dense(v1::PHASE_PREFILL, "lm_head", 1, 2, 3)) + set);
  // A known field with another wire type is unknown to protobuf too.
  RequireSameAsProtobuf(Varint(3, 7) + Varint(1, 1) + dense);
  RequireSameAsProtobuf(Field(1, Field(1, "x") + Varint(2, 5)) + set);
  // A negative phase (ten bytes) and dimensions wider than 32 bits, as
  // protobuf truncates them.
  RequireSameAsProtobuf(Field(1, Varint(1, static_cast<uint64_t>(int64_t{-1})) +
                                     Varint(3, (uint64_t{1} << 40) + 5)) +
                        set);
}

TEST_CASE("bytes that are not a Key are refused, as protobuf refuses them") {
  const std::string key =
      Field(1, Dense(v1::PHASE_DECODE, "attn.qkv", 16, 4096, 6144)) +
      Field(3, "cs1");
  for (size_t cut = 1; cut < key.size(); ++cut) {
    INFO("cut at " << cut);
    RequireSameAsProtobuf(key.substr(0, cut));
  }
  KeyView view;
  CHECK_FALSE(ReadKeyView(std::string("\xff\xff\xff", 3), &view));
  CHECK_FALSE(ReadKeyView(Field(1, std::string("\xff", 1)), &view));
  CHECK_FALSE(ReadKeyView(std::string("\x0c", 1), &view));  // a lone end-group
}

TEST_CASE("random Keys and mixtures of their parts read as protobuf reads") {
  std::mt19937 rng(42);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  const std::vector<std::string> roles = {"", "attn.qkv", "mlp.gate_up", "x"};
  std::vector<std::string> parts;
  for (int i = 0; i < 20; ++i) {
    parts.push_back(Field(1, Dense(pick(4) - 1, roles[pick(4)], rng(),
                                   rng() % 5000, pick(2) ? 0 : rng())));
    parts.push_back(Field(2, Custom(roles[pick(4)], pick(2) ? "" : "a=1")));
    parts.push_back(Field(3, roles[pick(4)]));
    parts.push_back(Varint(4 + pick(4), rng()));
  }
  for (int i = 0; i < 3000; ++i) {
    std::string bytes;
    for (int n = pick(6); n > 0; --n) bytes += parts[pick(parts.size())];
    if (pick(8) == 0 && !bytes.empty()) bytes.resize(pick(bytes.size()));
    INFO("case " << i);
    RequireSameAsProtobuf(bytes);
  }
}

TEST_CASE("a KeyView validates and names a key as its v1::Key does") {
  v1::Key key;
  key.mutable_dense_bf16()->set_phase(v1::PHASE_DECODE);
  key.mutable_dense_bf16()->set_role("attn.qkv");
  key.mutable_dense_bf16()->set_tokens(16);
  key.mutable_dense_bf16()->set_input_features(4096);
  key.mutable_dense_bf16()->set_output_features(6144);
  key.set_candidate_set("cs1");
  KeyView view;
  const std::string bytes = key.SerializeAsString();
  REQUIRE(ReadKeyView(bytes, &view));
  CHECK(ValidateKey(view, "key").ok());
  std::string id;
  AppendKeyId(view, &id);
  CHECK(id == "dense_bf16/decode/attn.qkv/m=16/k=4096/n=6144");
  CHECK(id == KeyId(key));
  key.mutable_dense_bf16()->set_tokens(0);
  const std::string bad = key.SerializeAsString();
  REQUIRE(ReadKeyView(bad, &view));
  CHECK(ValidateKey(view, "keys[3]").message() ==
        "keys[3].dense_bf16.tokens: must be 1..1048576, got 0");
}

}  // namespace gputune
