-- The disk probe of migration 000034 answers for a Worker whose role may not make temporary tables. It made its
-- temporary table as the calling role, and a database hardened with `REVOKE TEMPORARY ON DATABASE … FROM PUBLIC`
-- (a common step, and the default of some managed services) refused that: the probe failed, the store placed the
-- first error as unexpected, and a full disk read as a failure of the work again, counted and finally failed for
-- good, instead of the outage it is (ADR 0010, amendment "a full disk is an outage").
--
-- The function now runs as its owner, the role that migrated the database (SECURITY DEFINER): a superuser may
-- always make temporary tables, the database's owner unless that was revoked from it by name. As any function that
-- runs as its owner, it reads names only from the system catalogue and its own temporary schema (`search_path`
-- fixed to `pg_catalog, pg_temp`; the table is named with its schema), so no object another role makes can stand in
-- for one it uses. It does nothing else: it makes, writes and drops a temporary table of its own, inside its own
-- subtransaction. Test: `the_disk_probe_answers_for_a_role_that_may_not_make_temporary_tables`.
CREATE OR REPLACE FUNCTION almanac_disk_refuses_writes() RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    own text := (SELECT t.spcname FROM pg_database AS d JOIN pg_tablespace AS t ON t.oid = d.dattablespace
                  WHERE d.datname = current_database());
BEGIN
    EXECUTE format('CREATE TEMPORARY TABLE almanac_disk_probe (filler integer) ON COMMIT DROP TABLESPACE %I', own);
    INSERT INTO pg_temp.almanac_disk_probe VALUES (0);
    DROP TABLE pg_temp.almanac_disk_probe;
    RETURN false;
EXCEPTION WHEN disk_full THEN
    RETURN true;
END $$;

COMMENT ON FUNCTION almanac_disk_refuses_writes() IS
    'Whether the server refuses to write a page of a new (temporary) table in the database''s own tablespace for want of disk space (SQLSTATE 53100): asked by the store after an error it cannot place. Runs as its owner, so a role that may not make temporary tables gets an answer too. Migrations 000034 and 000037.';
