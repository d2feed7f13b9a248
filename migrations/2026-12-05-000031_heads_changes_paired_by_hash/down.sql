-- Restores the heads' trigger after an update as migration 000030 left it (an inner join of its transition tables).

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
