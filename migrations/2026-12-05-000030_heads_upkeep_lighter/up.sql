-- The heads' upkeep after a claim and after a completion does less (issue #26 item 5, ADR 0008 amendment "the
-- heads' upkeep does less; a completion claiming nothing is one round trip").
--
-- 1. A claim's mark no longer locks its heads before it updates them. The lock ordered the row locks (by config,
--    as every refresh takes them, so two transactions never wait on each other's heads in a cycle) and held
--    every head given, whatever it read. The update now does both: it updates every head it is given, one
--    already not claimable too (so it waits for, and holds to its commit, each head's row lock, and a refresh
--    by another transaction then sees the claim's running item), and its only usable index is the primary key
--    (no condition on `claimable`, which every partial index of the heads needs), whose scan for
--    `= ANY (array)` visits the array's values in the index's order. A row locked and then updated was changed
--    twice (two WAL records); now once.
-- 2. A refresh after statements that only ended running items (completions, cancellations, a failure not
--    retried; each of its config, with no item moved) skips its look for a running item: it has just ended
--    its config's only one (ix_work_items_running_config admits one per config, and a second cannot be set
--    running before this transaction ends: the index waits for it). Any other change looks, as before.

CREATE OR REPLACE FUNCTION almanac_mark_queue_heads_running(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    UPDATE queue_heads AS h SET claimable = false WHERE h.storage_config_id = ANY (configs);
END $$;

DROP FUNCTION almanac_refresh_queue_heads(uuid[]);

CREATE FUNCTION almanac_refresh_queue_heads(configs uuid[], ended boolean DEFAULT false) RETURNS void
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
               CASE WHEN ended THEN false
                    ELSE EXISTS (SELECT 1 FROM work_items AS w
                                  WHERE w.storage_config_id = c.config AND w.status = 'running') END AS running
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
    ends_only boolean;
BEGIN
    SELECT coalesce(array_agg(DISTINCT x.config ORDER BY x.config), '{}'), coalesce(bool_and(changed.claim), true),
           coalesce(bool_and(changed.ended), true)
      INTO configs, claims_only, ends_only
      FROM (SELECT o.storage_config_id AS config, n.storage_config_id AS moved_to,
                   o.status = 'queued' AND n.status = 'running'
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS claim,
                   o.status = 'running' AND n.status IN ('succeeded', 'failed', 'cancelled')
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS ended
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
        PERFORM almanac_refresh_queue_heads(configs, ends_only);
    END IF;
    RETURN NULL;
END $$;
