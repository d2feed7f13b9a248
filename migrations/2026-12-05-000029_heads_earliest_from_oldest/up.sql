-- A head's refresh reads one index walk per config where it read two (issue #26 item 5, ADR 0008 amendment "a
-- head's refresh reads its config once"). The refresh after every completion read each config's oldest queued
-- item (`ix_work_items_queued_config`, in age order) and, apart, its earliest `run_after`
-- (`ix_work_items_queued_config_due`). Items enqueued by one transaction share their `run_after` (its `now()`),
-- so that index holds them as one posting list: an entry PostgreSQL cannot mark dead while any of its items is
-- queued, so every refresh read the heap once for each item of the list claimed since the table's last vacuum
-- (812 buffers a completion of eight after 50 s of claims back to back, against 232 after a vacuum).
--
-- `earliest_run_after` decides one thing: whether the claim walks the head (`earliest_run_after <= due`, `due`
-- the claim's clock, read after its snapshot). When the oldest queued item is due by the refresh's clock, a
-- claim that reads this head (after its commit, so by a later clock) finds it due whatever the earliest is, so
-- the oldest item's `run_after` is stored and the second walk is skipped. When it is not due, the earliest is read
-- as before; a config with no queued item has none to read. The claim's decision is the same for every head; only
-- a stored value already in the past differs.

CREATE OR REPLACE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM queue_heads AS h WHERE h.storage_config_id = ANY (configs)
     ORDER BY h.storage_config_id FOR UPDATE;
    WITH q AS MATERIALIZED (
        SELECT c.config,
               o.requested_at AS oldest,
               CASE WHEN o.requested_at IS NULL THEN NULL
                    WHEN o.run_after <= clock_timestamp() THEN o.run_after
                    ELSE (SELECT w.run_after FROM work_items AS w
                           WHERE w.storage_config_id = c.config AND w.status = 'queued' AND w.attempt >= 0
                             AND w.kind <> ALL (p.kinds)
                           ORDER BY w.run_after
                           LIMIT 1) END AS earliest,
               EXISTS (SELECT 1 FROM work_items AS w
                        WHERE w.storage_config_id = c.config AND w.status = 'running') AS running
          FROM unnest(configs) AS c (config)
         CROSS JOIN (SELECT ARRAY(SELECT k.kind FROM paused_kinds AS k) AS kinds) AS p
          LEFT JOIN LATERAL (
               SELECT w.requested_at, w.run_after FROM work_items AS w
                WHERE w.storage_config_id = c.config AND w.status = 'queued' AND w.kind <> ALL (p.kinds)
                ORDER BY w.requested_at, w.id
                LIMIT 1) AS o ON true)
    UPDATE queue_heads AS h
       SET oldest_requested_at = q.oldest,
           earliest_run_after = q.earliest,
           claimable = q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running
      FROM q
     WHERE h.storage_config_id = q.config
       AND (h.oldest_requested_at, h.earliest_run_after, h.claimable)
           IS DISTINCT FROM (q.oldest, q.earliest, q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running);
END $$;

COMMENT ON COLUMN queue_heads.earliest_run_after IS 'When its queued items are next due: the earliest run_after of its queued items when none is due yet; once its oldest item is due, that item''s run_after (already past, so the claim walks the head either way). Not claimed for before then.';
