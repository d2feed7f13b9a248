-- Every time the database holds is one every reader of ours can read (ADR 0011, amendment "times every reader
-- can read"), as migration 000011 made every dedup key and worker id read back as its type.
--
-- PostgreSQL stores `infinity`, `-infinity` and years up to 294276; the store reads times as chrono's
-- `DateTime<Utc>`, which ends with the year 262142, and a time outside that range fails the read of its whole
-- row. No writer of ours writes one (they write chrono's times, or the server's clock moved by a bounded setting:
-- `queue.retry_cap` at most 30 days, `schedule.purge_after` at most a century), but another client can:
-- `UPDATE work_items SET run_after = 'infinity'` to park an item. A claim that took such an item was committed by
-- the server before its answer failed to decode; the store handed the claim back, and the next claim took it
-- again: while it stayed among the oldest, every claim of every Worker failed, and the operator's page and CLI
-- failed to list the queue.
--
-- Now a check on every table refuses such a time (`ck_<table>_times_readable`), and times stored before are moved
-- to the nearest time a reader can read: `infinity` and years past 262142 to the last instant of 262142,
-- `-infinity` to the first instant PostgreSQL stores (4714 BC). So an item parked at `infinity` stays parked (in
-- the year 262142) and an item put first in line at `-infinity` stays first; nothing is run, dropped or reordered.
-- The tables' columns are read from the catalogue here; a later migration that adds a time column adds it to its
-- table's check (a contract test holds every `timestamptz` column of the schema to one).

-- Whether `t` is a time every reader of ours can read: no time (NULL), or a finite one up to chrono's last.
CREATE FUNCTION almanac_time_readable(t timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN t IS NULL OR (isfinite(t) AND t <= '262142-12-31 23:59:59.999999+00');

COMMENT ON FUNCTION almanac_time_readable(timestamptz) IS
    'Whether a time is one every reader of ours can read (chrono''s DateTime<Utc>): NULL, or finite and no later than the year 262142. Every timestamptz column is checked with it (ck_<table>_times_readable, migration 000032).';

DO $$
DECLARE
    t record;
    moved bigint;
BEGIN
    FOR t IN
        SELECT c.relname AS name,
               string_agg(format('almanac_time_readable(%I)', a.attname), ' AND ' ORDER BY a.attnum) AS readable,
               string_agg(format('%1$I = CASE WHEN almanac_time_readable(%1$I) THEN %1$I WHEN %1$I > now() '
                                 'THEN timestamptz ''262142-12-31 23:59:59.999999+00'' '
                                 'ELSE timestamptz ''4714-11-24 00:00:00+00 BC'' END', a.attname), ', '
                          ORDER BY a.attnum) AS nearest
          FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
          JOIN pg_attribute AS a ON a.attrelid = c.oid
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
           AND a.atttypid = 'timestamptz'::regtype
         GROUP BY c.relname
         ORDER BY c.relname
    LOOP
        EXECUTE format('UPDATE %I SET %s WHERE NOT (%s)', t.name, t.nearest, t.readable);
        GET DIAGNOSTICS moved = ROW_COUNT;
        IF moved > 0 THEN
            RAISE NOTICE '%: % rows held a time no reader can read (infinite, or past the year 262142); moved to the nearest one that can be read', t.name, moved;
        END IF;
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%s)', t.name, 'ck_' || t.name || '_times_readable',
                       t.readable);
    END LOOP;
END $$;
