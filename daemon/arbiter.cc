#include "daemon/arbiter.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/metrics.h"
#include "proto/entry_summary.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "proto/wire.h"

namespace gputune {

Arbiter::Arbiter(const ArbiterOptions& options, const Clock* clock,
                 ClaimIdReserver reserver,
                 std::optional<std::string> fingerprint_digest)
    : options_(options),
      clock_(clock),
      reserver_(std::move(reserver)),
      fingerprint_digest_(std::move(fingerprint_digest)) {}

std::string Arbiter::StaleReasonFor(bool fingerprint_matches,
                                    absl::string_view entry_candidate_set,
                                    absl::string_view candidate_set) {
  if (!fingerprint_matches) {
    return "measured on another device or software (fingerprint differs)";
  }
  if (entry_candidate_set != candidate_set) {
    return absl::StrCat("tuned for candidate set '", entry_candidate_set,
                        "', asked for '", candidate_set, "'");
  }
  return "";
}

std::string Arbiter::StaleReason(const v1::Entry& entry,
                                 absl::string_view candidate_set,
                                 const std::optional<std::string>& digest) {
  return StaleReasonFor(
      !digest || FingerprintDigest(entry.fingerprint()) == *digest,
      entry.key().candidate_set(), candidate_set);
}

bool Arbiter::LeaseLive(const Lease& lease, absl::Time now) const {
  return lease.recording || now < lease.deadline;
}

namespace {

// Where the key (its bytes, and its field) and the execution field of a
// serialized entry summary end: protobuf writes them first and second
// (fields in number order). *key_end is 0 when the summary does not start
// with its key; *execution_end is 0 when its execution field does not follow
// right after.
void FindKeyAndExecution(absl::string_view summary, uint8_t* key_begin,
                         uint32_t* key_end, uint32_t* execution_end) {
  *key_begin = 0;
  *key_end = *execution_end = 0;
  wire::Reader r(summary);
  auto end_of = [&](const wire::Reader& r) {
    return static_cast<uint32_t>(r.bytes().data() + r.bytes().size() -
                                 summary.data());
  };
  if (!r.Next() || r.field() != v1::Entry::kKeyFieldNumber ||
      r.type() != wire::WireType::kBytes) {
    return;
  }
  *key_begin = static_cast<uint8_t>(r.bytes().data() - summary.data());
  *key_end = end_of(r);
  if (r.Next() && r.field() == v1::Entry::kExecutionFieldNumber &&
      r.type() == wire::WireType::kBytes) {
    *execution_end = end_of(r);
  }
}

}  // namespace

void Arbiter::SetEntryLocked(const std::string& key_id, std::string summary,
                             std::string candidate_set,
                             bool fingerprint_matches) {
  Slot& slot = slots_[key_id];
  if (slot.has_entry) {
    --entries_;
    if (!slot.fingerprint_matches) --stale_entries_;
    UnindexKeyBytesLocked(slot);
  }
  slot.entry_summary = std::move(summary);
  FindKeyAndExecution(slot.entry_summary, &slot.key_begin, &slot.key_end,
                      &slot.execution_end);
  slot.execution_hash =
      slot.execution_end == 0 ? 0 : absl::HashOf(slot.ExecutionField());
  slot.entry_candidate_set =
      &*candidate_sets_.insert(std::move(candidate_set)).first;
  slot.has_entry = true;
  slot.fingerprint_matches = fingerprint_matches;
  ++entries_;
  if (!slot.fingerprint_matches) ++stale_entries_;
  IndexKeyBytesLocked(slot);
}

void Arbiter::IndexKeyBytesLocked(const Slot& slot) {
  if (slot.key_end != 0) by_key_bytes_.insert(&slot);
}

void Arbiter::UnindexKeyBytesLocked(const Slot& slot) {
  if (slot.key_end == 0) return;
  // Only this slot's own (no two entries' keys have equal bytes, but a
  // damaged store might say otherwise).
  auto it = by_key_bytes_.find(&slot);
  if (it != by_key_bytes_.end() && *it == &slot) by_key_bytes_.erase(it);
}

void Arbiter::SetEntryLocked(const std::string& key_id,
                             const v1::Entry& entry) {
  SetEntryLocked(
      key_id, SerializedEntrySummary(entry), entry.key().candidate_set(),
      !fingerprint_digest_ ||
          FingerprintDigest(entry.fingerprint()) == *fingerprint_digest_);
}

void Arbiter::LoadSummary(const std::string& key_id, std::string summary,
                          std::string candidate_set,
                          const std::string& fingerprint_digest) {
  absl::MutexLock lock(&mu_);
  SetEntryLocked(
      key_id, std::move(summary), std::move(candidate_set),
      !fingerprint_digest_ || fingerprint_digest == *fingerprint_digest_);
}

v1::KeyStatus Arbiter::StatusLocked(const v1::Key& key, const Slot* slot,
                                    absl::Time now) const {
  v1::KeyStatus status;
  *status.mutable_key() = key;
  std::string stale_reason;
  if (slot && slot->has_entry) {
    stale_reason =
        StaleReasonFor(slot->fingerprint_matches, *slot->entry_candidate_set,
                       key.candidate_set());
  }
  if (slot && slot->has_entry && stale_reason.empty()) {
    status.set_state(v1::KEY_STATE_HIT);
    status.mutable_entry()->ParseFromString(slot->entry_summary);
    return status;
  }
  if (slot && slot->lease && LeaseLive(*slot->lease, now)) {
    status.set_state(v1::KEY_STATE_PENDING);
    v1::ClaimInfo* claim = status.mutable_claim();
    claim->set_claim_id(slot->lease->claim_id);
    claim->set_holder(slot->lease->holder);
    *claim->mutable_lease_deadline() = ToProto(slot->lease->deadline);
    *claim->mutable_granted_at() = ToProto(slot->lease->granted_at);
    return status;
  }
  if (slot && now < BackoffUntil(*slot)) {
    status.set_state(v1::KEY_STATE_BACKOFF);
    *status.mutable_retry_after() = ToProto(BackoffUntil(*slot));
    return status;
  }
  if (slot && slot->has_entry) {
    status.set_state(v1::KEY_STATE_STALE);
    status.mutable_entry()->ParseFromString(slot->entry_summary);
    status.set_stale_reason(std::move(stale_reason));
    return status;
  }
  status.set_state(v1::KEY_STATE_MISS);
  return status;
}

v1::KeyStatus Arbiter::Lookup(const v1::Key& key) const {
  const std::string key_id = KeyId(key);
  const absl::Time now = clock_->Now();
  absl::ReaderMutexLock lock(&mu_);
  auto it = slots_.find(key_id);
  return StatusLocked(key, it == slots_.end() ? nullptr : &it->second, now);
}

const std::string* Arbiter::HitSummaryLocked(absl::string_view candidate_set,
                                             const Slot* slot) {
  if (slot && slot->has_entry && slot->fingerprint_matches &&
      *slot->entry_candidate_set == candidate_set) {
    return &slot->entry_summary;
  }
  return nullptr;
}

// The execution fields written in full so far, by their bytes' hash (kept
// in each slot): where each lies in the answer and the position of its
// status.
// Entries are found by hash and confirmed by comparing bytes; on a
// collision the execution is simply written again.
class Arbiter::WrittenExecutions {
 public:
  // The position of the status that wrote `execution` (whose hash is
  // `hash`) in full, or 0.
  uint32_t Find(size_t hash, absl::string_view execution,
                const std::string& out) const {
    auto it = written_.find(hash);
    if (it == written_.end() || it->second.size != execution.size() ||
        out.compare(it->second.offset, it->second.size, execution.data(),
                    execution.size()) != 0) {
      return 0;
    }
    return it->second.position;
  }
  // Status `position` wrote `execution` in full at `offset` of the answer.
  void Add(size_t hash, absl::string_view execution, size_t offset,
           uint32_t position) {
    written_.try_emplace(hash, Written{offset, execution.size(), position});
  }

 private:
  struct Written {
    size_t offset;
    size_t size;
    uint32_t position;
  };
  absl::flat_hash_map<size_t, Written> written_;
};

void Arbiter::AppendLookupLocked(const Ask& ask, const Slot* slot,
                                 const std::string* hit_summary, absl::Time now,
                                 uint32_t field, const AnswerForm& form,
                                 uint32_t position, WrittenExecutions* written,
                                 std::string* out) const {
  // A HIT or the MISS of a key the index has never seen, as StatusLocked
  // would build it, written field by field in field-number order as
  // protobuf serializes it.
  const std::string* summary = hit_summary;
  if (summary != nullptr || slot == nullptr) {
    // The entry goes in up to two pieces: from its summary, less the key
    // (omit_keys), and less the execution field when an earlier status
    // carried the same one (share_executions).
    absl::string_view before, after;
    absl::string_view execution;  // the field, to share or written in full
    uint32_t execution_ref = 0;
    if (summary != nullptr) {
      const absl::string_view whole(*summary);
      before = form.omit_keys ? whole.substr(slot->key_end) : whole;
      if (written != nullptr && slot->execution_end != 0) {
        execution = slot->ExecutionField();
        execution_ref = written->Find(slot->execution_hash, execution, *out);
        if (execution_ref != 0) {
          before = form.omit_keys ? absl::string_view()
                                  : whole.substr(0, slot->key_end);
          after = whole.substr(slot->execution_end);
        }
      }
    }
    const size_t entry_size = before.size() + after.size();
    const size_t size =
        (form.omit_keys ? 0
                        : wire::BytesFieldSize(v1::KeyStatus::kKeyFieldNumber,
                                               ask.bytes.size())) +
        2 +  // the state: a one-byte tag and a one-byte value
        (summary == nullptr
             ? 0
             : wire::BytesFieldSize(v1::KeyStatus::kEntryFieldNumber,
                                    entry_size)) +
        (execution_ref == 0
             ? 0
             : wire::VarintFieldSize(v1::KeyStatus::kExecutionRefFieldNumber,
                                     execution_ref));
    // Sized once, written through a pointer.
    const size_t start = out->size();
    out->resize(start + wire::BytesFieldSize(field, size));
    char* at = wire::WriteBytesFieldHeader(field, size, out->data() + start);
    if (!form.omit_keys) {
      at = wire::WriteBytesField(v1::KeyStatus::kKeyFieldNumber, ask.bytes, at);
    }
    at = wire::WriteVarintField(
        v1::KeyStatus::kStateFieldNumber,
        summary == nullptr ? v1::KEY_STATE_MISS : v1::KEY_STATE_HIT, at);
    if (summary != nullptr) {
      at = wire::WriteBytesFieldHeader(v1::KeyStatus::kEntryFieldNumber,
                                       entry_size, at);
      const size_t entry_offset = static_cast<size_t>(at - out->data());
      memcpy(at, before.data(), before.size());
      at += before.size();
      memcpy(at, after.data(), after.size());
      at += after.size();
      if (execution_ref != 0) {
        wire::WriteVarintField(v1::KeyStatus::kExecutionRefFieldNumber,
                               execution_ref, at);
      } else if (!execution.empty()) {  // written in full, within `before`
        written->Add(slot->execution_hash, execution,
                     entry_offset +
                         static_cast<size_t>(execution.data() - before.data()),
                     position);
      }
    }
    return;
  }
  // PENDING, BACKOFF, STALE: rarer, and built as messages.
  v1::KeyStatus status = StatusLocked(KeyOf(ask.key), slot, now);
  if (form.omit_keys) status.clear_key();
  thread_local std::string bytes;
  bytes.clear();
  status.AppendToString(&bytes);
  wire::AppendBytesField(field, bytes, out);
}

void Arbiter::PrefetchSlot(const Slot* slot) {
  if (slot == nullptr) return;
  const char* memory = reinterpret_cast<const char*>(slot);
  __builtin_prefetch(memory);
  __builtin_prefetch(memory + sizeof(Slot) - 1);
  const std::string& summary = slot->entry_summary;
  for (size_t line = 0; line < std::min<size_t>(summary.size(), 256);
       line += 64) {
    __builtin_prefetch(summary.data() + line);
  }
}

absl::Status Arbiter::AppendLookups(absl::Span<Ask> asks, uint32_t field,
                                    const AnswerForm& form, ReadKeyFn read_key,
                                    std::string* out) const {
  constexpr size_t kChunk = 256;  // keys per lock: writers wait little
  // Keys whose index slots and summaries are fetched from memory together:
  // one at a time, a batch of 10,000 waits on three cache misses per key in
  // turn (the bytes table's slot, the summary it compares with, the Slot);
  // a key not found there, on as many more in the id index (its slot, the
  // node, the id it compares with).
  constexpr size_t kGroup = 16;
  constexpr int kGroupsPastBytes = 3;
  int groups_past_bytes = 0;
  thread_local std::string ids;
  size_t id_end[kGroup];
  const Slot* slots[kGroup];
  const std::string* hits[kGroup];
  std::optional<WrittenExecutions> written;
  if (form.share_executions) written.emplace();
  for (size_t start = 0; start < asks.size(); start += kChunk) {
    const size_t chunk_end = std::min(asks.size(), start + kChunk);
    const absl::Time now = clock_->Now();
    absl::ReaderMutexLock lock(&mu_);
    for (size_t group = start; group < chunk_end; group += kGroup) {
      const size_t n = std::min(kGroup, chunk_end - group);
      Ask* const ask = &asks[group];
      // First by the keys' bytes: a HIT's key, as it was recorded. After a
      // group that found none there, the next kGroupsPastBytes groups skip
      // this and go by their ids (which find HITs too): a batch of misses,
      // such as a first Preload against an empty cache, then pays for this
      // probe in one group of four, and a batch with HITs keeps it.
      std::fill_n(slots, n, nullptr);
      if (groups_past_bytes > 0) {
        --groups_past_bytes;
      } else {
        HashedBytes hashed[kGroup];
        for (size_t i = 0; i < n; ++i) {
          hashed[i] = HashedBytes::Of(ask[i].bytes);
          by_key_bytes_.prefetch(hashed[i]);
        }
        bool found = false;
        for (size_t i = 0; i < n; ++i) {
          auto it = by_key_bytes_.find(hashed[i]);
          if (it == by_key_bytes_.end()) continue;
          slots[i] = *it;
          found = true;
          PrefetchSlot(slots[i]);
        }
        if (!found) groups_past_bytes = kGroupsPastBytes;
      }
      for (size_t i = 0; i < n; ++i) {
        hits[i] = slots[i] != nullptr && slots[i]->fingerprint_matches
                      ? &slots[i]->entry_summary
                      : nullptr;
      }
      // Then the others, read and checked, by their ids.
      ids.clear();
      for (size_t i = 0; i < n; ++i) {
        if (hits[i] == nullptr) {
          if (absl::Status s = read_key(group + i, &ask[i]); !s.ok()) return s;
          AppendKeyId(ask[i].key, &ids);
        }
        id_end[i] = ids.size();
      }
      auto id = [&](size_t i) {
        const size_t begin = i == 0 ? 0 : id_end[i - 1];
        return absl::string_view(ids).substr(begin, id_end[i] - begin);
      };
      for (size_t i = 0; i < n; ++i) {
        if (hits[i] == nullptr) slots_.prefetch(id(i));
      }
      for (size_t i = 0; i < n; ++i) {
        if (hits[i] != nullptr) continue;
        auto it = slots_.find(id(i));
        slots[i] = it == slots_.end() ? nullptr : &it->second;
        PrefetchSlot(slots[i]);
      }
      for (size_t i = 0; i < n; ++i) {
        if (hits[i] != nullptr) continue;
        hits[i] = HitSummaryLocked(ask[i].key.candidate_set, slots[i]);
      }
      for (size_t i = 0; i < n; ++i) {
        const size_t position = form.first_status + group + i + 1;
        AppendLookupLocked(ask[i], slots[i], hits[i], now, field, form,
                           static_cast<uint32_t>(position),
                           written ? &*written : nullptr, out);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Arbiter::NextClaimIdLocked() {
  if (next_claim_id_ == claim_id_limit_) {
    absl::StatusOr<uint64_t> first = reserver_(options_.claim_id_block);
    if (!first.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot reserve claim ids: ", first.status().message()));
    }
    next_claim_id_ = *first;
    claim_id_limit_ = *first + options_.claim_id_block;
  }
  return next_claim_id_++;
}

absl::StatusOr<v1::ClaimResponse> Arbiter::Claim(const v1::Key& key,
                                                 absl::string_view holder,
                                                 absl::Duration ttl) {
  if (ttl == absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl < options_.min_ttl || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl: must be ", absl::FormatDuration(options_.min_ttl),
                     "..", absl::FormatDuration(options_.max_ttl), ", got ",
                     absl::FormatDuration(ttl)));
  }
  const std::string key_id = KeyId(key);
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  v1::ClaimResponse response;
  {
    absl::MutexLock lock(&mu_);
    auto it = slots_.find(key_id);
    const v1::KeyStatus status =
        StatusLocked(key, it == slots_.end() ? nullptr : &it->second, now);
    switch (status.state()) {
      case v1::KEY_STATE_HIT:
        response.set_outcome(v1::CLAIM_OUTCOME_HIT);
        *response.mutable_entry() = status.entry();
        return response;
      case v1::KEY_STATE_PENDING:
        response.set_outcome(v1::CLAIM_OUTCOME_PENDING);
        *response.mutable_claim() = status.claim();
        return response;
      case v1::KEY_STATE_BACKOFF:
        response.set_outcome(v1::CLAIM_OUTCOME_BACKOFF);
        *response.mutable_retry_after() = status.retry_after();
        return response;
      default:
        break;  // MISS, STALE, or an expired lease: grant.
    }
    absl::StatusOr<uint64_t> id = NextClaimIdLocked();
    if (!id.ok()) return id.status();
    Slot& slot = slots_[key_id];
    if (slot.lease) claims_.erase(slot.lease->claim_id);  // expired: superseded
    slot.lease = std::make_unique<Lease>(
        Lease{*id, key, std::string(holder), now, now + ttl, false});
    claims_[*id] = key_id;
    response.set_outcome(v1::CLAIM_OUTCOME_GRANTED);
    v1::ClaimInfo* claim = response.mutable_claim();
    claim->set_claim_id(*id);
    claim->set_holder(std::string(holder));
    *claim->mutable_lease_deadline() = ToProto(now + ttl);
    *claim->mutable_granted_at() = ToProto(now);
    CollectLocked(key_id, now, &notes);
  }
  Deliver(notes);
  return response;
}

absl::StatusOr<Arbiter::Slot*> Arbiter::LiveClaimLocked(uint64_t claim_id,
                                                        absl::Time now) {
  auto it = claims_.find(claim_id);
  if (it == claims_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "claim ", claim_id,
        " is not live (expired and taken over, released, or from before a "
        "daemon restart): claim the key again"));
  }
  Slot& slot = slots_[it->second];
  if (!LeaseLive(*slot.lease, now)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "claim ", claim_id, " expired at ",
        absl::FormatTime(slot.lease->deadline),
        ": renew leases before they run out, then claim the key again"));
  }
  return &slot;
}

absl::StatusOr<absl::Time> Arbiter::Renew(uint64_t claim_id,
                                          absl::Duration ttl) {
  if (ttl == absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl < options_.min_ttl || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl: must be ", absl::FormatDuration(options_.min_ttl),
                     "..", absl::FormatDuration(options_.max_ttl)));
  }
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slot*> slot = LiveClaimLocked(claim_id, now);
  if (!slot.ok()) return slot.status();
  (*slot)->lease->deadline = std::max((*slot)->lease->deadline, now + ttl);
  return (*slot)->lease->deadline;
}

absl::StatusOr<Arbiter::RecordTicket> Arbiter::BeginRecord(uint64_t claim_id) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slot*> slot = LiveClaimLocked(claim_id, now);
  if (!slot.ok()) return slot.status();
  Lease& lease = *(*slot)->lease;
  if (lease.recording) {
    return absl::FailedPreconditionError(
        absl::StrCat("claim ", claim_id, " is already being recorded"));
  }
  lease.recording = true;
  return RecordTicket{claim_id, claims_[claim_id], lease.key, lease.holder};
}

void Arbiter::CommitRecord(const RecordTicket& ticket, const v1::Entry& entry) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  {
    absl::MutexLock lock(&mu_);
    SetEntryLocked(ticket.key_id, entry);
    Slot& slot = slots_[ticket.key_id];
    slot.lease.reset();
    if (slot.cooldown) slot.cooldown->abandons.clear();
    claims_.erase(ticket.claim_id);
    CollectLocked(ticket.key_id, now, &notes);
  }
  Deliver(notes);
}

void Arbiter::CancelRecord(const RecordTicket& ticket) {
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(ticket.key_id);
  if (it != slots_.end() && it->second.lease &&
      it->second.lease->claim_id == ticket.claim_id) {
    it->second.lease->recording = false;
  }
}

absl::StatusOr<Arbiter::AbandonResult> Arbiter::Abandon(uint64_t claim_id) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  AbandonResult result;
  v1::AbandonResponse& response = result.response;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Slot*> found = LiveClaimLocked(claim_id, now);
    if (!found.ok()) return found.status();
    Slot& slot = **found;
    if (slot.lease->recording) {
      return absl::FailedPreconditionError(absl::StrCat(
          "claim ", claim_id, " is being recorded and cannot be abandoned"));
    }
    const std::string key_id = claims_[claim_id];
    claims_.erase(claim_id);
    result.key = std::move(slot.lease->key);
    slot.lease.reset();
    if (!slot.cooldown) slot.cooldown = std::make_unique<Cooldown>();
    Cooldown& cooldown = *slot.cooldown;
    std::erase_if(cooldown.abandons, [&](absl::Time t) {
      return t <= now - options_.backoff_window;
    });
    cooldown.abandons.push_back(now);
    if (static_cast<int>(cooldown.abandons.size()) >=
        options_.backoff_abandons) {
      cooldown.backoff_until = now + options_.backoff_cooldown;
      backoff_keys_.insert(key_id);
      if (options_.metrics) options_.metrics->BackoffEntered();
      cooldown.abandons.clear();
      response.set_state(v1::KEY_STATE_BACKOFF);
      *response.mutable_retry_after() = ToProto(cooldown.backoff_until);
    } else {
      response.set_state(v1::KEY_STATE_MISS);
    }
    CollectLocked(key_id, now, &notes);
  }
  Deliver(notes);
  return result;
}

void Arbiter::Install(const std::vector<v1::Entry>& entries) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  {
    absl::MutexLock lock(&mu_);
    for (const v1::Entry& entry : entries) {
      const std::string key_id = KeyId(entry.key());
      SetEntryLocked(key_id, entry);
      CollectLocked(key_id, now, &notes);
    }
  }
  Deliver(notes);
}

void Arbiter::Erase(const std::vector<std::string>& key_ids) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& key_id : key_ids) {
      auto it = slots_.find(key_id);
      if (it == slots_.end() || !it->second.has_entry) continue;
      Slot& slot = it->second;
      --entries_;
      if (!slot.fingerprint_matches) --stale_entries_;
      UnindexKeyBytesLocked(slot);
      slot.has_entry = false;
      slot.entry_summary.clear();
      slot.key_begin = 0;  // nothing left to cut
      slot.key_end = slot.execution_end = 0;
      slot.execution_hash = 0;
      slot.entry_candidate_set = nullptr;
      CollectLocked(key_id, now, &notes);
      MaybeEraseSlotLocked(key_id);
    }
  }
  Deliver(notes);
}

uint64_t Arbiter::Watch(const v1::Key& key, WatchFn fn) {
  const std::string key_id = KeyId(key);
  const absl::Time now = clock_->Now();
  auto watcher = std::make_shared<Watcher>();
  std::vector<Notification> first;
  {
    absl::MutexLock lock(&mu_);
    watcher->id = next_watch_id_++;
    watcher->key = key;
    watcher->fn = std::move(fn);
    watchers_[key_id].push_back(watcher);
    watch_keys_[watcher->id] = key_id;
    auto it = slots_.find(key_id);
    first.push_back(
        {watcher,
         StatusLocked(key, it == slots_.end() ? nullptr : &it->second, now),
         ++change_seq_});
  }
  Deliver(first);
  return watcher->id;
}

void Arbiter::Unwatch(uint64_t watch_id) {
  absl::MutexLock lock(&mu_);
  auto it = watch_keys_.find(watch_id);
  if (it == watch_keys_.end()) return;
  auto list = watchers_.find(it->second);
  if (list != watchers_.end()) {
    std::erase_if(list->second,
                  [&](const auto& w) { return w->id == watch_id; });
    if (list->second.empty()) watchers_.erase(list);
  }
  watch_keys_.erase(it);
}

void Arbiter::Sweep() {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> touched;
    for (auto it = claims_.begin(); it != claims_.end();) {
      Slot& slot = slots_[it->second];
      if (!LeaseLive(*slot.lease, now)) {
        touched.push_back(it->second);
        if (options_.metrics) options_.metrics->ClaimExpired();
        slot.lease.reset();
        claims_.erase(it++);
      } else {
        ++it;
      }
    }
    // Only keys in BACKOFF, not every entry: the sweep holds the lock that
    // lookups need.
    for (auto it = backoff_keys_.begin(); it != backoff_keys_.end();) {
      Slot& slot = slots_[*it];
      if (BackoffUntil(slot) <= now) {
        if (slot.cooldown) {
          slot.cooldown->backoff_until = absl::InfinitePast();
          if (slot.cooldown->abandons.empty()) slot.cooldown.reset();
        }
        touched.push_back(*it);
        backoff_keys_.erase(it++);
      } else {
        ++it;
      }
    }
    for (const std::string& key_id : touched) {
      CollectLocked(key_id, now, &notes);
      MaybeEraseSlotLocked(key_id);
    }
  }
  Deliver(notes);
}

Arbiter::Stats Arbiter::GetStats() const {
  const absl::Time now = clock_->Now();
  Stats stats;
  absl::ReaderMutexLock lock(&mu_);
  stats.entries = entries_;
  stats.stale_entries = stale_entries_;
  for (const auto& [id, key_id] : claims_) {
    const Slot& slot = slots_.at(key_id);
    if (!LeaseLive(*slot.lease, now)) continue;
    v1::ClaimInfo info;
    info.set_claim_id(id);
    info.set_holder(slot.lease->holder);
    *info.mutable_lease_deadline() = ToProto(slot.lease->deadline);
    *info.mutable_granted_at() = ToProto(slot.lease->granted_at);
    stats.claims.emplace_back(slot.lease->key, std::move(info));
  }
  std::sort(stats.claims.begin(), stats.claims.end(),
            [](const auto& a, const auto& b) {
              return a.second.claim_id() < b.second.claim_id();
            });
  for (const std::string& key_id : backoff_keys_) {
    if (now < BackoffUntil(slots_.at(key_id))) ++stats.backoff_keys;
  }
  return stats;
}

void Arbiter::CollectLocked(const std::string& key_id, absl::Time now,
                            std::vector<Notification>* out) const {
  auto list = watchers_.find(key_id);
  if (list == watchers_.end()) return;
  auto it = slots_.find(key_id);
  const Slot* slot = it == slots_.end() ? nullptr : &it->second;
  const uint64_t seq = ++change_seq_;
  for (const auto& watcher : list->second) {
    out->push_back({watcher, StatusLocked(watcher->key, slot, now), seq});
  }
}

void Arbiter::MaybeEraseSlotLocked(const std::string& key_id) {
  auto it = slots_.find(key_id);
  if (it == slots_.end()) return;
  const Slot& slot = it->second;
  if (!slot.has_entry && !slot.lease &&
      (!slot.cooldown ||
       (slot.cooldown->abandons.empty() &&
        slot.cooldown->backoff_until == absl::InfinitePast()))) {
    slots_.erase(it);
  }
}

void Arbiter::Deliver(const std::vector<Notification>& notes) {
  for (const Notification& note : notes) {
    absl::MutexLock lock(&note.watcher->deliver_mu);
    if (note.seq <= note.watcher->delivered_seq) continue;
    note.watcher->delivered_seq = note.seq;
    note.watcher->fn(note.status);
  }
}

}  // namespace gputune
