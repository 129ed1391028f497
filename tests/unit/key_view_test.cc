// proto/key_view.h: reading a Key's plain bytes without a message must give
// what protobuf's parser gives; anything not plain is left to protobuf.
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

// Whether `bytes` read as plain; when they do, protobuf accepts them too
// and reads the same key.
bool PlainAndAsProtobuf(const std::string& bytes) {
  KeyView view;
  if (!ReadPlainKeyView(bytes, &view)) return false;
  v1::Key parsed;
  REQUIRE(parsed.ParseFromString(bytes));
  CHECK(view.Tie() == KeyView::Of(parsed).Tie());
  return true;
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

// Written by hand, not by protobuf: some tests send strings that are not
// UTF-8, which protobuf would log about.
std::string Dense(int phase, const std::string& role, uint32_t m, uint32_t k,
                  uint32_t n) {
  return Varint(1, static_cast<uint64_t>(static_cast<int64_t>(phase))) +
         Field(2, role) + Varint(3, m) + Varint(4, k) + Varint(5, n);
}

std::string Custom(const std::string& op, const std::string& params) {
  return Field(1, op) + Field(2, params);
}

}  // namespace

TEST_CASE("what serializers write for a key is plain and reads as protobuf") {
  const std::string dense =
      Field(1, Dense(v1::PHASE_DECODE, "attn.qkv", 16, 4096, 6144));
  const std::string custom = Field(2, Custom("my_attention", "b=8,h=32"));
  const std::string set = Field(3, "cs1");
  CHECK(PlainAndAsProtobuf(dense + set));
  CHECK(PlainAndAsProtobuf(custom + set));
  CHECK(PlainAndAsProtobuf(set + dense));  // field order does not matter
  CHECK(PlainAndAsProtobuf(set));          // no op: validation says so
  CHECK(PlainAndAsProtobuf(""));
  CHECK(PlainAndAsProtobuf(Field(1, "") + set));  // an empty dense_bf16
  // A negative phase (ten bytes) and dimensions wider than 32 bits, as
  // protobuf truncates them.
  CHECK(PlainAndAsProtobuf(
      Field(1, Varint(1, static_cast<uint64_t>(int64_t{-1})) +
                   Varint(3, (uint64_t{1} << 40) + 5)) +
      set));
  // What protobuf itself writes, for keys of every shape.
  for (int phase : {0, 1, 2, 7}) {
    v1::Key key;
    key.mutable_dense_bf16()->set_phase(static_cast<v1::Phase>(phase));
    key.mutable_dense_bf16()->set_role("mlp.down");
    key.mutable_dense_bf16()->set_tokens(static_cast<uint32_t>(phase) * 1000);
    key.set_candidate_set(phase % 2 ? "cs" : "");
    CHECK(PlainAndAsProtobuf(key.SerializeAsString()));
  }
}

TEST_CASE("bytes that are not plain are left to protobuf's parser") {
  const std::string dense =
      Field(1, Dense(v1::PHASE_DECODE, "attn.qkv", 16, 4096, 6144));
  const std::string custom = Field(2, Custom("my_attention", "b=8,h=32"));
  const std::string set = Field(3, "cs1");
  v1::DenseBf16Key role_only;
  role_only.set_role("mlp.down");
  const std::vector<std::string> not_plain = {
      set + dense + Field(3, "cs2"),                    // a field twice
      dense + Field(1, role_only.SerializeAsString()),  // a message twice
      dense + custom + set,                             // both members
      Varint(9, 300) + dense + set,                     // unknown field
      Field(1, Varint(9, 1) + Dense(1, "x", 1, 2, 3)),  // unknown inside
      Varint(3, 7) + dense,                             // wrong wire type
      Field(1, Field(1, "x")) + set,                    // phase as bytes
      std::string("\x6b\x08\x01\x6c", 4) + dense,       // a group
      Field(3, "c\xc3\xa9"),                            // UTF-8, not ASCII
      Field(2, Custom("\xff", "p")) + dense + set,      // bad UTF-8, cleared
  };
  for (size_t i = 0; i < not_plain.size(); ++i) {
    INFO("case " << i);
    KeyView view;
    CHECK_FALSE(ReadPlainKeyView(not_plain[i], &view));
  }
  // Cut anywhere: malformed bytes are not plain; a cut between fields
  // leaves a shorter key that is.
  const std::string key = dense + set;
  int plain = 0;
  for (size_t cut = 1; cut < key.size(); ++cut) {
    INFO("cut at " << cut);
    plain += PlainAndAsProtobuf(key.substr(0, cut));
  }
  CHECK(plain == 1);  // the cut after dense_bf16
  // A tag padded to five bytes reads as protobuf reads it; six is too many
  // for both.
  CHECK(PlainAndAsProtobuf(std::string("\x9a\x80\x80\x80\x00\x03", 6) + "cs1"));
  KeyView view;
  const std::string six("\x9a\x80\x80\x80\x80\x00\x03cs1", 9);
  CHECK_FALSE(ReadPlainKeyView(six, &view));
  CHECK_FALSE(v1::Key().ParseFromString(six));
  CHECK_FALSE(ReadPlainKeyView(std::string("\xff\xff\xff", 3), &view));
  CHECK_FALSE(ReadPlainKeyView(std::string("\x0c", 1), &view));  // lone end
}

TEST_CASE("random mixtures of key parts never read differently from protobuf") {
  std::mt19937 rng(42);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> names = {"",          "attn.qkv", "x",
                                          "c\xc3\xa9", "\xff",     "mlp.down"};
  std::vector<std::string> parts;
  for (int i = 0; i < 20; ++i) {
    parts.push_back(
        Field(1, Dense(static_cast<int>(pick(4)) - 1, names[pick(names.size())],
                       rng(), rng() % 5000, pick(2) ? 0 : rng())));
    parts.push_back(
        Field(2, Custom(names[pick(names.size())], pick(2) ? "" : "a=1")));
    parts.push_back(Field(3, names[pick(names.size())]));
    parts.push_back(Varint(4 + pick(4), rng()));
    parts.push_back(std::string("\x6b\x08\x01\x6c", 4));  // a group
  }
  int plain = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes;
    for (size_t n = pick(4); n > 0; --n) bytes += parts[pick(parts.size())];
    if (pick(8) == 0 && !bytes.empty()) bytes.resize(pick(bytes.size()));
    INFO("case " << i);
    plain += PlainAndAsProtobuf(bytes);
  }
  CHECK(plain > 300);  // the property was checked on plain bytes, not none
}

TEST_CASE("dense keys as serializers write them read as protobuf reads them") {
  // The shapes BatchLookup sees nearly always (read on a straight path),
  // with fields left out, roles up to 64 characters and dimensions of one
  // to four varint bytes, whole and cut short.
  std::mt19937 rng(11);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const uint32_t dims[] = {0, 1, 127, 128, 4096, 1048576, 1u << 27, 1u << 28};
  int read = 0;
  for (int i = 0; i < 3000; ++i) {
    v1::Key key;
    v1::DenseBf16Key* d = key.mutable_dense_bf16();
    d->set_phase(static_cast<v1::Phase>(pick(3)));
    d->set_role(std::string(pick(70), "ab.-_9"[pick(6)]));
    d->set_tokens(dims[pick(8)]);
    d->set_input_features(dims[pick(8)]);
    d->set_output_features(dims[pick(8)]);
    if (pick(4) != 0) key.set_candidate_set(pick(2) ? "cs1" : "h:1+2");
    std::string bytes = key.SerializeAsString();
    if (pick(5) == 0) bytes.resize(pick(bytes.size() + 1));
    INFO("case " << i << ": " << key.ShortDebugString());
    v1::Key parsed;
    if (!parsed.ParseFromString(bytes)) {
      KeyView view;
      CHECK_FALSE(ReadPlainKeyView(bytes, &view));
      continue;
    }
    REQUIRE(PlainAndAsProtobuf(bytes));
    ++read;
  }
  CHECK(read > 2000);
}

TEST_CASE("a key written from its view is the bytes protobuf writes") {
  std::mt19937 rng(7);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> texts = {"", "attn.qkv", "x", "b=8,h=32",
                                          std::string(300, 'p')};
  for (int i = 0; i < 2000; ++i) {
    v1::Key key;
    switch (pick(3)) {
      case 0: {
        v1::DenseBf16Key* d = key.mutable_dense_bf16();
        // Negative and unknown phases too: int32 fields sign-extend.
        d->set_phase(static_cast<v1::Phase>(static_cast<int>(pick(5)) - 2));
        d->set_role(texts[pick(texts.size())]);
        d->set_tokens(pick(3) == 0 ? 0 : rng());
        d->set_input_features(pick(3) == 0 ? 0 : rng() % 300);
        d->set_output_features(pick(3) == 0 ? 0 : rng());
        break;
      }
      case 1:
        key.mutable_custom()->set_op(texts[pick(texts.size())]);
        key.mutable_custom()->set_params(texts[pick(texts.size())]);
        break;
      default:
        break;  // no op
    }
    key.set_candidate_set(texts[pick(texts.size())]);
    INFO("case " << i << ": " << key.ShortDebugString());
    for (uint32_t field : {1u, 2000u}) {  // one- and two-byte tags
      std::string written = "prefix";
      const size_t size = AppendKeyField(field, KeyView::Of(key), &written);
      REQUIRE(written == "prefix" + Field(field, key.SerializeAsString()));
      REQUIRE(size == key.ByteSizeLong());
    }
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
  REQUIRE(ReadPlainKeyView(bytes, &view));
  CHECK(ValidateKey(view, "key").ok());
  std::string id;
  AppendKeyId(view, &id);
  CHECK(id == "dense_bf16/decode/attn.qkv/m=16/k=4096/n=6144");
  CHECK(id == KeyId(key));
  key.mutable_dense_bf16()->set_tokens(0);
  const std::string bad = key.SerializeAsString();
  REQUIRE(ReadPlainKeyView(bad, &view));
  CHECK(ValidateKey(view, "keys[3]").message() ==
        "keys[3].dense_bf16.tokens: must be 1..1048576, got 0");
}

}  // namespace gputune
