// FleetConnection: one libpq connection to a fleet's PostgreSQL database, and
// everything the fleet tier asks of it: the schema, fleet claims with fencing,
// publishing and the per-fingerprint change feed.
//
//   absl::StatusOr<std::unique_ptr<FleetConnection>> c =
//       FleetConnection::Connect(conninfo, absl::Seconds(5));
//   absl::StatusOr<std::string> fleet_id = (*c)->PrepareSchema();
//   absl::StatusOr<ClaimResult> claim = (*c)->Claim(fp, key, me, ttl);
//
// Schema (fleet_meta.schema_version = 2):
//   fleet_meta(name PRIMARY KEY, value)  -- schema_version, fleet_id
//   fleet_entries(fingerprint, key_id, candidate_set  PRIMARY KEY,
//                 seq UNIQUE per fingerprint (the change feed), deleted,
//                 fence, host, gpu, instance, entry bytea (CHECK: at most
//                 kMaxFleetEntryBytes), published_at, publisher_role;
//                 UNIQUE (fingerprint, key_id) WHERE NOT deleted;
//                 row-level security)
//   fleet_claims(fingerprint, key_id  PRIMARY KEY, fence, host, gpu,
//                instance, expires_at, released)
//   sequences fleet_fence (fencing numbers) and fleet_feed (feed order)
//
// The rules this file enforces, all in PostgreSQL transactions:
//  - A fleet claim is a lease with an expiry (PostgreSQL's clock, so the
//    daemons' clocks do not matter) and a fence from fleet_fence: every grant
//    takes a new number, never reused. A claim is granted when the key has no
//    claim, or its claim was released or has expired.
//  - A publish names its fence (0: made without a fleet claim, e.g. while the
//    fleet was unreachable). A fenced publish whose fence is no longer the
//    key's claim is refused (SUPERSEDED): a paused or partitioned holder
//    cannot overwrite its successor's work. An unfenced one is refused while
//    another daemon holds a live claim (HELD: retry later).
//  - The first publish per (fingerprint, key, candidate set) is canonical; a
//    later one gets the canonical entry back (CANONICAL) and changes nothing.
//  - Publishes and deletes of one fingerprint are serialised by an advisory
//    lock, so their feed sequence numbers commit in increasing order: a
//    reader that has seen seq N never later finds a row < N appear.
//  - A publish sends NOTIFY on the fingerprint's channel; readers poll too,
//    since a notification is lost while a listener is disconnected.
// And the schema enforces, whoever writes (a trigger and row-level
// security; docs/operations.md, "Roles and row-level security"):
//  - a row's seq comes from fleet_feed under the feed lock, its
//    publisher_role is the writing role and its published_at the server's
//    clock, whatever the statement says;
//  - one live row per (fingerprint, key): a publish for another candidate
//    set than the live row's is refused (CONFLICT);
//  - a non-owner role inserts live rows as itself and updates only its own
//    live rows and tombstones, unless it is a member of gputune_operator.
//
// Not thread-safe: one thread at a time per connection. Every call blocks on
// the network for at most the statement timeout given to Connect.
// A statement's error says what a retry may do: UNAVAILABLE when it may
// succeed (connection, timeout, conflict, a server short of resources),
// INVALID_ARGUMENT when PostgreSQL refused the values themselves (SQLSTATE
// classes 22 and 23: a data exception, a constraint), PERMISSION_DENIED for
// a missing grant, INTERNAL otherwise.
#ifndef GPUTUNE_DAEMON_FLEET_FLEET_STORE_H_
#define GPUTUNE_DAEMON_FLEET_FLEET_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

typedef struct pg_conn PGconn;

namespace gputune::fleet {

inline constexpr int kFleetSchemaVersion = 3;
// The most bytes a fleet entry may have (a CHECK in the schema; longer rows
// from before it are skipped unread). An entry (8-64 candidates'
// measurements) is a few KiB.
inline constexpr size_t kMaxFleetEntryBytes = 1 << 20;

// Who a daemon is, as the fleet names it.
struct FleetIdentity {
  std::string host;      // the machine's host name
  std::string gpu;       // device name and UUID (or the CPU for --backend=host)
  std::string instance;  // unique per daemon process: owns its claims
};

// The connection string without its password, for logs and GetStatus.
// Invalid strings are returned as "(invalid connection string)".
std::string RedactConnInfo(const std::string& conninfo);

class FleetConnection {
 public:
  // Connects (libpq conninfo or postgresql:// URI; connect_timeout defaults
  // to 5 s unless the string sets it) and sets statement_timeout. Every
  // answer is waited for at most statement_timeout plus a quarter of it (at
  // most 1 s more): past that the connection is broken (UNAVAILABLE, ok()
  // false), as for a server that stopped or a network that stalls. The error
  // carries libpq's message (unknown host, refused, bad password, ...):
  // UNAVAILABLE when the server may come back, UNAUTHENTICATED for a
  // refused password, INVALID_ARGUMENT for a malformed string.
  static absl::StatusOr<std::unique_ptr<FleetConnection>> Connect(
      const std::string& conninfo, absl::Duration statement_timeout);
  ~FleetConnection();

  // One entry of the fleet, as the feed and the canonical checks return it.
  struct FeedRow {
    uint64_t seq = 0;
    std::string key_id;
    std::string candidate_set;
    bool deleted = false;
    std::string entry;  // serialized v1::Entry (empty when deleted)
    // Its length in the database; with `oversized` (more than
    // kMaxFleetEntryBytes) `entry` was not fetched and is empty.
    uint64_t entry_bytes = 0;
    bool oversized = false;
    // What the publisher says of itself (columns it wrote).
    FleetIdentity publisher;
    // The PostgreSQL role that wrote the row, set by the server (empty for
    // a row from before schema version 2).
    std::string role;
    uint64_t fence = 0;
    absl::Time published_at;
  };

  // Whether the connection still works (as far as libpq knows).
  bool ok() const;

  // Creates the schema in an empty database, or migrates an older one (under
  // an advisory lock: many daemons may start at once); returns the fleet's
  // id (a UUID made with the schema). FAILED_PRECONDITION for a schema newer
  // than kFleetSchemaVersion (nothing touched) or a role that may not create
  // a missing schema. `up_to` stops at an older version (for tests of the
  // migrations).
  absl::StatusOr<std::string> PrepareSchema(int up_to = kFleetSchemaVersion);

  struct ClaimResult {
    enum Outcome { kGranted, kHeld, kCanonical };
    Outcome outcome = kGranted;
    uint64_t fence = 0;        // kGranted: ours; kHeld: the holder's
    FleetIdentity holder;      // kHeld: what the holder wrote of itself
    std::string holder_role;   // kHeld: its PostgreSQL role ("" before v3)
    absl::Duration remaining;  // kHeld: until the holder's lease ends
    FeedRow canonical;         // kCanonical: the fleet's entry
  };
  // Takes the fleet claim on (fingerprint, key_id) for `ttl`; or says who
  // holds it; or, when the fleet already has the canonical entry for the
  // candidate set, returns it (and takes nothing).
  absl::StatusOr<ClaimResult> Claim(const std::string& fingerprint,
                                    const std::string& key_id,
                                    const std::string& candidate_set,
                                    const FleetIdentity& me,
                                    absl::Duration ttl);
  // Extends our claim; false when it is no longer ours (superseded or
  // released).
  absl::StatusOr<bool> Renew(const std::string& fingerprint,
                             const std::string& key_id, uint64_t fence,
                             absl::Duration ttl);
  // Ends our claim without publishing (the tuning failed or was abandoned).
  absl::Status Release(const std::string& fingerprint,
                       const std::string& key_id, uint64_t fence);

  struct PublishResult {
    // kConflict: the fleet's live entry for the key is for another
    // candidate set (one live row per key); it stays until an operator
    // deletes it.
    enum Outcome { kAccepted, kCanonical, kSuperseded, kHeld, kConflict };
    Outcome outcome = kAccepted;
    uint64_t seq = 0;  // kAccepted: the feed position
    // kCanonical, kSuperseded: the fleet's entry, if it has one.
    std::optional<FeedRow> canonical;
    std::string reason;  // kSuperseded, kHeld, kConflict: for the log
  };
  // Publishes `entry` (a serialized v1::Entry) under `fence` (0: unfenced),
  // following the rules above. A repeat of an accepted publish (same
  // instance and fence) is accepted again, so a publisher may retry after
  // a lost answer.
  absl::StatusOr<PublishResult> Publish(const std::string& fingerprint,
                                        const std::string& key_id,
                                        const std::string& candidate_set,
                                        uint64_t fence,
                                        const std::string& entry,
                                        const FleetIdentity& me);

  // One publish of PublishAll.
  struct PublishRequest {
    std::string key_id;
    std::string candidate_set;
    uint64_t fence = 0;
    std::string entry;
  };
  // Publish for each request, in one transaction (one lock, one NOTIFY):
  // an answer per request, in order; or an error for all of them (nothing
  // published).
  absl::StatusOr<std::vector<PublishResult>> PublishAll(
      const std::string& fingerprint,
      const std::vector<PublishRequest>& requests, const FleetIdentity& me);

  // Marks the fingerprint's entries for these key ids deleted (all of them
  // when key_ids is empty): re-tuning fleet-wide. The deletions travel
  // through the feed. Returns how many were deleted.
  absl::StatusOr<uint64_t> Delete(const std::string& fingerprint,
                                  const std::vector<std::string>& key_ids);

  // Up to `limit` feed rows of the fingerprint after `after_seq`, in order,
  // none beyond FeedHead: a position the sequence never handed out (a row
  // from before schema version 2, its seq written by hand) is not read.
  absl::StatusOr<std::vector<FeedRow>> ReadFeed(const std::string& fingerprint,
                                                uint64_t after_seq, int limit);
  // The last position the fleet_feed sequence handed out (0: none yet).
  absl::StatusOr<uint64_t> FeedHead();
  // The fingerprint's newest feed position (0 when it has none).
  absl::StatusOr<uint64_t> LastSeq(const std::string& fingerprint);

  // LISTEN on the fingerprint's channel.
  absl::Status Listen(const std::string& fingerprint);
  // Waits up to `timeout` for a notification, or for `wake_fd` (if >= 0) to
  // become readable. True when a notification came. UNAVAILABLE when the
  // connection broke.
  absl::StatusOr<bool> WaitForNotify(absl::Duration timeout, int wake_fd);

 private:
  explicit FleetConnection(PGconn* conn) : conn_(conn) {}
  PGconn* conn_;
  // How long a statement's answer is waited for (Connect: the statement
  // timeout plus a margin); past it the connection is given up, so that a
  // stopped or unreachable server cannot hold a caller.
  absl::Duration answer_bound_ = absl::InfiniteDuration();
};

}  // namespace gputune::fleet

#endif  // GPUTUNE_DAEMON_FLEET_FLEET_STORE_H_
