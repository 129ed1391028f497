#include "key_format.h"

#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "validation.h"

namespace gputune {

absl::string_view PhaseName(v1::Phase phase) {
  switch (phase) {
    case v1::PHASE_PREFILL:
      return "prefill";
    case v1::PHASE_DECODE:
      return "decode";
    default:
      return "unspecified";
  }
}

absl::string_view KeyStateName(v1::KeyState state) {
  switch (state) {
    case v1::KEY_STATE_MISS:
      return "miss";
    case v1::KEY_STATE_PENDING:
      return "pending";
    case v1::KEY_STATE_HIT:
      return "hit";
    case v1::KEY_STATE_STALE:
      return "stale";
    case v1::KEY_STATE_BACKOFF:
      return "backoff";
    default:
      return "unspecified";
  }
}

absl::string_view KeyOp(const v1::Key& key) {
  if (key.has_dense_bf16()) return kDenseOp;
  return key.custom().op();
}

void AppendKeyId(const v1::Key& key, std::string* out) {
  AppendKeyId(KeyView::Of(key), out);
}

void AppendKeyId(const KeyView& key, std::string* out) {
  if (key.op != KeyView::Op::kDense) {
    absl::StrAppend(out, key.name, "/", key.params);
    return;
  }
  // Piece by piece into one buffer: BatchLookup builds 10,000 of these.
  // Literals are copied with their sizes known when compiling, and numbers
  // written in place: a library call per piece showed in profiles.
  char buffer[128];  // 126 at most
  char* at = buffer;
  auto literal = [&at](const auto& text) {  // a string literal
    memcpy(at, text, sizeof(text) - 1);
    at += sizeof(text) - 1;
  };
  auto number = [&at](uint32_t value) {  // digits written last to first
    size_t digits = 1;
    for (uint32_t rest = value; rest >= 10; rest /= 10) ++digits;
    at += digits;
    char* d = at;
    do {
      *--d = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
  };
  memcpy(at, kDenseOp.data(), kDenseOp.size());  // a constant size
  at += kDenseOp.size();
  *at++ = '/';
  const absl::string_view phase = PhaseName(static_cast<v1::Phase>(key.phase));
  memcpy(at, phase.data(), phase.size());
  at += phase.size();
  *at++ = '/';
  if (key.name.size() > kMaxNameLength) {  // not valid; slow but right
    out->append(buffer, at);
    absl::StrAppend(out, key.name, "/m=", key.m, "/k=", key.k, "/n=", key.n);
    return;
  }
  memcpy(at, key.name.data(), key.name.size());
  at += key.name.size();
  literal("/m=");
  number(key.m);
  literal("/k=");
  number(key.k);
  literal("/n=");
  number(key.n);
  out->append(buffer, at);
}

std::string KeyId(const v1::Key& key) {
  std::string id;
  AppendKeyId(key, &id);
  return id;
}

std::string KeyText(const v1::Key& key) {
  return absl::StrCat(KeyId(key), "@", key.candidate_set());
}

namespace {

absl::Status KeyTextError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "key '", text, "': ", why,
      " (expected dense_bf16/<prefill|decode>/<role>/m=<M>/k=<K>/n=<N>@<"
      "candidate_set> or <op>/<params>@<candidate_set>)"));
}

bool ParseDim(absl::string_view part, absl::string_view name, uint32_t* out) {
  if (!absl::ConsumePrefix(&part, name) || !absl::ConsumePrefix(&part, "=")) {
    return false;
  }
  return absl::SimpleAtoi(part, out);
}

}  // namespace

absl::StatusOr<v1::Key> ParseKeyText(absl::string_view text) {
  const size_t at = text.rfind('@');
  if (at == absl::string_view::npos) {
    return KeyTextError(text, "missing '@<candidate_set>'");
  }
  v1::Key key;
  key.set_candidate_set(std::string(text.substr(at + 1)));
  const absl::string_view id = text.substr(0, at);
  const size_t slash = id.find('/');
  if (slash == absl::string_view::npos) {
    return KeyTextError(text, "missing '/' after the op name");
  }
  const absl::string_view op = id.substr(0, slash);
  if (op == kDenseOp) {
    std::vector<absl::string_view> parts = absl::StrSplit(id, '/');
    if (parts.size() != 6) {
      return KeyTextError(text, "a dense_bf16 key has 6 '/'-separated parts");
    }
    v1::DenseBf16Key* d = key.mutable_dense_bf16();
    if (parts[1] == "prefill") {
      d->set_phase(v1::PHASE_PREFILL);
    } else if (parts[1] == "decode") {
      d->set_phase(v1::PHASE_DECODE);
    } else {
      return KeyTextError(text, "phase must be 'prefill' or 'decode'");
    }
    d->set_role(std::string(parts[2]));
    uint32_t m = 0, k = 0, n = 0;
    if (!ParseDim(parts[3], "m", &m) || !ParseDim(parts[4], "k", &k) ||
        !ParseDim(parts[5], "n", &n)) {
      return KeyTextError(text, "dimensions must read m=<M>/k=<K>/n=<N>");
    }
    d->set_tokens(m);
    d->set_input_features(k);
    d->set_output_features(n);
  } else {
    key.mutable_custom()->set_op(std::string(op));
    key.mutable_custom()->set_params(std::string(id.substr(slash + 1)));
  }
  if (absl::Status s = ValidateKey(key, "key"); !s.ok()) return s;
  return key;
}

}  // namespace gputune
