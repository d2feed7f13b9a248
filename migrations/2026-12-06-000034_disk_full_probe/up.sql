-- Whether the server can write a page of a new table in the database's own tablespace now: the store's question
-- after an error it cannot place (ADR 0010, amendment "a full disk is an outage"). diesel does not give the store
-- an error's SQLSTATE, and the server's words follow its language, so a statement refused because the database's
-- disk is full (53100) read as a failure of the work: a crawl on a NAS whose volume filled was counted failed, five
-- times over, and failed for good. PL/pgSQL can catch an error by its SQLSTATE: this function makes a temporary
-- table of its own in the tablespace that holds the database's tables (a new file, not where `temp_tablespaces`
-- may put temporary tables, which can be another volume), writes one row to it (a new page), inside its own
-- subtransaction, and answers whether that was refused for want of disk space (no room, or no inode, on that
-- volume). Any other error of its own (no right to create temporary tables, a read-only standby) is raised to the
-- store, which then places the first error as before.
CREATE FUNCTION almanac_disk_refuses_writes() RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    own text := (SELECT t.spcname FROM pg_database AS d JOIN pg_tablespace AS t ON t.oid = d.dattablespace
                  WHERE d.datname = current_database());
BEGIN
    EXECUTE format('CREATE TEMPORARY TABLE almanac_disk_probe (filler integer) ON COMMIT DROP TABLESPACE %I', own);
    INSERT INTO almanac_disk_probe VALUES (0);
    DROP TABLE almanac_disk_probe;
    RETURN false;
EXCEPTION WHEN disk_full THEN
    RETURN true;
END $$;

COMMENT ON FUNCTION almanac_disk_refuses_writes() IS
    'Whether the server refuses to write a page of a new (temporary) table in the database''s own tablespace for want of disk space (SQLSTATE 53100): asked by the store after an error it cannot place. Migration 000034.';
