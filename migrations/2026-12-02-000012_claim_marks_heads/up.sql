-- The claim at 10,000 configs (issue #26, ADR 0008 amendment "the claim at 10,000 configs"). A claim of eight
-- items spent about half its time in the heads' trigger: it recomputed each claimed config's head from its
-- queue (a lock and five statements a config, 48 statements for eight) only to find what the claim already
-- says: the config now has a running item, so it is not claimable. And every refresh ran one config at a time.
--
-- 1. A statement whose every change is a claim (queued to running, in the same config) only marks its configs'
--    heads not claimable, under their locks, in config order. The head's oldest item and earliest run_after
--    are left as they were: nothing reads them while the head is not claimable, and whatever ends the running
--    item (completion, failure, release, recovery, cancel) refreshes the head in full. Concurrency is as before:
--    the head's lock is taken in the claim's transaction, so a refresh that waits for it sees the running item
--    once the claim commits, and a refresh that went first is overwritten with `false`, which holds while the
--    claim's item runs. A statement that mixes claims with other changes refreshes every head in full.
-- 2. A refresh recomputes all its heads in two statements instead of six per config: it locks them in config
--    order, then (a new snapshot under READ COMMITTED, after every lock) reads the paused kinds and walks each
--    config's queue in order, as before.

CREATE OR REPLACE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
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

-- The heads of configs that a claim gave a running item: not claimable, nothing else read or written.
CREATE OR REPLACE FUNCTION almanac_mark_queue_heads_running(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
BEGIN
    PERFORM 1 FROM queue_heads AS h WHERE h.storage_config_id = ANY (configs)
     ORDER BY h.storage_config_id FOR UPDATE;
    UPDATE queue_heads AS h SET claimable = false WHERE h.storage_config_id = ANY (configs) AND h.claimable;
END $$;

-- Heartbeats and progress change none of the columns compared here: they refresh nothing.
CREATE OR REPLACE FUNCTION almanac_queue_heads_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
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
