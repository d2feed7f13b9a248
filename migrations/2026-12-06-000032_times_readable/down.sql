-- Drops the checks that every time can be read (migration 000032). The times it moved stay where they are.

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT c.conrelid::regclass AS name, c.conname
          FROM pg_constraint AS c
         WHERE c.contype = 'c' AND c.conname LIKE 'ck\_%\_times\_readable'
           AND c.connamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', t.name, t.conname);
    END LOOP;
END $$;

DROP FUNCTION almanac_time_readable(timestamptz);
