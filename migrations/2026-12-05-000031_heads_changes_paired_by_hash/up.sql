-- The heads' trigger after an update pairs each row's old and new versions by a hash or merge join, never by a
-- nested loop (ADR 0008, amendment "the claim beside a floor without the rule; an update of many items pairs its
-- rows in linear time").
--
-- The trigger's first statement joins its transition tables (`old_rows`, `new_rows`) by id. PL/pgSQL plans it
-- once per session, with the row counts of the first statement that fires it, and keeps that plan: on a connection
-- whose first update was a claim or a completion (a few rows) that is a nested loop, which compares every old row
-- with every new one. One later statement of many items on the same connection (retrying every failed item,
-- cancelling a deactivated config's backlog, the claim benchmark's requeue between rounds) then took time in the
-- square of its rows: 0.5 s for 2,500 and 6.5 s for 10,000, where a plan made for their size took 54 and 237 ms,
-- and the benchmark's 90,000 ran for ten minutes; meanwhile it held its items and the heads it had locked.
--
-- A FULL JOIN cannot be run as a nested loop: PostgreSQL runs it as a hash or merge join, in time linear in the
-- rows (or n log n), whatever the plan was made for. Every id an update writes is in both transition tables, once,
-- so the full join pairs exactly what the inner join paired. (An update that changed an id, which nothing does,
-- would put each version on one side: such a row is neither a claim nor an end, so its configs are refreshed with
-- the look for a running item, where the inner join left them as they were.) The planner turns a full join into a
-- left or right one, which may be a nested loop again, when a condition above it is strict on either side; none of
-- the statement's conditions is strict on either side, and the function says so where it would be edited. Test:
-- `the_heads_trigger_pairs_an_updates_rows_without_a_nested_loop` (it checks the join stays full).

CREATE OR REPLACE FUNCTION almanac_queue_heads_updated() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    configs uuid[];
    claims_only boolean;
    ends_only boolean;
BEGIN
    -- A full join, so never a nested loop whatever plan this session keeps (migration 000031). No condition here
    -- may be strict on either side (`o.x = ...` alone, `n.x IS NOT NULL`): the planner would make it a left or
    -- right join, which may be a nested loop again.
    SELECT coalesce(array_agg(DISTINCT x.config ORDER BY x.config), '{}'), coalesce(bool_and(changed.claim), true),
           coalesce(bool_and(changed.ended), true)
      INTO configs, claims_only, ends_only
      FROM (SELECT o.storage_config_id AS config, n.storage_config_id AS moved_to,
                   o.status = 'queued' AND n.status = 'running'
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS claim,
                   o.status = 'running' AND n.status IN ('succeeded', 'failed', 'cancelled')
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS ended
              FROM old_rows AS o FULL JOIN new_rows AS n ON n.id = o.id
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
