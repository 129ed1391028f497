#!/usr/bin/env bash
# What the fleet schema's claims trigger (version 3, daemon/fleet/fleet_store.cc)
# costs a claim, alone: 10,000 claims (an INSERT ... ON CONFLICT as
# FleetConnection::Claim sends it, then its release) in one PL/pgSQL loop, in
# a database at schema version 2 and one at version 3, twice each, on a
# scratch PostgreSQL 15 (fsync off) in a temporary directory.
#   bash bench/fleet/claims_trigger_cost.sh     (as root: the server runs as postgres)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/claims-trigger.XXXXXX)
chown postgres "$dir"
as_pg() { su postgres -c "$*"; }
trap 'as_pg "$bin/pg_ctl -D $dir/data stop -m fast" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
as_pg "$bin/initdb -D $dir/data -A trust" >/dev/null
as_pg "$bin/pg_ctl -D $dir/data -l $dir/log -w start -o '-k $dir -c listen_addresses= -c fsync=off'" >/dev/null
# The migrations, as the daemon runs them.
python3 - "$root/daemon/fleet/fleet_store.cc" "$dir" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
sql = {n: re.search(r'constexpr char %s\[\] = R"sql\((.*?)\)sql";' % n, src, re.S).group(1)
       for n in ("kSchemaV1", "kSchemaV2", "kSchemaV3")}
open(sys.argv[2] + "/v2.sql", "w").write(sql["kSchemaV1"] + sql["kSchemaV2"])
open(sys.argv[2] + "/v3.sql", "w").write(sql["kSchemaV3"])
open(sys.argv[2] + "/loop.sql", "w").write(r"""\timing on
DO $$ BEGIN FOR i IN 1..10000 LOOP
  INSERT INTO fleet_claims AS c (fingerprint, key_id, fence, host, gpu, instance, expires_at)
  VALUES ('fp', 'k' || i, nextval('fleet_fence'), 'h', 'g', 'i',
          clock_timestamp() + interval '1 minute')
  ON CONFLICT (fingerprint, key_id) DO UPDATE SET fence = EXCLUDED.fence, released = false
  WHERE c.released OR c.expires_at <= clock_timestamp() OR c.instance = EXCLUDED.instance;
  UPDATE fleet_claims SET released = true WHERE fingerprint = 'fp' AND key_id = 'k' || i;
END LOOP; END $$;
""")
PY
chmod 644 "$dir"/*.sql
psql="psql -h $dir -q -v ON_ERROR_STOP=1"
as_pg "$psql -d postgres -c 'CREATE DATABASE v2' -c 'CREATE DATABASE v3'"
as_pg "$psql -d v2 -f $dir/v2.sql"
as_pg "$psql -d v3 -f $dir/v2.sql -f $dir/v3.sql"
for db in v2 v3 v2 v3; do
  echo "schema $db: $(as_pg "$psql -d $db -c 'TRUNCATE fleet_claims' -f $dir/loop.sql" | grep Time)"
done
