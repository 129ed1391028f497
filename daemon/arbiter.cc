#include "daemon/arbiter.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/change_feed.h"
#include "daemon/metrics.h"
#include "proto/entry_summary.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"

namespace gputune {

Arbiter::Arbiter(const ArbiterOptions& options, const Clock* clock,
                 ClaimIdReserver reserver,
                 std::optional<std::string> fingerprint_digest)
    : options_(options),
      clock_(clock),
      reserver_(std::move(reserver)),
      fingerprint_digest_(std::move(fingerprint_digest)) {}

Arbiter::Verdict Arbiter::VerdictFor(bool fingerprint_matches,
                                     bool usable_when_stale,
                                     absl::string_view entry_candidate_set,
                                     absl::string_view candidate_set) {
  Verdict verdict;
  if (entry_candidate_set != candidate_set) {
    // Never usable: another candidate set may not even contain the kernel.
    verdict.stale_reason =
        fingerprint_matches
            ? absl::StrCat("tuned for candidate set '", entry_candidate_set,
                           "', asked for '", candidate_set, "'")
            : "measured on another device or software (fingerprint differs)";
  } else if (!fingerprint_matches) {
    verdict.stale_usable = usable_when_stale;
    verdict.stale_reason =
        usable_when_stale
            ? "measured on this device model with other software "
              "(fingerprint differs): usable until re-tuned"
            : "measured on another device or software (fingerprint differs)";
  }
  return verdict;
}

bool Arbiter::FingerprintMatches(const std::string& digest) const {
  return !fingerprint_digest_ || digest == *fingerprint_digest_;
}

bool Arbiter::UsableWhenStale(bool fingerprint_matches,
                              bool same_device_model) const {
  return !fingerprint_matches && same_device_model &&
         options_.stale_while_revalidate;
}

Arbiter::Verdict Arbiter::Judge(const v1::Entry& entry,
                                absl::string_view candidate_set) const {
  const bool matches =
      FingerprintMatches(FingerprintDigest(entry.fingerprint()));
  return VerdictFor(matches,
                    UsableWhenStale(matches, DeviceModel(entry.fingerprint()) ==
                                                 options_.device_model),
                    entry.key().candidate_set(), candidate_set);
}

bool Arbiter::LeaseLive(const Lease& lease, absl::Time now) const {
  return lease.recording || now < lease.deadline;
}

void Arbiter::ForgetEntryLocked(const std::string& key_id, const Slot& slot) {
  if (!slot.has_entry()) return;
  --entries_;
  if (!slot.fingerprint_matches) --stale_entries_;
  if (slot.usable_when_stale) {
    --stale_usable_entries_;
    uses_.erase(key_id);
  }
}

void Arbiter::SetEntryLocked(const std::string& key_id, std::string summary,
                             std::string candidate_set,
                             bool fingerprint_matches, bool usable_when_stale) {
  Slot& slot = slots_[key_id];
  ForgetEntryLocked(key_id, slot);
  slot.entry_summary = std::make_shared<const std::string>(std::move(summary));
  slot.entry_candidate_set =
      &*candidate_sets_.insert(std::move(candidate_set)).first;
  slot.fingerprint_matches = fingerprint_matches;
  slot.usable_when_stale = usable_when_stale;
  ++entries_;
  if (!slot.fingerprint_matches) ++stale_entries_;
  if (slot.usable_when_stale) {
    ++stale_usable_entries_;
    // Only dense keys are re-tuned by the daemon (a custom op name may not
    // be "dense_bf16", so the key id's prefix tells).
    if (absl::StartsWith(key_id, kDenseOp) && key_id.size() > kDenseOp.size() &&
        key_id[kDenseOp.size()] == '/') {
      uses_[key_id] = std::make_unique<UseCount>();
    }
  }
}

void Arbiter::SetEntryLocked(const std::string& key_id,
                             const v1::Entry& entry) {
  const bool matches =
      FingerprintMatches(FingerprintDigest(entry.fingerprint()));
  SetEntryLocked(key_id, SerializedEntrySummary(entry),
                 entry.key().candidate_set(), matches,
                 UsableWhenStale(matches, DeviceModel(entry.fingerprint()) ==
                                              options_.device_model));
}

void Arbiter::LoadSummary(const std::string& key_id, std::string summary,
                          std::string candidate_set,
                          const std::string& fingerprint_digest,
                          bool same_device_model) {
  absl::MutexLock lock(&mu_);
  const bool matches = FingerprintMatches(fingerprint_digest);
  SetEntryLocked(key_id, std::move(summary), std::move(candidate_set), matches,
                 UsableWhenStale(matches, same_device_model));
}

Arbiter::Found Arbiter::FindLocked(absl::string_view candidate_set,
                                   const Slot* slot, absl::Time now) const {
  Found found;
  if (slot == nullptr) return found;  // MISS
  Verdict verdict;
  if (slot->has_entry()) {
    verdict = VerdictFor(slot->fingerprint_matches, slot->usable_when_stale,
                         *slot->entry_candidate_set, candidate_set);
    if (verdict.stale_reason.empty()) {
      found.state = v1::KEY_STATE_HIT;
      found.entry = slot->entry_summary;
      return found;
    }
  }
  if (slot->lease && LeaseLive(*slot->lease, now)) {
    found.state = v1::KEY_STATE_PENDING;
    v1::ClaimInfo& claim = found.claim.emplace();
    claim.set_claim_id(slot->lease->claim_id);
    claim.set_holder(slot->lease->holder);
    *claim.mutable_lease_deadline() = ToProto(slot->lease->deadline);
    *claim.mutable_granted_at() = ToProto(slot->lease->granted_at);
  } else if (now < BackoffUntil(*slot)) {
    found.state = v1::KEY_STATE_BACKOFF;
    found.retry_after = BackoffUntil(*slot);
  } else if (slot->has_entry()) {
    found.state = v1::KEY_STATE_STALE;
  }
  // A stale-but-usable entry is served in PENDING and BACKOFF too: while
  // the key is re-tuned (or cools down after failed tunes) clients keep
  // running it.
  if (found.state == v1::KEY_STATE_STALE || verdict.stale_usable) {
    found.entry = slot->entry_summary;
    found.stale_reason = std::move(verdict.stale_reason);
    found.stale_usable = verdict.stale_usable;
  }
  return found;
}

v1::KeyStatus Arbiter::StatusOf(const v1::Key& key, Found found) {
  v1::KeyStatus status;
  *status.mutable_key() = key;
  status.set_state(found.state);
  // The summary was serialized by this daemon (or an earlier one: the store
  // is trusted), so it parses.
  if (found.entry) status.mutable_entry()->ParseFromString(*found.entry);
  if (found.claim) *status.mutable_claim() = std::move(*found.claim);
  if (found.state == v1::KEY_STATE_BACKOFF) {
    *status.mutable_retry_after() = ToProto(found.retry_after);
  }
  status.set_stale_reason(std::move(found.stale_reason));
  status.set_stale_usable(found.stale_usable);
  return status;
}

Arbiter::Found Arbiter::Find(const v1::Key& key) const {
  const std::string key_id = KeyId(key);
  const absl::Time now = clock_->Now();
  absl::ReaderMutexLock lock(&mu_);
  auto it = slots_.find(key_id);
  Found found = FindLocked(key.candidate_set(),
                           it == slots_.end() ? nullptr : &it->second, now);
  if (found.stale_usable) CountUseLocked(key_id);
  return found;
}

void Arbiter::CountUseLocked(absl::string_view key_id) const {
  auto it = uses_.find(key_id);
  if (it != uses_.end()) {
    it->second->lookups.fetch_add(1, std::memory_order_relaxed);
  }
}

template <typename IdOf, typename SetOf>
std::vector<Arbiter::Found> Arbiter::FindEach(size_t n, IdOf id_of,
                                              SetOf set_of) const {
  constexpr size_t kChunk = 256;  // keys per lock: writers wait little
  std::vector<Found> found(n);
  std::vector<std::string> buffers(std::min(n, kChunk));
  std::vector<absl::string_view> ids(std::min(n, kChunk));
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t m = std::min(kChunk, n - start);
    for (size_t i = 0; i < m; ++i) ids[i] = id_of(start + i, &buffers[i]);
    const absl::Time now = clock_->Now();
    absl::ReaderMutexLock lock(&mu_);
    // Each key's slot is fetched from memory while the next ones are
    // hashed: a large batch otherwise waits on one cache miss per key in
    // turn.
    for (size_t i = 0; i < m; ++i) slots_.prefetch(ids[i]);
    for (size_t i = 0; i < m; ++i) {
      auto it = slots_.find(ids[i]);
      found[start + i] = FindLocked(
          set_of(start + i), it == slots_.end() ? nullptr : &it->second, now);
      if (found[start + i].stale_usable) CountUseLocked(ids[i]);
    }
  }
  return found;
}

std::vector<Arbiter::Found> Arbiter::Find(
    absl::Span<const v1::Key* const> keys) const {
  return FindEach(
      keys.size(),
      [keys](size_t i, std::string* buffer) {
        buffer->clear();
        AppendKeyId(*keys[i], buffer);
        return absl::string_view(*buffer);
      },
      [keys](size_t i) { return absl::string_view(keys[i]->candidate_set()); });
}

std::vector<Arbiter::Found> Arbiter::FindIds(
    absl::Span<const std::string> key_ids,
    absl::string_view candidate_set) const {
  return FindEach(
      key_ids.size(),
      [key_ids](size_t i, std::string*) {
        return absl::string_view(key_ids[i]);
      },
      [candidate_set](size_t) { return candidate_set; });
}

v1::KeyStatus Arbiter::Lookup(const v1::Key& key) const {
  return StatusOf(key, Find(key));
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
                                                 absl::Duration ttl,
                                                 ClaimKind kind) {
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
        Lease{*id, key, std::string(holder), now, now + ttl, false, kind});
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
    if (auto fenced = fenced_.find(claim_id); fenced != fenced_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("claim ", claim_id, " was fenced: ", fenced->second,
                       "; Claim the key again"));
    }
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

absl::StatusOr<Arbiter::Slot*> Arbiter::ActionableClaimLocked(
    uint64_t claim_id, absl::Time now, ClaimKind caller) {
  absl::StatusOr<Slot*> slot = LiveClaimLocked(claim_id, now);
  if (!slot.ok()) return slot;
  const Lease& lease = *(*slot)->lease;
  if (lease.kind == ClaimKind::kStandIn) {
    // Not a grant: a client that Recorded with it would plant an entry
    // under another daemon's name (docs/architecture.md, "States with a
    // fleet").
    return absl::FailedPreconditionError(absl::StrCat(
        "claim ", claim_id, " is not a grant: it stands in here for ",
        lease.holder,
        ", which is tuning the key; wait for its entry (Watch or Lookup) and "
        "Claim the key again if it does not come"));
  }
  if (lease.kind != caller) {
    if (lease.kind == ClaimKind::kDaemon) {
      return absl::PermissionDeniedError(absl::StrCat(
          "claim ", claim_id,
          " is gputuned's own TuneDense job: only that job renews, records or "
          "abandons it (it ends by itself, at the latest at the job's time "
          "limit)"));
    }
    if (lease.kind == ClaimKind::kRedis) {
      return absl::PermissionDeniedError(absl::StrCat(
          "claim ", claim_id, " is held by a Redis front-door connection (",
          lease.holder,
          "): only that connection's SET records it, and it ends when the "
          "connection closes"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("claim ", claim_id, " is not the daemon's own claim"));
  }
  return slot;
}

bool Arbiter::Fence(uint64_t claim_id, std::string reason) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Slot*> found = LiveClaimLocked(claim_id, now);
    if (!found.ok()) return false;
    Slot& slot = **found;
    // A Record in flight is left to finish: the fleet refuses its publish.
    if (slot.lease->kind != ClaimKind::kClient || slot.lease->recording) {
      return false;
    }
    const std::string key_id = claims_[claim_id];
    claims_.erase(claim_id);
    slot.lease.reset();
    fenced_[claim_id] = std::move(reason);
    fenced_order_.push_back(claim_id);
    if (fenced_order_.size() > kMaxFenced) {
      fenced_.erase(fenced_order_.front());
      fenced_order_.pop_front();
    }
    CollectLocked(key_id, now, &notes);
    MaybeEraseSlotLocked(key_id);
  }
  Deliver(notes);
  return true;
}

absl::StatusOr<absl::Time> Arbiter::Renew(uint64_t claim_id, absl::Duration ttl,
                                          ClaimKind caller) {
  if (ttl == absl::ZeroDuration()) ttl = options_.default_ttl;
  if (ttl < options_.min_ttl || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl: must be ", absl::FormatDuration(options_.min_ttl),
                     "..", absl::FormatDuration(options_.max_ttl)));
  }
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slot*> slot = ActionableClaimLocked(claim_id, now, caller);
  if (!slot.ok()) return slot.status();
  (*slot)->lease->deadline = std::max((*slot)->lease->deadline, now + ttl);
  return (*slot)->lease->deadline;
}

absl::StatusOr<Arbiter::RecordTicket> Arbiter::BeginRecord(uint64_t claim_id,
                                                           ClaimKind caller) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slot*> slot = ActionableClaimLocked(claim_id, now, caller);
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
    std::string replaced = EntryCandidateSetLocked(ticket.key_id);
    SetEntryLocked(ticket.key_id, entry);
    PublishLocked(v1::CHANGE_KIND_RECORDED, ticket.key_id, std::move(replaced));
    Slot& slot = slots_[ticket.key_id];
    slot.lease.reset();
    if (slot.cooldown) slot.cooldown->abandons.clear();
    claims_.erase(ticket.claim_id);
    CollectLocked(ticket.key_id, now, &notes);
  }
  FlushFeed();
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

absl::StatusOr<Arbiter::AbandonResult> Arbiter::Abandon(uint64_t claim_id,
                                                        ClaimKind caller) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  AbandonResult result;
  v1::AbandonResponse& response = result.response;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Slot*> found = ActionableClaimLocked(claim_id, now, caller);
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
      std::string replaced = EntryCandidateSetLocked(key_id);
      SetEntryLocked(key_id, entry);
      PublishLocked(v1::CHANGE_KIND_RECORDED, key_id, std::move(replaced));
      // The entry a fleet stand-in waited for: it is no longer PENDING.
      Slot& slot = slots_[key_id];
      if (slot.lease && slot.lease->kind == ClaimKind::kStandIn &&
          slot.lease->key.candidate_set() == entry.key().candidate_set()) {
        claims_.erase(slot.lease->claim_id);
        slot.lease.reset();
      }
      CollectLocked(key_id, now, &notes);
    }
  }
  FlushFeed();
  Deliver(notes);
}

void Arbiter::Erase(const std::vector<std::string>& key_ids) {
  const absl::Time now = clock_->Now();
  std::vector<Notification> notes;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& key_id : key_ids) {
      auto it = slots_.find(key_id);
      if (it == slots_.end() || !it->second.has_entry()) continue;
      Slot& slot = it->second;
      PublishLocked(v1::CHANGE_KIND_DELETED, key_id, "");
      ForgetEntryLocked(key_id, slot);
      slot.entry_summary.reset();
      slot.entry_candidate_set = nullptr;
      CollectLocked(key_id, now, &notes);
      MaybeEraseSlotLocked(key_id);
    }
  }
  FlushFeed();
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
  stats.stale_usable_entries = stale_usable_entries_;
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

std::optional<Arbiter::Revalidation> Arbiter::NextRevalidation() {
  const absl::Time now = clock_->Now();
  absl::ReaderMutexLock lock(&mu_);
  const std::string* best_id = nullptr;
  UseCount* best = nullptr;
  uint64_t best_lookups = 0;
  for (const auto& [key_id, uses] : uses_) {
    if (uses->tried.load(std::memory_order_relaxed)) continue;
    const Slot& slot = slots_.at(key_id);
    if (slot.lease && LeaseLive(*slot.lease, now)) continue;  // being tuned
    const uint64_t lookups = uses->lookups.load(std::memory_order_relaxed);
    // Most used first; ties in key order, so the choice is reproducible.
    if (best == nullptr || lookups > best_lookups ||
        (lookups == best_lookups && key_id < *best_id)) {
      best_id = &key_id;
      best = uses.get();
      best_lookups = lookups;
    }
  }
  if (best == nullptr) return std::nullopt;
  // Under a reader lock two callers could pick the same key; the daemon has
  // one caller, and exchange keeps even two from both taking it.
  if (best->tried.exchange(true)) return std::nullopt;
  v1::Entry entry;
  // The summary was serialized by a daemon (the store is trusted).
  entry.ParseFromString(*slots_.at(*best_id).entry_summary);
  return Revalidation{entry.key(), best_lookups};
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
  if (!slot.has_entry() && !slot.lease &&
      (!slot.cooldown ||
       (slot.cooldown->abandons.empty() &&
        slot.cooldown->backoff_until == absl::InfinitePast()))) {
    slots_.erase(it);
  }
}

std::string Arbiter::EntryCandidateSetLocked(const std::string& key_id) const {
  auto it = slots_.find(key_id);
  if (it == slots_.end() || !it->second.has_entry()) return "";
  return *it->second.entry_candidate_set;
}

void Arbiter::PublishLocked(v1::ChangeKind kind, const std::string& key_id,
                            std::string replaced_candidate_set) {
  if (feed_ == nullptr) return;
  auto it = slots_.find(key_id);
  if (it == slots_.end()) return;
  feed_->Publish(kind, it->second.entry_summary,
                 std::move(replaced_candidate_set),
                 !it->second.fingerprint_matches);
}

void Arbiter::FlushFeed() const {
  if (feed_ != nullptr) feed_->Flush();
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
