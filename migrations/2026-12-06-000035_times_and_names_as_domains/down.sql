-- Puts back the checks of migrations 000032 and 000033 in place of the two domains; the columns take their types
-- back (no table is rewritten), and the triggers whose conditions read one are made again as they were.

ALTER DOMAIN almanac_time DROP CONSTRAINT almanac_time_readable;
ALTER DOMAIN almanac_name DROP CONSTRAINT almanac_name_well_formed;

DO $$
DECLARE
    t record;
BEGIN
    CREATE TEMPORARY TABLE almanac_changed ON COMMIT DROP AS
        SELECT c.oid AS rel, c.relname AS name, a.attnum, a.attname,
               CASE WHEN a.atttypid = 'almanac_time'::regtype THEN 'timestamptz' ELSE 'text' END AS base
          FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
          JOIN pg_attribute AS a ON a.attrelid = c.oid
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
           AND a.atttypid IN ('almanac_time'::regtype, 'almanac_name'::regtype);
    CREATE TEMPORARY TABLE almanac_triggers ON COMMIT DROP AS
        SELECT DISTINCT g.tgname, g.tgrelid::regclass::text AS rel, pg_get_triggerdef(g.oid) AS def, g.tgenabled,
               obj_description(g.oid, 'pg_trigger') AS comment
          FROM pg_trigger AS g
          JOIN pg_depend AS d ON d.classid = 'pg_trigger'::regclass AND d.objid = g.oid
          JOIN almanac_changed AS x ON d.refclassid = 'pg_class'::regclass AND d.refobjid = x.rel
                                   AND d.refobjsubid = x.attnum;
    FOR t IN SELECT * FROM almanac_triggers ORDER BY rel, tgname LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
    FOR t IN
        SELECT x.name,
               string_agg(format('ALTER COLUMN %I TYPE %s', x.attname, x.base), ', ' ORDER BY x.attnum) AS changes,
               string_agg(format('almanac_time_readable(%I)', x.attname), ' AND ' ORDER BY x.attnum)
                   FILTER (WHERE x.base = 'timestamptz') AS readable
          FROM almanac_changed AS x
         GROUP BY x.name
         ORDER BY x.name
    LOOP
        EXECUTE format('ALTER TABLE %I %s', t.name, t.changes);
        IF t.readable IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%s)', t.name, 'ck_' || t.name || '_times_readable',
                           t.readable);
        END IF;
    END LOOP;
    FOR t IN SELECT * FROM almanac_triggers ORDER BY rel, tgname LOOP
        EXECUTE t.def;
        IF t.tgenabled <> 'O' THEN
            EXECUTE format('ALTER TABLE %s %s TRIGGER %I', t.rel,
                           CASE t.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'R' THEN 'ENABLE REPLICA'
                                ELSE 'ENABLE ALWAYS' END, t.tgname);
        END IF;
        IF t.comment IS NOT NULL THEN
            EXECUTE format('COMMENT ON TRIGGER %I ON %s IS %L', t.tgname, t.rel, t.comment);
        END IF;
    END LOOP;
END $$;

ALTER TABLE work_items
    ADD CONSTRAINT ck_work_items_dedup_key_form CHECK (almanac_name_well_formed(dedup_key)),
    ADD CONSTRAINT ck_work_items_worker_id_form CHECK (almanac_name_well_formed(worker_id));
ALTER TABLE config_watches
    ADD CONSTRAINT ck_config_watches_worker_id_form CHECK (almanac_name_well_formed(worker_id));

DROP DOMAIN almanac_time;
DROP DOMAIN almanac_name;
