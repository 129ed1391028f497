#include "daemon/fleet/fleet_store.h"

#include <libpq-events.h>
#include <libpq-fe.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace gputune::fleet {
namespace {

constexpr char kSchemaV1[] = R"sql(
CREATE TABLE fleet_meta (
  name  text PRIMARY KEY,
  value text NOT NULL
);
CREATE SEQUENCE fleet_fence;
CREATE SEQUENCE fleet_feed;
CREATE TABLE fleet_entries (
  fingerprint   text NOT NULL,
  key_id        text NOT NULL,
  candidate_set text NOT NULL,
  seq           bigint NOT NULL,
  deleted       boolean NOT NULL DEFAULT false,
  fence         bigint NOT NULL,
  host          text NOT NULL,
  gpu           text NOT NULL,
  instance      text NOT NULL,
  entry         bytea NOT NULL,
  published_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (fingerprint, key_id, candidate_set)
);
CREATE UNIQUE INDEX fleet_entries_feed ON fleet_entries (fingerprint, seq);
CREATE TABLE fleet_claims (
  fingerprint text NOT NULL,
  key_id      text NOT NULL,
  fence       bigint NOT NULL,
  host        text NOT NULL,
  gpu         text NOT NULL,
  instance    text NOT NULL,
  expires_at  timestamptz NOT NULL,
  released    boolean NOT NULL DEFAULT false,
  PRIMARY KEY (fingerprint, key_id)
);
INSERT INTO fleet_meta VALUES ('schema_version', '1'),
                              ('fleet_id', gen_random_uuid()::text);
)sql";

// Version 2: rows vouched for by PostgreSQL (docs/operations.md, "Roles and
// row-level security"; docs/architecture.md, "The fleet tier").
constexpr char kSchemaV2[] = R"sql(
-- Who published a row, as PostgreSQL knows it: set by the server (the
-- trigger below), whatever the client sends. Rows from before stay NULL.
ALTER TABLE fleet_entries ADD COLUMN publisher_role text;
ALTER TABLE fleet_entries ALTER COLUMN publisher_role SET DEFAULT current_user;
-- A fleet entry is a few KiB; NOT VALID: rows from before are not checked
-- (the followers skip those by their length).
ALTER TABLE fleet_entries ADD CONSTRAINT fleet_entries_size
  CHECK (octet_length(entry) <= 1048576) NOT VALID;
-- One live row per key and fingerprint. Before, a key could have one per
-- candidate set; the newest is what every follower serves (the feed
-- replaced the older ones), so the older ones become tombstones at their
-- own feed position (not a new one: followers that read them already
-- applied the newer row).
UPDATE fleet_entries e SET deleted = true, entry = ''::bytea
 WHERE NOT deleted AND EXISTS (
   SELECT 1 FROM fleet_entries n WHERE n.fingerprint = e.fingerprint
      AND n.key_id = e.key_id AND NOT n.deleted AND n.seq > e.seq);
CREATE UNIQUE INDEX fleet_entries_live ON fleet_entries (fingerprint, key_id)
  WHERE NOT deleted;
-- A feed position the sequence never handed out (written by hand) is taken
-- back into it, at the end of the feed.
UPDATE fleet_entries SET seq = nextval('fleet_feed')
 WHERE seq > (SELECT last_value FROM fleet_feed);
-- Every insert and update of a row: its feed position from the sequence,
-- under the fingerprint's feed lock (so positions commit in order, however
-- the row was written), its role and its time from the server.
CREATE FUNCTION fleet_entries_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(NEW.fingerprint, 0));
  NEW.seq := nextval('fleet_feed');
  NEW.publisher_role := current_user;
  NEW.published_at := clock_timestamp();
  RETURN NEW;
END $$;
CREATE TRIGGER fleet_entries_stamp BEFORE INSERT OR UPDATE ON fleet_entries
  FOR EACH ROW EXECUTE FUNCTION fleet_entries_stamp();
-- Row-level security (the owner and superusers bypass it): every role
-- reads every row; a role inserts live rows as itself, and updates its own
-- live rows and tombstones (a publish after a deletion revives one); only
-- members of gputune_operator update any row and make tombstones
-- (gputunectl delete --fleet). No policy for DELETE: no role but the
-- owner removes rows.
CREATE FUNCTION fleet_is_operator() RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'gputune_operator'
                    AND pg_has_role(current_user, r.oid, 'MEMBER'))
$$;
ALTER TABLE fleet_entries ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_entries_read ON fleet_entries FOR SELECT USING (true);
CREATE POLICY fleet_entries_insert ON fleet_entries FOR INSERT
  WITH CHECK (publisher_role = current_user AND NOT deleted);
CREATE POLICY fleet_entries_update ON fleet_entries FOR UPDATE
  USING (publisher_role = current_user OR deleted OR fleet_is_operator())
  WITH CHECK (publisher_role = current_user
              AND (NOT deleted OR fleet_is_operator()));
UPDATE fleet_meta SET value = '2' WHERE name = 'schema_version';
)sql";
static_assert(kMaxFleetEntryBytes == 1048576, "the CHECK in kSchemaV2");

// Version 3: claims vouched for by PostgreSQL too (docs/operations.md, "The
// trust model"). A trigger rather than row-level security: a policy would
// also hide another role's claim from the publishes' SELECT ... FOR UPDATE,
// which must see (and wait on) every claim of the key.
constexpr char kSchemaV3[] = R"sql(
-- Who took a claim, as PostgreSQL knows it. Claims from before stay NULL
-- and are anyone's to take over (they are a lease long).
ALTER TABLE fleet_claims ADD COLUMN claimer_role text;
ALTER TABLE fleet_claims ALTER COLUMN claimer_role SET DEFAULT current_user;
-- Every insert and update of a claim: its role is the writing role and a
-- new fence comes from the sequence, whatever the statement says. A live
-- claim (neither released nor past its lease) of another role is left as
-- it is: the statement changes no row, as a row-level security policy
-- would (members of gputune_operator excepted).
CREATE FUNCTION fleet_claims_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.claimer_role IS DISTINCT FROM current_user
     AND OLD.claimer_role IS NOT NULL AND NOT OLD.released
     AND OLD.expires_at > clock_timestamp() AND NOT fleet_is_operator() THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' OR NEW.fence IS DISTINCT FROM OLD.fence THEN
    NEW.fence := nextval('fleet_fence');
  END IF;
  NEW.claimer_role := current_user;
  RETURN NEW;
END $$;
CREATE TRIGGER fleet_claims_stamp BEFORE INSERT OR UPDATE ON fleet_claims
  FOR EACH ROW EXECUTE FUNCTION fleet_claims_stamp();
UPDATE fleet_meta SET value = '3' WHERE name = 'schema_version';
)sql";

// Every migration takes the schema from version i to i + 1.
constexpr const char* kMigrations[] = {kSchemaV1, kSchemaV2, kSchemaV3};
static_assert(std::size(kMigrations) == kFleetSchemaVersion);

// Serialises schema creation among daemons starting at once.
constexpr char kSchemaLock[] = "SELECT pg_advisory_xact_lock(7236011937)";
// Serialises the feed of one fingerprint ($1).
constexpr char kFeedLock[] =
    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

struct ResultCloser {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultCloser>;

// A statement parameter: text, or binary bytes (bytea).
struct Param {
  std::string value;
  bool binary = false;
};
Param Text(std::string v) { return {std::move(v), false}; }
Param Int(uint64_t v) { return {absl::StrCat(v), false}; }
Param Bytes(std::string v) { return {std::move(v), true}; }

// libpq's messages span lines ("...\n\tIs the server running..."): one
// line, for logs and GetStatus.
std::string Trim(const char* message) {
  std::string out;
  bool space = false;
  for (char c : absl::StripAsciiWhitespace(message)) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// The libpq event procedure under which a connection keeps how long Exec
// waits for its answers (PQinstanceData: an absl::Duration owned by the
// FleetConnection). It has nothing to do on libpq's events.
int AnswerBoundProc(PGEventId, void*, void*) { return 1; }

// How long Exec waits for PostgreSQL's answer on `conn`; infinite for a
// connection Connect did not make.
absl::Duration AnswerBound(PGconn* conn) {
  const void* bound = PQinstanceData(conn, AnswerBoundProc);
  return bound == nullptr ? absl::InfiniteDuration()
                          : *static_cast<const absl::Duration*>(bound);
}

// Waits until `conn`'s socket is ready for `events` or `give_up` passes;
// false on the latter (or a poll error).
bool WaitSocket(PGconn* conn, short events, absl::Time give_up) {
  while (true) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd fd = {PQsocket(conn), events, 0};
    const int n =
        poll(&fd, 1,
             left == absl::InfiniteDuration()
                 ? -1
                 : static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Sends `sql` and collects its result as PQexec would (the first error, or
// else the last result), but waits for the server at most AnswerBound(conn):
// statement_timeout is enforced by the server, and a server that is stopped
// or behind a stalled network never sends it. Past the bound the socket is
// shut down, so the connection is broken (ok() false) and gets replaced.
PGresult* ExecBounded(PGconn* conn, const char* sql,
                      const std::vector<Param>& params, bool* timed_out) {
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  for (const Param& p : params) {
    values.push_back(p.value.data());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  // Without parameters, the simple protocol: a migration is several
  // statements.
  const int sent =
      params.empty() ? PQsendQuery(conn, sql)
                     : PQsendQueryParams(
                           conn, sql, static_cast<int>(params.size()), nullptr,
                           values.data(), lengths.data(), formats.data(), 0);
  if (!sent) return nullptr;
  const absl::Time give_up = absl::Now() + AnswerBound(conn);
  auto abandon = [&] {
    *timed_out = true;
    shutdown(PQsocket(conn), SHUT_RDWR);
    while (PGresult* r = PQgetResult(conn)) PQclear(r);
    return nullptr;
  };
  int flushed;
  while ((flushed = PQflush(conn)) == 1) {
    if (!WaitSocket(conn, POLLIN | POLLOUT, give_up)) return abandon();
    if (!PQconsumeInput(conn)) break;
  }
  PGresult* kept = nullptr;
  while (true) {
    while (PQisBusy(conn)) {
      if (!WaitSocket(conn, POLLIN, give_up)) {
        PQclear(kept);
        return abandon();
      }
      if (!PQconsumeInput(conn)) break;
    }
    PGresult* r = PQgetResult(conn);
    if (r == nullptr) break;
    if (kept != nullptr && PQresultStatus(kept) == PGRES_FATAL_ERROR) {
      PQclear(r);
    } else {
      PQclear(kept);
      kept = r;
    }
    if (PQstatus(conn) == CONNECTION_BAD) break;
  }
  return kept;
}

absl::StatusOr<Result> Exec(PGconn* conn, const char* sql,
                            const std::vector<Param>& params = {}) {
  bool timed_out = false;
  Result r(ExecBounded(conn, sql, params, &timed_out));
  if (timed_out) {
    return absl::UnavailableError(absl::StrCat(
        "no answer from PostgreSQL within ",
        absl::FormatDuration(AnswerBound(conn)),
        " (a stopped server or a stalled network): the fleet connection is "
        "dropped"));
  }
  const ExecStatusType st = PQresultStatus(r.get());
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  const std::string message =
      r ? Trim(PQresultErrorMessage(r.get())) : Trim(PQerrorMessage(conn));
  if (PQstatus(conn) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("the fleet connection broke: ", message));
  }
  const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : "";
  const absl::string_view code = state ? state : "";
  if (code == "42501") {  // insufficient_privilege
    return absl::PermissionDeniedError(message);
  }
  if (code == "57014" || absl::StartsWith(code, "40") ||
      absl::StartsWith(code, "08") || code == "55P03" ||
      absl::StartsWith(code, "53") || absl::StartsWith(code, "57") ||
      absl::StartsWith(code, "58")) {
    // canceled (statement_timeout), serialization/deadlock, connection,
    // lock not available, insufficient resources (disk full), operator
    // intervention, system error: worth a retry.
    return absl::UnavailableError(message);
  }
  if (absl::StartsWith(code, "22") || absl::StartsWith(code, "23")) {
    // data exception, integrity constraint violation: these values are
    // refused, and would be again.
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

std::string Value(const Result& r, int row, int col) {
  return std::string(PQgetvalue(r.get(), row, col),
                     PQgetlength(r.get(), row, col));
}

uint64_t UintValue(const Result& r, int row, int col) {
  uint64_t v = 0;
  (void)absl::SimpleAtoi(Value(r, row, col), &v);
  return v;
}

bool BoolValue(const Result& r, int row, int col) {
  return Value(r, row, col) == "t";
}

// A bytea column in text form (hex) as its bytes.
std::string ByteaValue(const Result& r, int row, int col) {
  size_t n = 0;
  unsigned char* bytes = PQunescapeBytea(
      reinterpret_cast<const unsigned char*>(PQgetvalue(r.get(), row, col)),
      &n);
  if (bytes == nullptr) return "";
  std::string out(reinterpret_cast<char*>(bytes), n);
  PQfreemem(bytes);
  return out;
}

// BEGIN ... COMMIT around `body`; ROLLBACK when it fails.
template <typename T, typename F>
absl::StatusOr<T> InTransaction(PGconn* conn, F body) {
  if (auto r = Exec(conn, "BEGIN"); !r.ok()) return r.status();
  absl::StatusOr<T> result = body();
  if (!result.ok()) {
    (void)Exec(conn, "ROLLBACK");
    return result;
  }
  if (auto r = Exec(conn, "COMMIT"); !r.ok()) return r.status();
  return result;
}

std::string Channel(const std::string& fingerprint) {
  return absl::StrCat("gputune_fleet_", fingerprint);
}

absl::Status CheckFingerprint(const std::string& fingerprint) {
  if (fingerprint.empty() || fingerprint.size() > 32) {
    return absl::InvalidArgumentError("fingerprint digest: 1-32 hex digits");
  }
  for (char c : fingerprint) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) ||
        absl::ascii_isupper(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          "fingerprint digest: lowercase hex digits only");
    }
  }
  return absl::OkStatus();
}

absl::Duration Millis(const std::string& text) {
  double ms = 0;
  (void)absl::SimpleAtod(text, &ms);
  return absl::Milliseconds(ms);
}

std::string Ms(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d));
}

// A row's columns, RowAt's order. An entry longer than kMaxFleetEntryBytes
// (a row from before the schema's CHECK) comes back as NULL with its
// length: its bytes never leave the server.
const std::string& RowColumns() {
  static const std::string* const columns = new std::string(absl::StrCat(
      "seq, key_id, candidate_set, deleted, CASE WHEN octet_length(entry) <= ",
      kMaxFleetEntryBytes,
      " THEN entry END, host, gpu, instance, fence, "
      "extract(epoch FROM published_at) * 1000000, "
      "coalesce(publisher_role, ''), octet_length(entry)"));
  return *columns;
}

FleetConnection::FeedRow RowAt(const Result& r, int i) {
  FleetConnection::FeedRow row;
  row.seq = UintValue(r, i, 0);
  row.key_id = Value(r, i, 1);
  row.candidate_set = Value(r, i, 2);
  row.deleted = BoolValue(r, i, 3);
  row.entry_bytes = UintValue(r, i, 11);
  row.oversized = PQgetisnull(r.get(), i, 4) != 0;
  if (!row.deleted && !row.oversized) row.entry = ByteaValue(r, i, 4);
  row.publisher = {Value(r, i, 5), Value(r, i, 6), Value(r, i, 7)};
  row.fence = UintValue(r, i, 8);
  double micros = 0;
  (void)absl::SimpleAtod(Value(r, i, 9), &micros);
  row.published_at = absl::FromUnixMicros(static_cast<int64_t>(micros));
  row.role = Value(r, i, 10);
  return row;
}

// The canonical (live) entry of (fingerprint, key, candidate set), if any.
absl::StatusOr<std::optional<FleetConnection::FeedRow>> Canonical(
    PGconn* conn, const std::string& fingerprint, const std::string& key_id,
    const std::string& candidate_set) {
  absl::StatusOr<Result> r =
      Exec(conn,
           absl::StrCat("SELECT ", RowColumns(),
                        " FROM fleet_entries WHERE fingerprint = $1 AND "
                        "key_id = $2 AND candidate_set = $3 AND NOT deleted")
               .c_str(),
           {Text(fingerprint), Text(key_id), Text(candidate_set)});
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) != 1)
    return std::optional<FleetConnection::FeedRow>();
  return std::optional<FleetConnection::FeedRow>(RowAt(*r, 0));
}

// One publish, inside a transaction that holds the fingerprint's feed lock
// (FleetConnection::Publish states the rules).
absl::StatusOr<FleetConnection::PublishResult> PublishLocked(
    PGconn* conn_, const std::string& fingerprint,
    const FleetConnection::PublishRequest& request, const FleetIdentity& me) {
  using PublishResult = FleetConnection::PublishResult;
  using FeedRow = FleetConnection::FeedRow;
  const std::string& key_id = request.key_id;
  const std::string& candidate_set = request.candidate_set;
  const uint64_t fence = request.fence;
  const std::string& entry = request.entry;
  PublishResult result;
  auto canonical = [&] {
    return Canonical(conn_, fingerprint, key_id, candidate_set);
  };
  // The key's claim, locked: claims wait for this publish.
  absl::StatusOr<Result> claim = Exec(
      conn_,
      "SELECT fence, host, gpu, instance, released, "
      "  expires_at > clock_timestamp() "
      "FROM fleet_claims WHERE fingerprint = $1 AND key_id = $2 FOR UPDATE",
      {Text(fingerprint), Text(key_id)});
  if (!claim.ok()) return claim.status();
  const bool has_claim = PQntuples(claim->get()) == 1;
  const uint64_t claim_fence = has_claim ? UintValue(*claim, 0, 0) : 0;
  const std::string holder =
      has_claim ? absl::StrCat(Value(*claim, 0, 1), " ", Value(*claim, 0, 2))
                : "";
  if (fence != 0 && claim_fence != fence) {
    result.outcome = PublishResult::kSuperseded;
    result.reason =
        has_claim
            ? absl::StrCat("fleet claim ", fence, " was superseded by claim ",
                           claim_fence, " of ", holder)
            : absl::StrCat("fleet claim ", fence, " no longer exists");
    absl::StatusOr<std::optional<FeedRow>> c = canonical();
    if (!c.ok()) return c.status();
    result.canonical = std::move(*c);
    return result;
  }
  if (fence == 0 && has_claim && !BoolValue(*claim, 0, 4) &&
      BoolValue(*claim, 0, 5) && Value(*claim, 0, 3) != me.instance) {
    result.outcome = PublishResult::kHeld;
    result.reason =
        absl::StrCat("fleet claim ", claim_fence, " of ", holder, " is live");
    return result;
  }
  absl::StatusOr<std::optional<FeedRow>> existing = canonical();
  if (!existing.ok()) return existing.status();
  if (!existing->has_value()) {
    // One live row per key: the key's entry for another candidate set
    // stays the fleet's until an operator deletes it.
    absl::StatusOr<Result> other =
        Exec(conn_,
             "SELECT candidate_set, coalesce(publisher_role, '(unknown)') "
             "FROM fleet_entries WHERE fingerprint = $1 AND key_id = $2 "
             "AND NOT deleted",
             {Text(fingerprint), Text(key_id)});
    if (!other.ok()) return other.status();
    if (PQntuples(other->get()) > 0) {
      result.outcome = PublishResult::kConflict;
      result.reason = absl::StrCat(
          "the fleet's entry for the key is for candidate set ",
          Value(*other, 0, 0), " (published by role ", Value(*other, 0, 1),
          "): gputunectl delete --fleet, as an operator, replaces it");
      return result;
    }
  }
  if (existing->has_value()) {
    if ((*existing)->publisher.instance == me.instance &&
        (*existing)->fence == fence) {
      result.outcome = PublishResult::kAccepted;  // a retry of ours
      result.seq = (*existing)->seq;
      return result;
    }
    result.outcome = PublishResult::kCanonical;
    result.canonical = std::move(*existing);
    return result;
  }
  absl::StatusOr<Result> inserted = Exec(
      conn_,
      "INSERT INTO fleet_entries AS e (fingerprint, key_id, candidate_set, "
      "  seq, fence, host, gpu, instance, entry) "
      "VALUES ($1, $2, $3, nextval('fleet_feed'), $4, $5, $6, $7, $8) "
      "ON CONFLICT (fingerprint, key_id, candidate_set) DO UPDATE SET "
      "  seq = EXCLUDED.seq, deleted = false, fence = EXCLUDED.fence, "
      "  host = EXCLUDED.host, gpu = EXCLUDED.gpu, "
      "  instance = EXCLUDED.instance, entry = EXCLUDED.entry, "
      "  published_at = clock_timestamp() "
      "WHERE e.deleted "
      "RETURNING seq",
      {Text(fingerprint), Text(key_id), Text(candidate_set), Int(fence),
       Text(me.host), Text(me.gpu), Text(me.instance), Bytes(entry)});
  if (!inserted.ok()) return inserted.status();
  if (PQntuples(inserted->get()) != 1) {
    return absl::UnavailableError("the fleet entry changed meanwhile: retry");
  }
  result.outcome = PublishResult::kAccepted;
  result.seq = UintValue(*inserted, 0, 0);
  // The claim ends with the publish. An unfenced publish leaves a released
  // claim row, so that later claims of the key wait on its row too.
  absl::StatusOr<Result> released =
      fence != 0
          ? Exec(conn_,
                 "UPDATE fleet_claims SET released = true WHERE "
                 "fingerprint = $1 AND key_id = $2 AND fence = $3",
                 {Text(fingerprint), Text(key_id), Int(fence)})
          : Exec(conn_,
                 "INSERT INTO fleet_claims AS c (fingerprint, key_id, fence, "
                 "  host, gpu, instance, expires_at, released) "
                 "VALUES ($1, $2, nextval('fleet_fence'), $3, $4, $5, "
                 "        clock_timestamp(), true) "
                 "ON CONFLICT (fingerprint, key_id) DO UPDATE SET "
                 "  released = true",
                 {Text(fingerprint), Text(key_id), Text(me.host), Text(me.gpu),
                  Text(me.instance)});
  if (!released.ok()) return released.status();
  return result;
}

}  // namespace

std::string RedactConnInfo(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    if (error != nullptr) PQfreemem(error);
    return "(invalid connection string)";
  }
  std::vector<std::string> parts;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0') continue;
    const absl::string_view keyword = o->keyword;
    if (keyword == "password") {
      parts.push_back("password=***");
    } else {
      parts.push_back(absl::StrCat(keyword, "=", o->val));
    }
  }
  PQconninfoFree(options);
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<std::unique_ptr<FleetConnection>> FleetConnection::Connect(
    const std::string& conninfo, absl::Duration statement_timeout) {
  {
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
    if (options == nullptr) {
      std::string why = error ? Trim(error) : "cannot parse it";
      if (error != nullptr) PQfreemem(error);
      return absl::InvalidArgumentError(absl::StrCat(
          "--fleet: not a libpq connection string or postgresql:// URI: ",
          why));
    }
    PQconninfoFree(options);
  }
  // Defaults first: the string given overrides them (expand_dbname).
  const char* keywords[] = {"connect_timeout", "application_name", "dbname",
                            nullptr};
  const char* values[] = {"5", "gputuned", conninfo.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError("out of memory");
  std::unique_ptr<FleetConnection> c(new FleetConnection(conn));
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = Trim(PQerrorMessage(conn));
    if (absl::StrContains(message, "password authentication failed") ||
        absl::StrContains(message, "no password supplied") ||
        absl::StrContains(message, "authentication failed")) {
      return absl::UnauthenticatedError(absl::StrCat(
          message,
          " (check the password in --fleet, PGPASSFILE or ~/.pgpass)"));
    }
    return absl::UnavailableError(message);
  }
  // The server's statement timeout plus a quarter (at most 1 s) for the
  // answer to arrive; beyond, Exec gives the connection up.
  c->answer_bound_ =
      statement_timeout + std::min(statement_timeout / 4, absl::Seconds(1));
  if (!PQregisterEventProc(conn, AnswerBoundProc, "gputune-answer-bound",
                           nullptr) ||
      !PQsetInstanceData(conn, AnswerBoundProc, &c->answer_bound_)) {
    return absl::ResourceExhaustedError("cannot set up the fleet connection");
  }
  if (auto r = Exec(
          conn, absl::StrCat("SET statement_timeout = ", Ms(statement_timeout))
                    .c_str());
      !r.ok()) {
    return r.status();
  }
  return c;
}

FleetConnection::~FleetConnection() { PQfinish(conn_); }

bool FleetConnection::ok() const { return PQstatus(conn_) == CONNECTION_OK; }

absl::StatusOr<std::string> FleetConnection::PrepareSchema(int up_to) {
  return InTransaction<
      std::string>(conn_, [&]() -> absl::StatusOr<std::string> {
    if (auto r = Exec(conn_, kSchemaLock); !r.ok()) return r.status();
    absl::StatusOr<Result> exists =
        Exec(conn_, "SELECT to_regclass('fleet_meta') IS NOT NULL");
    if (!exists.ok()) return exists.status();
    int64_t version = 0;
    if (BoolValue(*exists, 0, 0)) {
      absl::StatusOr<Result> v = Exec(
          conn_, "SELECT value FROM fleet_meta WHERE name = 'schema_version'");
      if (!v.ok()) return v.status();
      if (PQntuples(v->get()) != 1 ||
          !absl::SimpleAtoi(Value(*v, 0, 0), &version)) {
        return absl::FailedPreconditionError(
            "fleet_meta has no readable schema_version: this database is not "
            "a gputune fleet (point --fleet at the fleet's own database)");
      }
    }
    if (version > kFleetSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the fleet schema version ", version,
          " is newer than this gputuned understands (", kFleetSchemaVersion,
          "): upgrade gputuned on this host; serving locally until then"));
    }
    for (int64_t v = version; v < std::min(up_to, kFleetSchemaVersion); ++v) {
      if (auto r = Exec(conn_, kMigrations[v]); !r.ok()) {
        if (r.status().code() == absl::StatusCode::kPermissionDenied) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the fleet schema needs creating or migrating to version ", v + 1,
              " and this role may not: ", r.status().message(),
              " (run gputuned once as the fleet database's owner)"));
        }
        return absl::Status(r.status().code(),
                            absl::StrCat("migrating the fleet schema to v",
                                         v + 1, ": ", r.status().message()));
      }
    }
    absl::StatusOr<Result> id =
        Exec(conn_, "SELECT value FROM fleet_meta WHERE name = 'fleet_id'");
    if (!id.ok()) return id.status();
    if (PQntuples(id->get()) != 1) {
      return absl::FailedPreconditionError("fleet_meta has no fleet_id");
    }
    return Value(*id, 0, 0);
  });
}

absl::StatusOr<FleetConnection::ClaimResult> FleetConnection::Claim(
    const std::string& fingerprint, const std::string& key_id,
    const std::string& candidate_set, const FleetIdentity& me,
    absl::Duration ttl) {
  if (auto s = CheckFingerprint(fingerprint); !s.ok()) return s;
  return InTransaction<
      ClaimResult>(conn_, [&]() -> absl::StatusOr<ClaimResult> {
    ClaimResult result;
    // The claim first: it waits for a publish of the key in flight (which
    // holds the claim's row), so the check for a canonical entry below sees
    // that publish.
    absl::StatusOr<Result> granted = Exec(
        conn_,
        "INSERT INTO fleet_claims AS c "
        "  (fingerprint, key_id, fence, host, gpu, instance, expires_at) "
        "VALUES ($1, $2, nextval('fleet_fence'), $3, $4, $5, "
        "        clock_timestamp() + $6 * interval '1 millisecond') "
        "ON CONFLICT (fingerprint, key_id) DO UPDATE SET "
        "  fence = EXCLUDED.fence, host = EXCLUDED.host, gpu = EXCLUDED.gpu, "
        "  instance = EXCLUDED.instance, expires_at = EXCLUDED.expires_at, "
        "  released = false "
        "WHERE c.released OR c.expires_at <= clock_timestamp() "
        "   OR c.instance = EXCLUDED.instance "
        "RETURNING fence",
        {Text(fingerprint), Text(key_id), Text(me.host), Text(me.gpu),
         Text(me.instance), Text(Ms(ttl))});
    if (!granted.ok()) return granted.status();
    if (PQntuples(granted->get()) == 1) {
      result.outcome = ClaimResult::kGranted;
      result.fence = UintValue(*granted, 0, 0);
    } else {
      absl::StatusOr<Result> held =
          Exec(conn_,
               "SELECT fence, host, gpu, instance, "
               "  extract(epoch FROM expires_at - clock_timestamp()) * 1000, "
               "  coalesce(claimer_role, '') "
               "FROM fleet_claims WHERE fingerprint = $1 AND key_id = $2",
               {Text(fingerprint), Text(key_id)});
      if (!held.ok()) return held.status();
      if (PQntuples(held->get()) != 1) {
        return absl::UnavailableError("the fleet claim vanished: retry");
      }
      result.outcome = ClaimResult::kHeld;
      result.fence = UintValue(*held, 0, 0);
      result.holder = {Value(*held, 0, 1), Value(*held, 0, 2),
                       Value(*held, 0, 3)};
      result.remaining = Millis(Value(*held, 0, 4));
      result.holder_role = Value(*held, 0, 5);
    }
    absl::StatusOr<std::optional<FeedRow>> canonical =
        Canonical(conn_, fingerprint, key_id, candidate_set);
    if (!canonical.ok()) return canonical.status();
    if (canonical->has_value()) {
      if (result.outcome == ClaimResult::kGranted) {
        if (auto r = Exec(conn_,
                          "UPDATE fleet_claims SET released = true WHERE "
                          "fingerprint = $1 AND key_id = $2 AND fence = $3",
                          {Text(fingerprint), Text(key_id), Int(result.fence)});
            !r.ok()) {
          return r.status();
        }
      }
      result = ClaimResult();
      result.outcome = ClaimResult::kCanonical;
      result.canonical = std::move(**canonical);
    }
    return result;
  });
}

absl::StatusOr<bool> FleetConnection::Renew(const std::string& fingerprint,
                                            const std::string& key_id,
                                            uint64_t fence,
                                            absl::Duration ttl) {
  absl::StatusOr<Result> r = Exec(
      conn_,
      "UPDATE fleet_claims SET expires_at = greatest(expires_at, "
      "  clock_timestamp() + $4 * interval '1 millisecond') "
      "WHERE fingerprint = $1 AND key_id = $2 AND fence = $3 AND NOT released "
      "RETURNING 1",
      {Text(fingerprint), Text(key_id), Int(fence), Text(Ms(ttl))});
  if (!r.ok()) return r.status();
  return PQntuples(r->get()) == 1;
}

absl::Status FleetConnection::Release(const std::string& fingerprint,
                                      const std::string& key_id,
                                      uint64_t fence) {
  return Exec(conn_,
              "UPDATE fleet_claims SET released = true WHERE fingerprint = $1 "
              "AND key_id = $2 AND fence = $3",
              {Text(fingerprint), Text(key_id), Int(fence)})
      .status();
}

absl::StatusOr<FleetConnection::PublishResult> FleetConnection::Publish(
    const std::string& fingerprint, const std::string& key_id,
    const std::string& candidate_set, uint64_t fence, const std::string& entry,
    const FleetIdentity& me) {
  absl::StatusOr<std::vector<PublishResult>> results = PublishAll(
      fingerprint, {PublishRequest{key_id, candidate_set, fence, entry}}, me);
  if (!results.ok()) return results.status();
  return std::move(results->front());
}

absl::StatusOr<std::vector<FleetConnection::PublishResult>>
FleetConnection::PublishAll(const std::string& fingerprint,
                            const std::vector<PublishRequest>& requests,
                            const FleetIdentity& me) {
  if (auto s = CheckFingerprint(fingerprint); !s.ok()) return s;
  return InTransaction<std::vector<PublishResult>>(
      conn_, [&]() -> absl::StatusOr<std::vector<PublishResult>> {
        if (auto r = Exec(conn_, kFeedLock, {Text(fingerprint)}); !r.ok()) {
          return r.status();
        }
        std::vector<PublishResult> results;
        uint64_t last_seq = 0;
        for (const PublishRequest& request : requests) {
          absl::StatusOr<PublishResult> r =
              PublishLocked(conn_, fingerprint, request, me);
          if (!r.ok()) return r.status();
          if (r->outcome == PublishResult::kAccepted) {
            last_seq = std::max(last_seq, r->seq);
          }
          results.push_back(std::move(*r));
        }
        if (last_seq != 0) {
          if (auto r = Exec(conn_, "SELECT pg_notify($1, $2)",
                            {Text(Channel(fingerprint)), Int(last_seq)});
              !r.ok()) {
            return r.status();
          }
        }
        return results;
      });
}

absl::StatusOr<uint64_t> FleetConnection::Delete(
    const std::string& fingerprint, const std::vector<std::string>& key_ids) {
  if (auto s = CheckFingerprint(fingerprint); !s.ok()) return s;
  return InTransaction<uint64_t>(conn_, [&]() -> absl::StatusOr<uint64_t> {
    if (auto r = Exec(conn_, kFeedLock, {Text(fingerprint)}); !r.ok()) {
      return r.status();
    }
    // Sequence numbers are taken under the lock, so the feed stays ordered.
    constexpr char kDelete[] =
        "UPDATE fleet_entries SET deleted = true, entry = ''::bytea, "
        "  seq = nextval('fleet_feed'), published_at = clock_timestamp() "
        "WHERE fingerprint = $1 AND NOT deleted AND ($2 = '' OR key_id = $2) "
        "RETURNING seq";
    uint64_t n = 0;
    const std::vector<std::string> all = {""};
    for (const std::string& id : key_ids.empty() ? all : key_ids) {
      absl::StatusOr<Result> r =
          Exec(conn_, kDelete, {Text(fingerprint), Text(id)});
      if (!r.ok()) return r.status();
      n += static_cast<uint64_t>(PQntuples(r->get()));
    }
    if (n > 0) {
      if (auto s = Exec(conn_, "SELECT pg_notify($1, 'deleted')",
                        {Text(Channel(fingerprint))});
          !s.ok()) {
        return s.status();
      }
    }
    return n;
  });
}

absl::StatusOr<std::vector<FleetConnection::FeedRow>> FleetConnection::ReadFeed(
    const std::string& fingerprint, uint64_t after_seq, int limit) {
  absl::StatusOr<Result> r = Exec(
      conn_,
      absl::StrCat(
          "SELECT ", RowColumns(),
          " FROM fleet_entries WHERE fingerprint = $1 AND seq > $2 "
          "  AND seq <= coalesce(pg_sequence_last_value('fleet_feed'), 0) "
          "ORDER BY fingerprint, seq LIMIT $3")
          .c_str(),
      {Text(fingerprint), Int(after_seq), Int(static_cast<uint64_t>(limit))});
  if (!r.ok()) return r.status();
  std::vector<FeedRow> rows;
  const int n = PQntuples(r->get());
  rows.reserve(n);
  for (int i = 0; i < n; ++i) rows.push_back(RowAt(*r, i));
  return rows;
}

absl::StatusOr<uint64_t> FleetConnection::LastSeq(
    const std::string& fingerprint) {
  absl::StatusOr<Result> r = Exec(
      conn_,
      "SELECT coalesce(max(seq), 0) FROM fleet_entries WHERE fingerprint = $1",
      {Text(fingerprint)});
  if (!r.ok()) return r.status();
  return UintValue(*r, 0, 0);
}

absl::StatusOr<uint64_t> FleetConnection::FeedHead() {
  absl::StatusOr<Result> r =
      Exec(conn_, "SELECT coalesce(pg_sequence_last_value('fleet_feed'), 0)");
  if (!r.ok()) return r.status();
  return UintValue(*r, 0, 0);
}

absl::Status FleetConnection::Listen(const std::string& fingerprint) {
  if (auto s = CheckFingerprint(fingerprint); !s.ok()) return s;
  // A checked digest is a valid identifier as it is.
  return Exec(conn_, absl::StrCat("LISTEN ", Channel(fingerprint)).c_str())
      .status();
}

absl::StatusOr<bool> FleetConnection::WaitForNotify(absl::Duration timeout,
                                                    int wake_fd) {
  auto drain = [&]() -> absl::StatusOr<bool> {
    if (PQconsumeInput(conn_) == 0) {
      return absl::UnavailableError(absl::StrCat("the fleet connection broke: ",
                                                 Trim(PQerrorMessage(conn_))));
    }
    bool got = false;
    while (PGnotify* n = PQnotifies(conn_)) {
      got = true;
      PQfreemem(n);
    }
    return got;
  };
  absl::StatusOr<bool> pending = drain();
  if (!pending.ok() || *pending) return pending;
  pollfd fds[2] = {{PQsocket(conn_), POLLIN, 0}, {wake_fd, POLLIN, 0}};
  const int n = poll(fds, wake_fd >= 0 ? 2 : 1,
                     static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  if (n <= 0 || (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) == 0) {
    return false;
  }
  return drain();
}

}  // namespace gputune::fleet
