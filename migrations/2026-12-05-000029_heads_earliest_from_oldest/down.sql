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
               (SELECT w.requested_at FROM work_items AS w
                 WHERE w.storage_config_id = c.config AND w.status = 'queued' AND w.kind <> ALL (p.kinds)
                 ORDER BY w.requested_at, w.id
                 LIMIT 1) AS oldest,
               (SELECT w.run_after FROM work_items AS w
                 WHERE w.storage_config_id = c.config AND w.status = 'queued' AND w.attempt >= 0
                   AND w.kind <> ALL (p.kinds)
                 ORDER BY w.run_after
                 LIMIT 1) AS earliest,
               EXISTS (SELECT 1 FROM work_items AS w
                        WHERE w.storage_config_id = c.config AND w.status = 'running') AS running
          FROM unnest(configs) AS c (config)
         CROSS JOIN (SELECT ARRAY(SELECT k.kind FROM paused_kinds AS k) AS kinds) AS p)
    UPDATE queue_heads AS h
       SET oldest_requested_at = q.oldest,
           earliest_run_after = q.earliest,
           claimable = q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running
      FROM q
     WHERE h.storage_config_id = q.config
       AND (h.oldest_requested_at, h.earliest_run_after, h.claimable)
           IS DISTINCT FROM (q.oldest, q.earliest, q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running);
END $$;

COMMENT ON COLUMN queue_heads.earliest_run_after IS 'The earliest run_after of its queued items: not claimed for before then.';
