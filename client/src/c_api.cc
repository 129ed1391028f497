// The C API (gputune.h): errors, options, the client, keys, results, the hot
// path, TuneDense and the operator calls. Claims and watches are in
// c_api_claim.cc, the replay in c_api_dense.cc.
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/src/c_api_internal.h"
#include "google/protobuf/util/json_util.h"
#include "gputune/gputune.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "proto/validation.h"

namespace v1 = gputune::v1;
using gputune::c_api::Fail;
using gputune::c_api::Guarded;
using gputune::c_api::NotNull;
using gputune::c_api::Str;

namespace gputune::c_api {
namespace {

// The message of this thread's last failed call. Thread-local like errno:
// a gputune_client is shared by threads, each reads its own last error.
thread_local std::string last_error;

absl::Duration Ms(int64_t ms) { return absl::Milliseconds(ms); }
int64_t ToMs(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

int64_t UnixMs(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return 0;
  return absl::ToUnixMillis(FromProto(t));
}

int64_t Ns(const google::protobuf::Duration& d) {
  return absl::ToInt64Nanoseconds(FromProto(d));
}

gputune_code ReadKeyDesc(const gputune_key_desc* desc, v1::Key* key) {
  gputune_key_desc d{};
  if (gputune_code c = ReadSized(desc, sizeof(gputune_key_desc), "desc", &d);
      c != GPUTUNE_OK) {
    return c;
  }
  switch (d.kind) {
    case GPUTUNE_KEY_DENSE_BF16: {
      v1::DenseBf16Key* dense = key->mutable_dense_bf16();
      dense->set_phase(static_cast<v1::Phase>(d.phase));
      dense->set_role(Str(d.role));
      dense->set_tokens(d.tokens);
      dense->set_input_features(d.input_features);
      dense->set_output_features(d.output_features);
      break;
    }
    case GPUTUNE_KEY_CUSTOM:
      key->mutable_custom()->set_op(Str(d.op));
      key->mutable_custom()->set_params(Str(d.params));
      break;
    default:
      return Fail(absl::StatusCode::kInvalidArgument,
                  "key kind " + std::to_string(static_cast<int>(d.kind)) +
                      " is neither GPUTUNE_KEY_DENSE_BF16 nor "
                      "GPUTUNE_KEY_CUSTOM");
  }
  key->set_candidate_set(Str(d.candidate_set));
  return GPUTUNE_OK;
}

const google::protobuf::Map<std::string, int32_t>& Params(
    const gputune_result* r) {
  return r->entry().execution().params();
}

void SortParams(const gputune_result* r) {
  if (r->params_sorted) return;
  r->sorted_params.clear();
  for (const auto& [name, value] : Params(r)) {
    r->sorted_params.emplace_back(&name, value);
  }
  std::sort(r->sorted_params.begin(), r->sorted_params.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  r->params_sorted = true;
}

gputune_code ToJson(const google::protobuf::Message& message, char** json) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = false;
  std::string out;
  // Printing a valid message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  *json = CopyOut(out);
  return GPUTUNE_OK;
}

}  // namespace

gputune_code Fail(const absl::Status& status) {
  if (status.ok()) return GPUTUNE_OK;  // the last error stays
  last_error = std::string(status.message());
  return static_cast<gputune_code>(status.code());
}

char* CopyOut(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

}  // namespace gputune::c_api

using gputune::c_api::last_error;

extern "C" {

uint32_t gputune_abi_version(void) { return GPUTUNE_ABI_VERSION; }
const char* gputune_version(void) { return GPUTUNE_VERSION_STRING; }

const char* gputune_last_error(void) { return last_error.c_str(); }

const char* gputune_code_name(gputune_code code) {
  // Abseil's names of gRPC's codes ("INVALID_ARGUMENT"), made once and kept
  // for the process's life: callers hold on to the pointer.
  static constexpr int kCodes = GPUTUNE_UNAUTHENTICATED + 1;
  static const std::array<std::string, kCodes>* const kNames = [] {
    auto* names = new std::array<std::string, kCodes>;
    for (int i = 0; i < kCodes; ++i) {
      (*names)[i] = absl::StatusCodeToString(static_cast<absl::StatusCode>(i));
    }
    return names;
  }();
  const int i = static_cast<int>(code);
  return i >= 0 && i < kCodes ? (*kNames)[i].c_str() : "UNKNOWN";
}

const char* gputune_state_name(gputune_state state) {
  switch (state) {
    case GPUTUNE_STATE_MISS:
    case GPUTUNE_STATE_PENDING:
    case GPUTUNE_STATE_HIT:
    case GPUTUNE_STATE_STALE:
    case GPUTUNE_STATE_BACKOFF:
      return gputune::KeyStateName(static_cast<v1::KeyState>(state)).data();
    default:
      return "unspecified";
  }
}

// --- Client ------------------------------------------------------------------

void gputune_client_options_init(gputune_client_options* o) {
  if (o == nullptr) return;
  const gputune::ClientOptions d;
  *o = gputune_client_options{};
  o->struct_size = sizeof(*o);
  o->device = d.device;
  o->lookup_deadline_ms = gputune::c_api::ToMs(d.lookup_deadline);
  o->deadline_ms = gputune::c_api::ToMs(d.deadline);
  o->tune_deadline_ms = gputune::c_api::ToMs(d.tune_deadline);
  o->lease_ttl_ms = gputune::c_api::ToMs(d.lease_ttl);
  o->memo_capacity = d.memo_capacity;
  o->memo_ttl_ms = d.memo_ttl == absl::InfiniteDuration()
                       ? -1
                       : gputune::c_api::ToMs(d.memo_ttl);
  o->refresh_interval_ms = gputune::c_api::ToMs(d.refresh_interval);
  o->breaker_failures = d.breaker_failures;
  o->breaker_open_time_ms = gputune::c_api::ToMs(d.breaker_open_time);
  o->breaker_max_open_time_ms = gputune::c_api::ToMs(d.breaker_max_open_time);
  o->follow_changes = d.follow_changes ? 1 : 0;
}

gputune_code gputune_client_create(const gputune_client_options* options,
                                   gputune_client** client) {
  return Guarded([&] {
    if (auto c = NotNull(client, "client"); c != GPUTUNE_OK) return c;
    *client = nullptr;
    gputune_client_options o;
    gputune_client_options_init(&o);
    if (options != nullptr) {
      if (auto c = gputune::c_api::ReadSized(
              options, offsetof(gputune_client_options, follow_changes),
              "options", &o);
          c != GPUTUNE_OK) {
        return c;
      }
    }
    using gputune::c_api::Ms;
    gputune::ClientOptions co;
    co.endpoint = Str(o.endpoint);
    co.device = o.device;
    co.lookup_deadline = Ms(o.lookup_deadline_ms);
    co.deadline = Ms(o.deadline_ms);
    co.tune_deadline = Ms(o.tune_deadline_ms);
    co.lease_ttl = Ms(o.lease_ttl_ms);
    co.holder = Str(o.holder);
    co.memo_capacity = o.memo_capacity;
    co.memo_ttl =
        o.memo_ttl_ms < 0 ? absl::InfiniteDuration() : Ms(o.memo_ttl_ms);
    co.refresh_interval = Ms(o.refresh_interval_ms);
    co.breaker_failures = o.breaker_failures;
    co.breaker_open_time = Ms(o.breaker_open_time_ms);
    co.breaker_max_open_time = Ms(o.breaker_max_open_time_ms);
    co.follow_changes = o.follow_changes != 0;
    co.gpu_uuid = Str(o.gpu_uuid);
    co.socket_dir = Str(o.socket_dir);
    co.nvidia_proc_dir = Str(o.nvidia_proc_dir);
    auto created = gputune::Client::Create(co);
    if (!created.ok()) return Fail(created.status());
    *client = new gputune_client{std::move(*created)};
    return GPUTUNE_OK;
  });
}

void gputune_client_destroy(gputune_client* client) { delete client; }

const char* gputune_client_endpoint(const gputune_client* client) {
  return client != nullptr ? client->client->endpoint().c_str() : "";
}

const char* gputune_client_gpu_uuid(const gputune_client* client) {
  return client != nullptr ? client->client->gpu_uuid().c_str() : "";
}

// --- Keys --------------------------------------------------------------------

gputune_code gputune_key_new(const gputune_key_desc* desc, gputune_key** key) {
  return Guarded([&] {
    if (auto c = NotNull(key, "key"); c != GPUTUNE_OK) return c;
    *key = nullptr;
    auto made = std::make_unique<gputune_key>();
    if (auto c = gputune::c_api::ReadKeyDesc(desc, &made->key);
        c != GPUTUNE_OK) {
      return c;
    }
    if (absl::Status s = gputune::ValidateKey(made->key, "key"); !s.ok()) {
      return Fail(s);
    }
    made->text = gputune::KeyText(made->key);
    *key = made.release();
    return GPUTUNE_OK;
  });
}

gputune_code gputune_key_parse(const char* text, gputune_key** key) {
  return Guarded([&] {
    if (auto c = NotNull(key, "key"); c != GPUTUNE_OK) return c;
    *key = nullptr;
    if (auto c = NotNull(text, "text"); c != GPUTUNE_OK) return c;
    absl::StatusOr<v1::Key> parsed = gputune::ParseKeyText(text);
    if (!parsed.ok()) return Fail(parsed.status());
    auto made = std::make_unique<gputune_key>();
    made->key = *std::move(parsed);
    made->text = gputune::KeyText(made->key);
    *key = made.release();
    return GPUTUNE_OK;
  });
}

void gputune_key_free(gputune_key* key) { delete key; }

const char* gputune_key_text(const gputune_key* key) {
  return key != nullptr ? key->text.c_str() : "";
}

// --- Results -----------------------------------------------------------------

gputune_result* gputune_result_new(void) {
  return new (std::nothrow) gputune_result();
}
void gputune_result_free(gputune_result* result) { delete result; }

gputune_code gputune_result_copy(const gputune_result* from,
                                 gputune_result* to) {
  return Guarded([&] {
    if (from == nullptr || to == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "gputune_result_copy: from and to must not be NULL");
    }
    if (from != to) {
      if (from->has_own) {
        to->Set(from->own);
      } else {
        to->Set(from->lookup);
      }
    }
    return GPUTUNE_OK;
  });
}

gputune_state gputune_result_state(const gputune_result* r) {
  return static_cast<gputune_state>(r->state());
}
int gputune_result_hit(const gputune_result* r) {
  return r->state() == v1::KEY_STATE_HIT;
}
int gputune_result_stale_usable(const gputune_result* r) {
  return r->stale_usable();
}
int gputune_result_from_memo(const gputune_result* r) {
  return !r->has_own && r->lookup.from_memo();
}

const char* gputune_result_kernel(const gputune_result* r) {
  return r->entry().execution().kernel().c_str();
}
size_t gputune_result_param_count(const gputune_result* r) {
  return gputune::c_api::Params(r).size();
}
gputune_code gputune_result_param(const gputune_result* r, size_t index,
                                  const char** name, int32_t* value) {
  return Guarded([&] {
    if (auto c = NotNull(r, "result"); c != GPUTUNE_OK) return c;
    gputune::c_api::SortParams(r);
    if (index >= r->sorted_params.size()) {
      return Fail(absl::StatusCode::kOutOfRange,
                  "parameter index " + std::to_string(index) +
                      " is past the execution's " +
                      std::to_string(r->sorted_params.size()) + " parameters");
    }
    if (name != nullptr) *name = r->sorted_params[index].first->c_str();
    if (value != nullptr) *value = r->sorted_params[index].second;
    return GPUTUNE_OK;
  });
}
gputune_code gputune_result_param_by_name(const gputune_result* r,
                                          const char* name, int32_t* value) {
  return Guarded([&] {
    if (auto c = NotNull(r, "result"); c != GPUTUNE_OK) return c;
    if (auto c = NotNull(name, "name"); c != GPUTUNE_OK) return c;
    const auto& params = gputune::c_api::Params(r);
    auto it = params.find(name);
    if (it == params.end()) {
      return Fail(absl::StatusCode::kNotFound,
                  "the execution has no parameter '" + std::string(name) + "'");
    }
    if (value != nullptr) *value = it->second;
    return GPUTUNE_OK;
  });
}
uint64_t gputune_result_workspace_bytes(const gputune_result* r) {
  return r->entry().execution().workspace_bytes();
}
const void* gputune_result_data(const gputune_result* r, size_t* size) {
  const std::string& data = r->entry().execution().data();
  if (size != nullptr) *size = data.size();
  return data.data();
}
int64_t gputune_result_chosen_time_ns(const gputune_result* r) {
  return gputune::c_api::Ns(r->entry().chosen_time());
}
int64_t gputune_result_default_time_ns(const gputune_result* r) {
  return gputune::c_api::Ns(r->entry().default_time());
}
double gputune_result_speedup(const gputune_result* r) {
  return r->entry().speedup();
}
const char* gputune_result_stale_reason(const gputune_result* r) {
  return r->status().stale_reason().c_str();
}
const char* gputune_result_claim_holder(const gputune_result* r) {
  return r->status().claim().holder().c_str();
}
int64_t gputune_result_retry_after_unix_ms(const gputune_result* r) {
  return gputune::c_api::UnixMs(r->status().retry_after());
}

// --- Hot path ----------------------------------------------------------------

gputune_code gputune_lookup(gputune_client* client, const gputune_key* key,
                            gputune_result* result) {
  return Guarded([&] {
    if (client == nullptr || key == nullptr || result == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "gputune_lookup: client, key and result must not be NULL");
    }
    absl::StatusOr<gputune::LookupResult> r = client->client->Lookup(key->key);
    if (!r.ok()) return Fail(r.status());
    result->Set(*std::move(r));
    return GPUTUNE_OK;
  });
}

void gputune_try_lookup(gputune_client* client, const gputune_key* key,
                        gputune_result* result) {
  (void)Guarded([&] {
    result->Set(client->client->TryLookup(key->key));
    return GPUTUNE_OK;
  });
}

gputune_code gputune_preload(gputune_client* client,
                             const gputune_key* const* keys, size_t count,
                             size_t* hits) {
  return Guarded([&] {
    if (auto c = NotNull(client, "client"); c != GPUTUNE_OK) return c;
    if (count > 0) {
      if (auto c = NotNull(keys, "keys"); c != GPUTUNE_OK) return c;
    }
    std::vector<v1::Key> list;
    list.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (keys[i] == nullptr) {
        return Fail(absl::StatusCode::kInvalidArgument,
                    "keys[" + std::to_string(i) + "] is NULL");
      }
      list.push_back(keys[i]->key);
    }
    absl::StatusOr<size_t> n = client->client->Preload(list);
    if (!n.ok()) return Fail(n.status());
    if (hits != nullptr) *hits = *n;
    return GPUTUNE_OK;
  });
}

void gputune_forget(gputune_client* client, const gputune_key* key) {
  (void)Guarded([&] {
    client->client->Forget(key->key);
    return GPUTUNE_OK;
  });
}
void gputune_forget_all(gputune_client* client) { client->client->ForgetAll(); }
size_t gputune_memo_size(const gputune_client* client) {
  return client->client->memo_size();
}

// --- Tuning ------------------------------------------------------------------

gputune_code gputune_tune_dense(gputune_client* client, const gputune_key* key,
                                int wait, gputune_result* result) {
  return Guarded([&] {
    if (client == nullptr || key == nullptr || result == nullptr) {
      return Fail(
          absl::StatusCode::kInvalidArgument,
          "gputune_tune_dense: client, key and result must not be NULL");
    }
    absl::StatusOr<v1::KeyStatus> s =
        client->client->TuneDense(key->key, wait != 0);
    if (!s.ok()) return Fail(s.status());
    result->Set(*std::move(s));
    return GPUTUNE_OK;
  });
}

// --- Operator calls ----------------------------------------------------------

gputune_code gputune_get_status_json(gputune_client* client, char** json) {
  return Guarded([&] {
    if (auto c = NotNull(json, "json"); c != GPUTUNE_OK) return c;
    *json = nullptr;
    if (auto c = NotNull(client, "client"); c != GPUTUNE_OK) return c;
    auto s = client->client->GetStatus();
    if (!s.ok()) return Fail(s.status());
    return gputune::c_api::ToJson(*s, json);
  });
}

gputune_code gputune_list_entries_json(gputune_client* client,
                                       const gputune_list_options* options,
                                       char** json) {
  return Guarded([&] {
    if (auto c = NotNull(json, "json"); c != GPUTUNE_OK) return c;
    *json = nullptr;
    if (auto c = NotNull(client, "client"); c != GPUTUNE_OK) return c;
    gputune_list_options o{};
    o.struct_size = sizeof(o);
    if (options != nullptr) {
      if (auto c = gputune::c_api::ReadSized(
              options, sizeof(gputune_list_options), "options", &o);
          c != GPUTUNE_OK) {
        return c;
      }
    }
    v1::ListEntriesRequest request;
    v1::EntryFilter* filter = request.mutable_filter();
    filter->set_op(Str(o.op));
    filter->set_phase(static_cast<v1::Phase>(o.phase));
    filter->set_role(Str(o.role));
    filter->set_state(static_cast<v1::KeyState>(o.state));
    request.set_page_size(o.page_size);
    request.set_page_token(Str(o.page_token));
    request.set_with_measurements(o.with_measurements != 0);
    auto s = client->client->ListEntries(request);
    if (!s.ok()) return Fail(s.status());
    return gputune::c_api::ToJson(*s, json);
  });
}

gputune_code gputune_get_entry_json(gputune_client* client,
                                    const gputune_key* key, char** json) {
  return Guarded([&] {
    if (auto c = NotNull(json, "json"); c != GPUTUNE_OK) return c;
    *json = nullptr;
    if (auto c = NotNull(client, "client"); c != GPUTUNE_OK) return c;
    if (auto c = NotNull(key, "key"); c != GPUTUNE_OK) return c;
    auto s = client->client->GetEntry(key->key);
    if (!s.ok()) return Fail(s.status());
    return gputune::c_api::ToJson(*s, json);
  });
}

void gputune_string_free(char* s) { std::free(s); }

}  // extern "C"
