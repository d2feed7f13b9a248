-- The claim takes its configs before it reads their items (issue #26, ADR 0008 amendment "the claim takes its
-- configs"). Until now each claim read the 32 oldest claimable configs and the oldest item of each, and locked
-- items `FOR UPDATE SKIP LOCKED` from those, as of the claim statement's snapshot. Two costs came of it with
-- several claimers:
-- 1. A claim whose candidate had been claimed (and committed) by another since its snapshot locked that item's
--    newest version, the other claim's running item, before finding it no longer queued: PostgreSQL keeps such a
--    lock to the end of the transaction. The running item's completion, or its heartbeat, then waited for this
--    claim to commit (the server's log, `log_lock_waits`: some 80 completions a second waited over 1 ms with 8
--    claimers back to back).
-- 2. Every claimer read the same 32 configs; with 8 asking for 8 items each, a quarter of the claims found every
--    candidate taken and claimed nothing.
--
-- Now a claim takes up to `batch` configs first, each under a transaction-level advisory lock tried without
-- waiting (`pg_try_advisory_xact_lock(1751474532, hashtext(config))`, the first key "head" in ASCII; a config
-- another claim holds is passed over, and a lock taken is released at commit, through a transaction pooler too):
-- the oldest claimable heads, in age order, whose config has a due item of the Worker's kinds. Then, in a second
-- statement whose snapshot is taken after those locks, it reads each taken config's oldest due item, if the head
-- is still claimable and nothing of the config runs. A claim commits before it releases its configs, so that
-- snapshot sees every claim that held one of them before: no candidate of a config is an item another claim took
-- since (unscoped items have no config to take). Two claims never aim at one config, and the running-config index
-- (rule 2) stays the guard against any writer that does not take the lock.
--
-- The function is volatile (it takes locks), so each of its statements takes a snapshot of its own. The claim
-- passes its batch size; the candidates hold at most that many configs' items, and the unscoped ones as before.

DROP FUNCTION almanac_claim_candidates(text[], uuid);
DROP FUNCTION almanac_claim_candidates_of_user(text[], uuid);

-- One user's configs, taken as `almanac_claim_candidates` takes every config's (see there). Planned anew on every
-- call with the user's id in view: a generic plan cannot tell which user is asked for, and priced from statistics
-- taken before the user had any config it walked every claimable head of the other users (migration 000026). The
-- user is tested again inside the `CASE`, so no plan can take another user's config.
CREATE FUNCTION almanac_claim_take_configs_of_user(kinds text[], served_user uuid, batch integer) RETURNS uuid[]
    LANGUAGE plpgsql VOLATILE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
    SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN ARRAY(
        WITH d AS MATERIALIZED (SELECT clock_timestamp() AS due)
        SELECT c.config
          FROM (SELECT h.storage_config_id AS config, h.oldest_requested_at AS oldest
                  FROM queue_heads AS h
                 WHERE h.claimable AND h.user_id = served_user
                   AND CASE WHEN h.user_id = served_user AND h.earliest_run_after <= (SELECT due FROM d)
                            THEN pg_try_advisory_xact_lock(1751474532, hashtext(h.storage_config_id::text)) END
                 ORDER BY h.oldest_requested_at, h.storage_config_id
                 LIMIT batch + 32) AS c
         CROSS JOIN LATERAL (
               SELECT x.id
                 FROM work_items AS x
                WHERE x.storage_config_id = c.config AND x.status = 'queued'
                  AND x.run_after <= (SELECT due FROM d) AND x.kind = ANY (kinds)
                  AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                ORDER BY x.requested_at, x.id
                LIMIT 1) AS n
         ORDER BY c.oldest, c.config
         LIMIT batch);
END $$;

-- The candidates of a claim of up to `batch` items: the 64 oldest due unscoped items of the Worker's kinds, and
-- the oldest due item of each config the claim takes.
-- 1. Taking: the claimable heads are walked in age order, each config's lock tried as its head is read (a config
--    another claim holds costs one try, not a read of its queue), and a taken config counts when it has a due
--    item of the Worker's kinds, until `batch` count. A config without one stays taken, uncounted, until the
--    claim commits, so a Worker without some kind's handler is not stopped by a few such configs in front; the
--    walk takes at most `batch + 32` configs, so a claim never holds more locks than that (the lock table is
--    shared by the whole cluster), and such a Worker finds nothing when `batch + 32` such configs come first.
--    The `CASE` tries the lock only after the due test; the walk's order and `LIMIT`s keep it to the heads read.
-- 2. Reading, in a new snapshot: a taken config's oldest due item of the Worker's kinds, if its head is still
--    claimable and nothing of it runs.
-- Each statement reads the clock after its own snapshot (`d`, computed at its first use): an item another
-- transaction handed back is due from that transaction's start, so whatever a snapshot shows handed back is due
-- by a clock read after it (FIFO per config, migration 000013).
CREATE FUNCTION almanac_claim_candidates(kinds text[], served_user uuid, batch integer) RETURNS uuid[]
    LANGUAGE plpgsql VOLATILE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    taken uuid[];
BEGIN
    IF served_user IS NOT NULL THEN
        taken := almanac_claim_take_configs_of_user(kinds, served_user, batch);
    ELSE
        taken := ARRAY(
            WITH d AS MATERIALIZED (SELECT clock_timestamp() AS due)
            SELECT c.config
              FROM (SELECT h.storage_config_id AS config, h.oldest_requested_at AS oldest
                      FROM queue_heads AS h
                     WHERE h.claimable
                       AND CASE WHEN h.earliest_run_after <= (SELECT due FROM d)
                                THEN pg_try_advisory_xact_lock(1751474532, hashtext(h.storage_config_id::text)) END
                     ORDER BY h.oldest_requested_at, h.storage_config_id
                     LIMIT batch + 32) AS c
             CROSS JOIN LATERAL (
                   SELECT x.id
                     FROM work_items AS x
                    WHERE x.storage_config_id = c.config AND x.status = 'queued'
                      AND x.run_after <= (SELECT due FROM d) AND x.kind = ANY (kinds)
                      AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                    ORDER BY x.requested_at, x.id
                    LIMIT 1) AS n
             ORDER BY c.oldest, c.config
             LIMIT batch);
    END IF;
    RETURN ARRAY(
        WITH d AS MATERIALIZED (SELECT clock_timestamp() AS due)
        (SELECT u.id
           FROM work_items AS u
          WHERE u.status = 'queued' AND u.storage_config_id IS NULL
            AND u.run_after <= (SELECT due FROM d) AND u.kind = ANY (kinds)
            AND u.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
          ORDER BY u.requested_at, u.id
          LIMIT 64)
        UNION ALL
        SELECT n.id
          FROM queue_heads AS h
         CROSS JOIN LATERAL (
               SELECT x.id
                 FROM work_items AS x
                WHERE x.storage_config_id = h.storage_config_id AND x.status = 'queued'
                  AND x.run_after <= (SELECT due FROM d) AND x.kind = ANY (kinds)
                  AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                ORDER BY x.requested_at, x.id
                LIMIT 1) AS n
         WHERE h.storage_config_id = ANY (taken) AND h.claimable
           AND NOT EXISTS (SELECT 1 FROM work_items AS r
                            WHERE r.storage_config_id = h.storage_config_id AND r.status = 'running'));
END $$;
