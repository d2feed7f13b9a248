DROP FUNCTION almanac_refresh_queue_heads(uuid[], boolean);

CREATE OR REPLACE FUNCTION almanac_mark_queue_heads_running(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM queue_heads AS h WHERE h.storage_config_id = ANY (configs)
     ORDER BY h.storage_config_id FOR UPDATE;
    UPDATE queue_heads AS h SET claimable = false WHERE h.storage_config_id = ANY (configs) AND h.claimable;
END $$;

CREATE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
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

CREATE OR REPLACE FUNCTION almanac_queue_heads_updated() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    configs uuid[];
    claims_only boolean;
BEGIN
    SELECT coalesce(array_agg(DISTINCT x.config ORDER BY x.config), '{}'), coalesce(bool_and(changed.claim), true)
      INTO configs, claims_only
      FROM (SELECT o.storage_config_id AS config, n.storage_config_id AS moved_to,
                   o.status = 'queued' AND n.status = 'running'
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS claim
              FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
             WHERE (o.status, o.run_after, o.requested_at, o.storage_config_id)
                   IS DISTINCT FROM (n.status, n.run_after, n.requested_at, n.storage_config_id)
               AND (o.status IN ('queued', 'running') OR n.status IN ('queued', 'running'))) AS changed
     CROSS JOIN LATERAL (VALUES (changed.config), (changed.moved_to)) AS x (config)
     WHERE x.config IS NOT NULL;
    IF cardinality(configs) = 0 THEN
        RETURN NULL;
    ELSIF claims_only THEN
        PERFORM almanac_mark_queue_heads_running(configs);
    ELSE
        PERFORM almanac_refresh_queue_heads(configs);
    END IF;
    RETURN NULL;
END $$;

