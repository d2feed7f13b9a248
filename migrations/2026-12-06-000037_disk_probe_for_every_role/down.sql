-- Back to migration 000034's probe, run as the calling role.
CREATE OR REPLACE FUNCTION almanac_disk_refuses_writes() RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY INVOKER
    RESET search_path
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
