-- gputune fleet roles (docs/operations.md, "Roles and row-level security").
--
-- Run in the fleet database, once its schema exists (the first gputuned
-- started as the database's owner makes it), as a role that may create
-- roles and grant on the fleet's tables (a superuser, or the owner with
-- CREATEROLE):
--
--   psql -d gputune_fleet -f /usr/share/doc/gputuned/fleet-roles.sql
--
-- Running it again changes nothing. It makes two group roles, without
-- login, and grants them what a daemon and an operator need:
--   gputune_host      one member per GPU host: its daemons publish, claim
--                     and follow; row-level security lets it insert rows
--                     only as itself and update only its own rows.
--   gputune_operator  people (or automation) that delete fleet entries
--                     (gputunectl delete --fleet): may update any row.
-- Then give each host, and each operator, a login role of its own:
--
--   CREATE ROLE "gpu-host-17" LOGIN IN ROLE gputune_host;
--   \password "gpu-host-17"
--   CREATE ROLE "alice" LOGIN IN ROLE gputune_operator;
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gputune_host') THEN
    CREATE ROLE gputune_host NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gputune_operator') THEN
    CREATE ROLE gputune_operator NOLOGIN;
  END IF;
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO gputune_host, '
                 'gputune_operator', current_database());
END $$;
GRANT USAGE ON SCHEMA public TO gputune_host, gputune_operator;
GRANT SELECT ON fleet_meta TO gputune_host, gputune_operator;
GRANT SELECT, INSERT, UPDATE ON fleet_entries, fleet_claims
  TO gputune_host, gputune_operator;
GRANT USAGE ON SEQUENCE fleet_fence, fleet_feed
  TO gputune_host, gputune_operator;
