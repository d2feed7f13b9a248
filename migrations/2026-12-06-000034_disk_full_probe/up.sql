-- Whether the server can write a page of a new table now: the store's question after an error it cannot place
-- (ADR 0010, amendment "a full disk is an outage"). diesel does not give the store an error's SQLSTATE, and the
-- server's words follow its language, so a statement refused because the database's disk is full (53100) read as
-- a failure of the work: a crawl on a NAS whose volume filled was counted failed, five times over, and failed for
-- good. PL/pgSQL can catch an error by its SQLSTATE: this function writes one row to a temporary table of its own
-- (a new file, so a new page), inside its own subtransaction, and answers whether that write was refused for want
-- of disk space. Any other error of its own (no right to create temporary tables, a read-only standby) is raised
-- to the store, which then places the first error as before.
CREATE FUNCTION almanac_disk_refuses_writes() RETURNS boolean
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    CREATE TEMPORARY TABLE almanac_disk_probe (filler text) ON COMMIT DROP;
    INSERT INTO almanac_disk_probe VALUES ('');
    DROP TABLE almanac_disk_probe;
    RETURN false;
EXCEPTION WHEN disk_full THEN
    RETURN true;
END $$;

COMMENT ON FUNCTION almanac_disk_refuses_writes() IS
    'Whether the server refuses to write a page of a new (temporary) table for want of disk space (SQLSTATE 53100): asked by the store after an error it cannot place. Migration 000034.';
