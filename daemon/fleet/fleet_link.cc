#include "daemon/fleet/fleet_link.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "proto/validation.h"
#include "spdlog/spdlog.h"

namespace gputune::fleet {
namespace {

using storage::Connection;
using storage::Statement;

constexpr char kLocalTables[] = R"sql(
CREATE TABLE IF NOT EXISTS fleet_outbox (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  key_id        TEXT NOT NULL UNIQUE,
  candidate_set TEXT NOT NULL,
  fence         INTEGER NOT NULL,
  entry         BLOB NOT NULL,
  queued_at     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS fleet_state (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
)sql";

// Feed rows adopted per transaction (and held in memory at once): 350 keeps
// a joining daemon of a 100,000-entry fleet under 64 MiB and its catch-up
// under 5 s (docs/performance.md).
constexpr int kFeedPage = 350;
// Outbox rows read per pass.
constexpr int kOutboxPage = 256;
// Times PostgreSQL may refuse one row's data (tried alone, with backoff)
// before the row leaves the outbox.
constexpr int kMaxRefusals = 5;

absl::Status SetState(Connection& db, const std::string& name,
                      const std::string& value) {
  absl::StatusOr<Statement> st = db.Prepare(
      "INSERT OR REPLACE INTO fleet_state (name, value) VALUES (?1, ?2)");
  if (!st.ok()) return st.status();
  st->BindText(1, name);
  st->BindText(2, value);
  return st->Run();
}

absl::StatusOr<std::string> GetState(Connection& db, const std::string& name) {
  absl::StatusOr<Statement> st =
      db.Prepare("SELECT value FROM fleet_state WHERE name = ?1");
  if (!st.ok()) return st.status();
  st->BindText(1, name);
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  return *row ? st->ColumnText(0) : std::string();
}

// The host and GPU are what the holder wrote of itself; the role is what
// PostgreSQL vouches for.
std::string HolderText(const FleetConnection::ClaimResult& held) {
  return absl::StrCat("fleet: ", held.holder.host, " ", held.holder.gpu,
                      " (fleet claim ", held.fence,
                      held.holder_role.empty()
                          ? ""
                          : absl::StrCat(" of role ", held.holder_role),
                      ")");
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace

FleetIdentity MakeIdentity(const v1::Fingerprint& fingerprint,
                           const std::string& device) {
  FleetIdentity id;
  id.host = Hostname();
  id.gpu = fingerprint.device_uuid().empty()
               ? absl::StrCat(fingerprint.device_name(), " #", device)
               : absl::StrCat(fingerprint.device_name(), " ",
                              fingerprint.device_uuid());
  std::random_device random;
  id.instance = absl::StrFormat("%s/%d/%08x", id.host, getpid(), random());
  return id;
}

FleetLink::FleetLink(const FleetOptions& options, FleetIdentity me,
                     std::string fingerprint_digest, storage::TuneStore* store,
                     Arbiter* arbiter, const Clock* clock)
    : options_(options),
      me_(std::move(me)),
      fingerprint_(std::move(fingerprint_digest)),
      target_(RedactConnInfo(options.conninfo)),
      store_(store),
      arbiter_(arbiter),
      clock_(clock),
      claims_backoff_(options.retry_min) {}

absl::StatusOr<std::unique_ptr<FleetLink>> FleetLink::Create(
    const FleetOptions& options, FleetIdentity me,
    std::string fingerprint_digest, storage::TuneStore* store, Arbiter* arbiter,
    const Clock* clock) {
  std::unique_ptr<FleetLink> link(new FleetLink(options, std::move(me),
                                                std::move(fingerprint_digest),
                                                store, arbiter, clock));
  int64_t depth = 0;
  uint64_t feed_seq = 0;
  absl::Status s = store->Transact([&](Connection& db) -> absl::Status {
    if (auto s = db.Exec(kLocalTables); !s.ok()) return s;
    absl::StatusOr<int64_t> n =
        db.QueryInt("SELECT COUNT(*) FROM fleet_outbox");
    if (!n.ok()) return n.status();
    depth = *n;
    absl::StatusOr<std::string> seq = GetState(db, "feed_seq");
    if (!seq.ok()) return seq.status();
    if (!seq->empty()) (void)absl::SimpleAtoi(*seq, &feed_seq);
    return absl::OkStatus();
  });
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("preparing the fleet outbox: ", s.message()));
  }
  absl::MutexLock lock(&link->mu_);
  link->outbox_depth_ = static_cast<uint64_t>(depth);
  link->feed_seq_ = feed_seq;
  return link;
}

FleetLink::~FleetLink() { Stop(); }

void FleetLink::Start() {
  if (started_) return;
  started_ = true;
  if (pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    wake_fds_[0] = wake_fds_[1] = -1;
  }
  spdlog::info(
      "fleet: linking to {} as {} ({}), fingerprint {}; {} records in the "
      "outbox",
      target_, me_.instance, me_.gpu, fingerprint_, [&] {
        absl::MutexLock lock(&mu_);
        return outbox_depth_;
      }());
  {
    absl::MutexLock lock(&mu_);
    claims_ = std::make_unique<SerialExecutor>();
  }
  follower_ = std::thread([this] { FollowerLoop(); });
  publisher_ = std::thread([this] { PublisherLoop(); });
  keeper_ = std::thread([this] { KeeperLoop(); });
}

void FleetLink::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (wake_fds_[1] >= 0) (void)!write(wake_fds_[1], "x", 1);
  for (std::thread* t : {&follower_, &publisher_, &keeper_}) {
    if (t->joinable()) t->join();
  }
  for (int& fd : wake_fds_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  std::unique_ptr<SerialExecutor> claims;
  {
    absl::MutexLock lock(&mu_);
    claims = std::move(claims_);
  }
  claims.reset();  // answers what was queued, locally
  absl::MutexLock lock(&claim_mu_);
  claim_conn_.reset();
}

bool FleetLink::Nap(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

void FleetLink::SetConnected(bool connected, const std::string& error) {
  absl::MutexLock lock(&mu_);
  if (connected && !connected_) {
    spdlog::info("fleet: connected to {}, following fingerprint {} from {}",
                 target_, fingerprint_, feed_seq_);
  } else if (!connected && (connected_ || error != error_)) {
    spdlog::warn(
        "fleet: {} unreachable ({}): serving and tuning locally; Records "
        "wait in the outbox",
        target_, error);
  }
  connected_ = connected;
  error_ = error;
  if (!connected) schema_ok_ = false;
}

absl::StatusOr<std::unique_ptr<FleetConnection>> FleetLink::Connect(
    absl::Duration statement_timeout) {
  return FleetConnection::Connect(options_.conninfo, statement_timeout);
}

// ---------------------------------------------------------------------------
// Claims.

// The answer to a Claim decided after its caller's deadline.
absl::Status TooLate(const v1::Key& key) {
  return absl::DeadlineExceededError(absl::StrCat(
      "the Claim of ", KeyText(key),
      " passed its deadline while it waited for the fleet: nothing was "
      "granted; Claim again"));
}

void FleetLink::Claim(const v1::Key& key, absl::string_view holder,
                      absl::Duration ttl, ClaimKind kind, absl::Time deadline,
                      ClaimDone done) {
  // A HIT is answered here (it stays a HIT but for a deletion); anything
  // else may be granted by the time it is decided (a PENDING or BACKOFF key
  // lapses to MISS), so while the link is up it is decided on the claim
  // thread, in order with the fleet claims.
  const bool hit = arbiter_->Lookup(key).state() == v1::KEY_STATE_HIT;
  {
    absl::MutexLock lock(&mu_);
    if (!hit && schema_ok_ && !stopping_ && claims_ != nullptr) {
      claims_->Submit([this, key, holder = std::string(holder), ttl, kind,
                       deadline, done = std::move(done)] {
        bool stopping;
        {
          absl::MutexLock lock(&mu_);
          stopping = stopping_;
        }
        // Queued behind slow fleet claims past its caller's deadline: the
        // caller is gone, so nothing is granted to it.
        if (absl::Now() >= deadline) {
          done(TooLate(key));
          return;
        }
        done(ClaimOnce(key, holder, ttl, kind, deadline, !stopping));
      });
      return;
    }
  }
  done(ClaimOnce(key, holder, ttl, kind, deadline, /*ask_fleet=*/false));
}

absl::StatusOr<v1::ClaimResponse> FleetLink::ClaimOnce(
    const v1::Key& key, absl::string_view holder, absl::Duration ttl,
    ClaimKind kind, absl::Time deadline, bool ask_fleet) {
  const v1::KeyStatus local = arbiter_->Lookup(key);
  if (local.state() == v1::KEY_STATE_HIT ||
      local.state() == v1::KEY_STATE_PENDING ||
      local.state() == v1::KEY_STATE_BACKOFF) {
    return arbiter_->Claim(key, holder, ttl, kind);  // no grant possible
  }
  const std::string key_id = KeyId(key);
  absl::StatusOr<FleetConnection::ClaimResult> fleet =
      absl::UnavailableError("not connected");
  if (ask_fleet) {
    absl::MutexLock lock(&claim_mu_);
    const absl::Time now = clock_->Now();
    if (claim_conn_ != nullptr && now >= claims_local_until_) {
      fleet = claim_conn_->Claim(fingerprint_, key_id, key.candidate_set(), me_,
                                 options_.lease_ttl);
      if (fleet.ok()) {
        claims_backoff_ = options_.retry_min;
      } else {
        // A lock, a stopped or slow server: the claim connection is dropped
        // (the keeper reconnects) and fleet claims pause for a backoff, so
        // the Claims behind this one are decided locally at once instead of
        // each waiting claim_timeout.
        claims_local_until_ = clock_->Now() + claims_backoff_;
        spdlog::warn(
            "fleet: a fleet claim failed ({}): claims are local-only for {}",
            std::string(fleet.status().message()),
            absl::FormatDuration(claims_backoff_));
        claims_backoff_ = std::min(claims_backoff_ * 2, options_.retry_max);
        claim_conn_.reset();
      }
    }
  }
  if (absl::Now() >= deadline) {
    // Decided too late for its caller: no grant, and a fleet claim taken for
    // it goes back at once rather than at the end of its lease.
    if (fleet.ok() &&
        fleet->outcome == FleetConnection::ClaimResult::kGranted) {
      absl::MutexLock lock(&claim_mu_);
      if (claim_conn_ != nullptr) {
        (void)claim_conn_->Release(fingerprint_, key_id, fleet->fence);
      }
    }
    return TooLate(key);
  }
  if (!fleet.ok()) {
    local_only_claims_.fetch_add(1);
    spdlog::debug("fleet: claim of {} taken locally only: {}", KeyText(key),
                  std::string(fleet.status().message()));
    return arbiter_->Claim(key, holder, ttl, kind);
  }
  switch (fleet->outcome) {
    case FleetConnection::ClaimResult::kCanonical: {
      if (absl::Status s = Adopt({fleet->canonical}, 0); !s.ok()) {
        spdlog::warn("fleet: cannot adopt the fleet's entry for {}: {}",
                     KeyText(key), std::string(s.message()));
      }
      return arbiter_->Claim(key, holder, ttl, kind);
    }
    case FleetConnection::ClaimResult::kHeld: {
      spdlog::debug("fleet: {} is held by {} for {}", KeyText(key),
                    HolderText(*fleet), absl::FormatDuration(fleet->remaining));
      // Another daemon tunes it: PENDING here, for as long as its lease.
      const absl::Duration proxy_ttl =
          std::clamp(fleet->remaining + absl::Milliseconds(100),
                     absl::Milliseconds(200), options_.lease_ttl * 2);
      absl::StatusOr<v1::ClaimResponse> proxy = arbiter_->Claim(
          key, HolderText(*fleet), proxy_ttl, ClaimKind::kStandIn);
      if (!proxy.ok()) return proxy;
      if (proxy->outcome() == v1::CLAIM_OUTCOME_GRANTED) {
        proxy->set_outcome(v1::CLAIM_OUTCOME_PENDING);
        absl::MutexLock lock(&mu_);
        waited_[key_id] = clock_->Now() + proxy_ttl;
      }
      return proxy;
    }
    case FleetConnection::ClaimResult::kGranted:
      break;
  }
  spdlog::debug("fleet: took fleet claim {} on {}", fleet->fence, KeyText(key));
  absl::StatusOr<v1::ClaimResponse> response =
      arbiter_->Claim(key, holder, ttl, kind);
  if (response.ok() && response->outcome() == v1::CLAIM_OUTCOME_GRANTED) {
    absl::MutexLock lock(&mu_);
    held_[key_id] =
        Held{key, fleet->fence, response->claim().claim_id(), clock_->Now()};
    return response;
  }
  // Not granted here after all (a local claim came first): let it go.
  absl::MutexLock lock(&claim_mu_);
  if (claim_conn_ != nullptr) {
    (void)claim_conn_->Release(fingerprint_, key_id, fleet->fence);
  }
  return response;
}

void FleetLink::KeeperLoop() {
  const absl::Duration period =
      std::min(options_.lease_ttl / 3, absl::Milliseconds(500));
  absl::Duration backoff = options_.retry_min;
  while (Nap(period)) {
    bool schema_ok;
    {
      absl::MutexLock lock(&mu_);
      schema_ok = schema_ok_;
      for (auto it = waited_.begin(); it != waited_.end();) {
        if (it->second <= clock_->Now()) {
          waited_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    bool have_conn;
    {
      absl::MutexLock lock(&claim_mu_);
      have_conn = claim_conn_ != nullptr && claim_conn_->ok();
      if (!schema_ok) claim_conn_.reset();
    }
    if (schema_ok && !have_conn) {
      absl::StatusOr<std::unique_ptr<FleetConnection>> c =
          Connect(options_.claim_timeout);
      if (c.ok()) {
        absl::MutexLock lock(&claim_mu_);
        claim_conn_ = std::move(*c);
        backoff = options_.retry_min;
      } else {
        Nap(backoff);
        backoff = std::min(backoff * 2, options_.retry_max);
        continue;
      }
    }
    // Renew what is still being tuned here; let go of the rest.
    std::vector<std::pair<std::string, Held>> held;
    {
      absl::MutexLock lock(&mu_);
      held.assign(held_.begin(), held_.end());
    }
    const absl::Time now = clock_->Now();
    for (auto& [key_id, h] : held) {
      const v1::KeyStatus local = arbiter_->Lookup(h.key);
      const bool mine = local.state() == v1::KEY_STATE_PENDING &&
                        local.claim().claim_id() == h.local_claim_id;
      {
        absl::MutexLock lock(&mu_);
        if (in_flight_.contains(key_id)) continue;  // being recorded
      }
      if (mine && (h.lost || now - h.renewed_at < options_.lease_ttl / 3)) {
        continue;
      }
      absl::StatusOr<bool> renewed = absl::UnavailableError("not connected");
      {
        absl::MutexLock lock(&claim_mu_);
        if (claim_conn_ == nullptr) break;
        if (mine) {
          renewed = claim_conn_->Renew(fingerprint_, key_id, h.fence,
                                       options_.lease_ttl);
        } else {
          const absl::Status released =
              claim_conn_->Release(fingerprint_, key_id, h.fence);
          renewed = released.ok() ? absl::StatusOr<bool>(false)
                                  : absl::StatusOr<bool>(released);
        }
        if (!renewed.ok() && !claim_conn_->ok()) claim_conn_.reset();
      }
      if (!renewed.ok()) continue;  // retried next round
      bool lost = false;
      {
        absl::MutexLock lock(&mu_);
        auto it = held_.find(key_id);
        if (it == held_.end() || it->second.fence != h.fence) continue;
        if (*renewed) {
          it->second.renewed_at = now;
        } else if (mine) {
          spdlog::warn(
              "fleet: lost fleet claim {} on {} (its lease lapsed and another "
              "daemon took it): the fleet will refuse this daemon's result",
              h.fence, KeyText(h.key));
          it->second.lost = true;
          lost = true;
        } else {
          held_.erase(it);
        }
      }
      // A client's Record would be acknowledged and then replaced by the
      // fleet's entry: its claim ends here, and its Record is refused with
      // the reason (Arbiter::Fence; outside mu_: watchers are woken).
      if (lost &&
          arbiter_->Fence(h.local_claim_id,
                          absl::StrCat("its fleet claim ", h.fence,
                                       " was lost (the lease lapsed and "
                                       "another daemon took the key over): "
                                       "the fleet would refuse this result"))) {
        spdlog::warn("fleet: claim {} on {} fenced: its Record is refused",
                     h.local_claim_id, KeyText(h.key));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Records and the outbox.

absl::Status FleetLink::PutAndQueue(const std::vector<v1::Entry>& entries,
                                    uint64_t fence) {
  uint64_t added = 0;
  std::vector<std::string> queued_ids;
  std::vector<const v1::Entry*> overflowed;
  absl::Status s =
      store_->PutAllWith(entries, [&](Connection& db) -> absl::Status {
        absl::StatusOr<Statement> exists =
            db.Prepare("SELECT 1 FROM fleet_outbox WHERE key_id = ?1");
        if (!exists.ok()) return exists.status();
        absl::StatusOr<Statement> put = db.Prepare(
            "INSERT OR REPLACE INTO fleet_outbox (key_id, candidate_set, "
            "fence, entry, queued_at) VALUES (?1, ?2, ?3, ?4, ?5)");
        if (!put.ok()) return put.status();
        uint64_t depth;
        {
          absl::MutexLock lock(&mu_);
          depth = outbox_depth_;
        }
        const int64_t now = absl::ToUnixMicros(clock_->Now());
        for (const v1::Entry& entry : entries) {
          // Another fingerprint's entry is not this fleet's to share.
          if (FingerprintDigest(entry.fingerprint()) != fingerprint_) continue;
          std::string key_id = KeyId(entry.key());
          exists->BindText(1, key_id);
          absl::StatusOr<bool> queued = exists->Step();
          if (!queued.ok()) return queued.status();
          exists->Reset();
          if (!*queued && depth + added >= options_.outbox_limit) {
            overflowed.push_back(&entry);
            continue;
          }
          put->BindText(1, key_id);
          put->BindText(2, entry.key().candidate_set());
          put->BindInt(3, static_cast<int64_t>(fence));
          put->BindBlob(4, entry.SerializeAsString());
          put->BindInt(5, now);
          if (auto s = put->Run(); !s.ok()) return s;
          put->Reset();
          if (!*queued) ++added;
          queued_ids.push_back(std::move(key_id));
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  absl::MutexLock lock(&mu_);
  outbox_depth_ += added;
  // A new row for a key starts its publish attempts afresh.
  for (const std::string& id : queued_ids) {
    attempts_.erase(id);
    retry_at_.erase(id);
  }
  if (!overflowed.empty()) {
    outbox_overflow_.fetch_add(overflowed.size());
    spdlog::warn(
        "fleet: the outbox is full ({} records): {} (and {} more) kept "
        "locally only",
        options_.outbox_limit, KeyText(overflowed.front()->key()),
        overflowed.size() - 1);
  }
  return absl::OkStatus();
}

void FleetLink::HoldBack(const std::vector<std::string>& key_ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : key_ids) ++in_flight_[id];
}

void FleetLink::LetGo(const std::vector<std::string>& key_ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : key_ids) {
    auto it = in_flight_.find(id);
    if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
  }
  outbox_ready_ = true;
}

absl::Status FleetLink::PersistRecord(const v1::Entry& entry) {
  if (FingerprintDigest(entry.fingerprint()) != fingerprint_) {
    return store_->Put(entry);  // not this fleet's to share
  }
  const std::string key_id = KeyId(entry.key());
  std::optional<Held> held;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(key_id);
    if (it != held_.end()) {
      held = it->second;
      held_.erase(it);
    }
  }
  HoldBack({key_id});
  absl::Status s = PutAndQueue({entry}, held ? held->fence : 0);
  if (!s.ok()) {
    LetGo({key_id});
    absl::MutexLock lock(&mu_);
    if (held) held_[key_id] = *held;  // the lease runs on
  }
  return s;
}

void FleetLink::RecordCommitted(const v1::Key& key) { LetGo({KeyId(key)}); }

absl::Status FleetLink::Import(const std::vector<v1::Entry>& entries) {
  std::vector<std::string> ours;
  for (const v1::Entry& entry : entries) {
    if (FingerprintDigest(entry.fingerprint()) == fingerprint_) {
      ours.push_back(KeyId(entry.key()));
    }
  }
  // Not published before the index has them: a canonical entry the fleet
  // answers with must replace the import here, not be replaced by it.
  HoldBack(ours);
  absl::Status s = PutAndQueue(entries, 0);
  if (s.ok()) arbiter_->Install(entries);
  LetGo(ours);
  if (s.ok() && !ours.empty()) {
    spdlog::info("fleet: {} imported entries queued for the fleet",
                 ours.size());
  }
  return s;
}

absl::StatusOr<std::vector<FleetLink::OutboxRow>> FleetLink::ReadOutbox(
    int64_t after_id, int limit) {
  std::vector<OutboxRow> rows;
  absl::Status s = store_->Transact([&](Connection& db) -> absl::Status {
    absl::StatusOr<Statement> st = db.Prepare(
        "SELECT id, key_id, candidate_set, fence, entry FROM fleet_outbox "
        "WHERE id > ?1 ORDER BY id LIMIT ?2");
    if (!st.ok()) return st.status();
    st->BindInt(1, after_id);
    st->BindInt(2, limit);
    while (true) {
      absl::StatusOr<bool> row = st->Step();
      if (!row.ok()) return row.status();
      if (!*row) return absl::OkStatus();
      rows.push_back({st->ColumnInt(0), st->ColumnText(1), st->ColumnText(2),
                      static_cast<uint64_t>(st->ColumnInt(3)),
                      st->ColumnBlob(4)});
    }
  });
  if (!s.ok()) return s;
  return rows;
}

absl::Status FleetLink::RemoveFromOutbox(const std::vector<int64_t>& ids) {
  uint64_t removed = 0;
  absl::Status s = store_->Transact([&](Connection& db) -> absl::Status {
    absl::StatusOr<Statement> st =
        db.Prepare("DELETE FROM fleet_outbox WHERE id = ?1");
    if (!st.ok()) return st.status();
    for (int64_t id : ids) {
      st->BindInt(1, id);
      if (auto s = st->Run(); !s.ok()) return s;
      removed += static_cast<uint64_t>(db.Changes());
      st->Reset();
    }
    return absl::OkStatus();
  });
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    outbox_depth_ -= std::min(outbox_depth_, removed);
  }
  return s;
}

bool FleetLink::Answered(const OutboxRow& row,
                         const FleetConnection::PublishResult& r) {
  switch (r.outcome) {
    case FleetConnection::PublishResult::kAccepted:
      published_.fetch_add(1);
      spdlog::debug("fleet: published {} at {}", row.key_id, r.seq);
      break;
    case FleetConnection::PublishResult::kHeld: {
      // Its holder will publish; ours goes if that one never does.
      absl::MutexLock lock(&mu_);
      retry_at_[row.key_id] = clock_->Now() + options_.lease_ttl / 2;
      return false;
    }
    case FleetConnection::PublishResult::kConflict:
      refused_.fetch_add(1);
      spdlog::warn(
          "fleet: the publish of {} was refused: {}; keeping the local entry",
          row.key_id, r.reason);
      break;
    case FleetConnection::PublishResult::kSuperseded:
    case FleetConnection::PublishResult::kCanonical:
      refused_.fetch_add(1);
      if (r.outcome == FleetConnection::PublishResult::kSuperseded) {
        spdlog::warn("fleet: the publish of {} was refused: {}; {}", row.key_id,
                     r.reason,
                     r.canonical ? "adopting the fleet's entry"
                                 : "keeping the local entry");
      } else {
        spdlog::info(
            "fleet: {} already has a canonical entry in the fleet: replacing "
            "the local choice with it",
            row.key_id);
      }
      if (r.canonical.has_value()) {
        if (absl::Status s = Adopt({*r.canonical}, 0); !s.ok()) {
          spdlog::warn("fleet: cannot adopt the fleet's entry for {}: {}",
                       row.key_id, std::string(s.message()));
          return false;  // asked again later
        }
      }
      break;
  }
  absl::MutexLock lock(&mu_);
  retry_at_.erase(row.key_id);
  attempts_.erase(row.key_id);
  return true;
}

bool FleetLink::Failed(const OutboxRow& row, const absl::Status& error) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  const int attempts = ++attempts_[row.key_id];
  if (attempts >= kMaxRefusals) {
    attempts_.erase(row.key_id);
    retry_at_.erase(row.key_id);
    outbox_dropped_.fetch_add(1);
    spdlog::error(
        "fleet: PostgreSQL refused the publish of {} {} times ({}): dropped "
        "from the outbox; the entry stays in this daemon's cache only",
        row.key_id, attempts, std::string(error.message()));
    return true;
  }
  retry_at_[row.key_id] =
      now + std::min(options_.retry_min * (1 << attempts), options_.retry_max);
  spdlog::warn(
      "fleet: PostgreSQL refused the publish of {} ({}; {} of {} tries): "
      "the records behind it go on",
      row.key_id, std::string(error.message()), attempts, kMaxRefusals);
  return false;
}

void FleetLink::PublisherLoop() {
  std::unique_ptr<FleetConnection> conn;
  absl::Duration backoff = options_.retry_min;
  // The outbox is read a page at a time from here, oldest first, so that
  // rows that wait (another daemon's claim, a refusal) never hold up the
  // rows behind them; back to the start after the last page.
  int64_t after_id = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Condition work(
          +[](FleetLink* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) {
            return l->stopping_ || (l->schema_ok_ && l->outbox_ready_);
          },
          this);
      mu_.AwaitWithTimeout(work, absl::Seconds(1));
      if (stopping_) return;
      if (!schema_ok_) continue;
      outbox_ready_ = false;
    }
    // Sleeps the backoff and asks for another pass; false when stopping.
    auto back_off = [&] {
      if (!Nap(backoff)) return false;
      backoff = std::min(backoff * 2, options_.retry_max);
      absl::MutexLock lock(&mu_);
      outbox_ready_ = true;
      return true;
    };
    if (conn == nullptr || !conn->ok()) {
      absl::StatusOr<std::unique_ptr<FleetConnection>> c =
          Connect(options_.statement_timeout);
      if (!c.ok()) {
        if (!back_off()) return;
        continue;
      }
      conn = std::move(*c);
    }
    absl::StatusOr<std::vector<OutboxRow>> rows =
        ReadOutbox(after_id, kOutboxPage);
    if (!rows.ok()) {
      spdlog::error("fleet: cannot read the outbox: {}",
                    std::string(rows.status().message()));
      continue;
    }
    const bool more = rows->size() == static_cast<size_t>(kOutboxPage);
    const int64_t page_start = after_id;
    after_id = more ? rows->back().id : 0;
    // Rows waiting on something (a Record not committed yet, another
    // daemon's claim, a retry time) are looked at again on a later pass.
    std::vector<const OutboxRow*> batch;
    std::vector<FleetConnection::PublishRequest> requests;
    {
      absl::MutexLock lock(&mu_);
      for (const OutboxRow& row : *rows) {
        if (in_flight_.contains(row.key_id)) continue;
        auto retry = retry_at_.find(row.key_id);
        if (retry != retry_at_.end() && retry->second > clock_->Now()) continue;
        batch.push_back(&row);
        requests.push_back(
            {row.key_id, row.candidate_set, row.fence, row.entry});
      }
      if (more) outbox_ready_ = true;
    }
    if (batch.empty()) continue;
    // One transaction for the batch: one lock, one NOTIFY.
    absl::StatusOr<std::vector<FleetConnection::PublishResult>> results =
        conn->PublishAll(fingerprint_, requests, me_);
    std::vector<absl::StatusOr<FleetConnection::PublishResult>> answers;
    if (results.ok()) {
      answers.assign(results->begin(), results->end());
    } else {
      publish_errors_.fetch_add(1);
      if (!conn->ok() || !absl::IsInvalidArgument(results.status())) {
        // Not about one row (the connection, a timeout, the role's
        // grants): the page waits, and is read again after the backoff.
        spdlog::warn("fleet: publishing {} (and {} more) failed: {}; retrying",
                     batch.front()->key_id, batch.size() - 1,
                     std::string(results.status().message()));
        after_id = page_start;
        if (!back_off()) return;
        continue;
      }
      // PostgreSQL refused a row's data (a constraint, an invalid value):
      // each row alone, so that only the refused ones wait.
      for (const FleetConnection::PublishRequest& request : requests) {
        absl::StatusOr<std::vector<FleetConnection::PublishResult>> one =
            conn->PublishAll(fingerprint_, {request}, me_);
        if (!one.ok()) {
          publish_errors_.fetch_add(1);
          answers.push_back(one.status());
          if (!conn->ok()) break;  // the rest: on a later pass
        } else {
          answers.push_back(std::move(one->front()));
        }
      }
    }
    backoff = options_.retry_min;
    std::vector<int64_t> done;
    for (size_t i = 0; i < answers.size(); ++i) {
      const bool finished = answers[i].ok() ? Answered(*batch[i], *answers[i])
                            : absl::IsInvalidArgument(answers[i].status())
                                ? Failed(*batch[i], answers[i].status())
                                : false;
      if (finished) done.push_back(batch[i]->id);
    }
    if (absl::Status s = RemoveFromOutbox(done); !s.ok()) {
      spdlog::error(
          "fleet: cannot remove {} published records from the "
          "outbox: {} (they will be published again, harmlessly)",
          done.size(), std::string(s.message()));
    }
  }
}

// ---------------------------------------------------------------------------
// The feed.

absl::Status FleetLink::Adopt(const std::vector<FleetConnection::FeedRow>& rows,
                              uint64_t feed_seq) {
  std::vector<v1::Entry> entries;
  std::vector<std::string> erased;
  absl::Duration lag;
  const absl::Time now = clock_->Now();
  // The last row of each key in `rows` is its state (a deletion and a
  // later publish of the key in one page: the publish).
  absl::flat_hash_map<std::string, size_t> last;
  for (size_t i = 0; i < rows.size(); ++i) last[rows[i].key_id] = i;
  for (size_t i = 0; i < rows.size(); ++i) {
    const FleetConnection::FeedRow& row = rows[i];
    if (last[row.key_id] != i) continue;
    if (row.deleted) {  // deleted fleet-wide: here too, ours or not
      erased.push_back(row.key_id);
      continue;
    }
    // Ours, from the feed: already here. An explicit canonical answer
    // (feed_seq 0) is taken even when this daemon published it: the local
    // entry may have changed since (a re-import, a local delete and re-tune).
    if (row.publisher.instance == me_.instance && feed_seq != 0) continue;
    v1::Entry entry;
    // From another process: bounded (by its length, before its bytes are
    // fetched), parsed by protobuf and checked like an import, and every
    // column this daemon goes by checked against the entry. A row that
    // fails is skipped and counted; the feed goes on past it.
    if (row.oversized) {
      feed_oversized_.fetch_add(1);
      spdlog::warn(
          "fleet: the entry for {} at {} is {} bytes (at most {}): skipped "
          "unread",
          row.key_id, row.seq, row.entry_bytes, kMaxFleetEntryBytes);
      continue;
    }
    if (!entry.ParseFromString(row.entry)) {
      feed_unparseable_.fetch_add(1);
      spdlog::warn("fleet: the entry for {} at {} does not parse: skipped",
                   row.key_id, row.seq);
      continue;
    }
    if (absl::Status s = ValidateEntry(entry, "fleet entry"); !s.ok()) {
      feed_unparseable_.fetch_add(1);
      spdlog::warn("fleet: the entry for {} at {} is invalid ({}): skipped",
                   row.key_id, row.seq, std::string(s.message()));
      continue;
    }
    if (KeyId(entry.key()) != row.key_id ||
        entry.key().candidate_set() != row.candidate_set ||
        FingerprintDigest(entry.fingerprint()) != fingerprint_) {
      feed_mismatched_.fetch_add(1);
      spdlog::warn(
          "fleet: the entry at {} does not match its row (key {}, candidate "
          "set {}, this daemon's fingerprint; the entry is for {}): skipped",
          row.seq, row.key_id, row.candidate_set, KeyText(entry.key()));
      continue;
    }
    // Who recorded it is what PostgreSQL vouches for (the row's role); the
    // entry's own recorded_by is the publisher's word.
    entry.set_recorded_by(row.role.empty()
                              ? "fleet role unknown (published before fleet "
                                "schema version 2)"
                              : absl::StrCat("fleet role ", row.role));
    if (entry.source() != v1::SOURCE_FLEET) {
      v1::FleetOrigin* origin = entry.mutable_fleet();
      origin->set_published_source(entry.source());
      origin->set_host(row.publisher.host);
      origin->set_gpu(row.publisher.gpu);
      origin->set_instance(row.publisher.instance);
      origin->set_fence(row.fence);
      origin->set_seq(row.seq);
      entry.set_source(v1::SOURCE_FLEET);
    }
    entry.mutable_fleet()->set_role(row.role);
    const v1::KeyStatus local = arbiter_->Lookup(entry.key());
    if (local.state() == v1::KEY_STATE_HIT &&
        local.entry().execution().SerializeAsString() !=
            entry.execution().SerializeAsString()) {
      spdlog::info(
          "fleet: {}: the fleet's canonical {} (measured on {} {}) replaces "
          "the local choice {}",
          KeyText(entry.key()), entry.execution().kernel(),
          entry.fleet().host(), entry.fleet().gpu(),
          local.entry().execution().kernel());
    }
    lag = now - row.published_at;
    spdlog::debug("fleet: adopting {} (seq {}) from {}", row.key_id, row.seq,
                  row.publisher.instance);
    entries.push_back(std::move(entry));
  }
  absl::Status s =
      store_->PutAllWith(entries, [&](Connection& db) -> absl::Status {
        if (!erased.empty()) {
          absl::StatusOr<Statement> st =
              db.Prepare("DELETE FROM entries WHERE key_id = ?1");
          if (!st.ok()) return st.status();
          for (const std::string& id : erased) {
            st->BindText(1, id);
            if (auto s = st->Run(); !s.ok()) return s;
            st->Reset();
          }
        }
        if (feed_seq == 0) return absl::OkStatus();
        return SetState(db, "feed_seq", absl::StrCat(feed_seq));
      });
  if (!s.ok()) return s;
  if (!entries.empty()) arbiter_->Install(entries);
  if (!erased.empty()) {
    arbiter_->Erase(erased);
    spdlog::info("fleet: {} entries deleted fleet-wide were dropped here",
                 erased.size());
  }
  adopted_.fetch_add(entries.size());
  absl::MutexLock lock(&mu_);
  // Keys waited on another daemon for: the entry came (Install ended their
  // stand-ins too).
  for (const v1::Entry& entry : entries) waited_.erase(KeyId(entry.key()));
  if (feed_seq != 0) feed_seq_ = std::max(feed_seq_, feed_seq);
  if (!entries.empty() && lag != absl::ZeroDuration()) feed_lag_ = lag;
  return absl::OkStatus();
}

absl::StatusOr<bool> FleetLink::FollowOnce(FleetConnection& conn) {
  uint64_t after;
  {
    absl::MutexLock lock(&mu_);
    after = feed_seq_;
  }
  absl::StatusOr<std::vector<FleetConnection::FeedRow>> rows =
      conn.ReadFeed(fingerprint_, after, kFeedPage);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    // A position beyond the fleet's sequence was never the fleet's (a row
    // whose seq was written by hand, before schema version 2, moved it):
    // follow the feed from its start again, which adopts nothing twice.
    absl::StatusOr<uint64_t> head = conn.FeedHead();
    if (!head.ok()) return head.status();
    if (after > *head) {
      spdlog::warn(
          "fleet: this daemon's feed position {} is beyond the fleet's "
          "sequence ({}): following the feed from the start",
          after, *head);
      absl::Status s = store_->Transact(
          [&](Connection& db) { return SetState(db, "feed_seq", "0"); });
      if (!s.ok()) return s;
      absl::MutexLock lock(&mu_);
      feed_seq_ = 0;
      fleet_seq_ = *head;
      return true;
    }
    absl::MutexLock lock(&mu_);
    fleet_seq_ = std::max(fleet_seq_, after);
    return false;
  }
  const uint64_t last = rows->back().seq;
  if (absl::Status s = Adopt(*rows, last); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("adopting fleet entries: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  fleet_seq_ = std::max(fleet_seq_, last);
  return rows->size() == static_cast<size_t>(kFeedPage);
}

void FleetLink::FollowerLoop() {
  absl::Duration backoff = options_.retry_min;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::StatusOr<std::unique_ptr<FleetConnection>> conn =
        Connect(options_.statement_timeout);
    absl::Status s = conn.status();
    if (s.ok()) {
      absl::StatusOr<std::string> fleet_id = (*conn)->PrepareSchema();
      s = fleet_id.status();
      if (s.ok()) {
        // A database that is not the one our feed position counts in (a new
        // fleet, or one restored): start from its beginning.
        s = store_->Transact([&](Connection& db) -> absl::Status {
          absl::StatusOr<std::string> known = GetState(db, "fleet_id");
          if (!known.ok()) return known.status();
          if (*known == *fleet_id) return absl::OkStatus();
          if (!known->empty()) {
            spdlog::warn(
                "fleet: {} is another fleet than before ({} was {}): "
                "following its feed from the start",
                target_, *fleet_id, *known);
          }
          if (auto s = SetState(db, "fleet_id", *fleet_id); !s.ok()) return s;
          if (auto s = SetState(db, "feed_seq", "0"); !s.ok()) return s;
          absl::MutexLock lock(&mu_);
          feed_seq_ = 0;
          return absl::OkStatus();
        });
      }
      if (s.ok()) s = (*conn)->Listen(fingerprint_);
      if (s.ok()) {
        // Claims work from the moment the link says it is connected.
        absl::StatusOr<std::unique_ptr<FleetConnection>> claims =
            Connect(options_.claim_timeout);
        s = claims.status();
        if (s.ok()) {
          absl::MutexLock lock(&claim_mu_);
          claim_conn_ = std::move(*claims);
        }
      }
    }
    if (s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        schema_ok_ = true;
        outbox_ready_ = true;  // reconcile what waited
      }
      SetConnected(true, "");
      backoff = options_.retry_min;
      // Catch up, then follow: NOTIFY wakes us, the poll covers what a
      // notification cannot (it is not replayed).
      int pages = 0;
      while (true) {
        absl::StatusOr<bool> more = FollowOnce(**conn);
        if (!more.ok()) {
          s = more.status();
          break;
        }
        if (*more) {
          ++pages;
          continue;
        }
        if (pages >= 8) malloc_trim(0);  // a large catch-up's transient pages
        pages = 0;
        absl::StatusOr<bool> woke =
            (*conn)->WaitForNotify(options_.poll_interval, wake_fds_[0]);
        {
          absl::MutexLock lock(&mu_);
          if (stopping_) return;
        }
        if (!woke.ok()) {
          s = woke.status();
          break;
        }
      }
    }
    SetConnected(false, std::string(s.message()));
    if (!Nap(backoff)) return;
    backoff = std::min(backoff * 2, options_.retry_max);
  }
}

void FleetLink::FillStatus(v1::FleetStatus* status) const {
  status->set_target(target_);
  status->set_host(me_.host);
  status->set_gpu(me_.gpu);
  status->set_instance(me_.instance);
  status->set_outbox_overflow(outbox_overflow_.load());
  status->set_published(published_.load());
  status->set_adopted(adopted_.load());
  status->set_refused(refused_.load());
  status->set_local_only_claims(local_only_claims_.load());
  status->set_outbox_dropped(outbox_dropped_.load());
  status->set_publish_errors(publish_errors_.load());
  status->set_feed_unparseable(feed_unparseable_.load());
  status->set_feed_mismatched(feed_mismatched_.load());
  status->set_feed_oversized(feed_oversized_.load());
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  status->set_connected(connected_);
  status->set_error(error_);
  status->set_outbox_depth(outbox_depth_);
  status->set_feed_seq(feed_seq_);
  status->set_fleet_seq(fleet_seq_);
  *status->mutable_feed_lag() = ToProto(feed_lag_);
  status->set_claims_held(static_cast<uint32_t>(held_.size()));
  uint32_t waited = 0;
  for (const auto& [key_id, until] : waited_) waited += until > now ? 1 : 0;
  status->set_claims_waited(waited);
}

}  // namespace gputune::fleet
