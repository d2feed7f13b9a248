-- Times and names are held to their form by two domains instead of a check on every table (ADR 0011, amendment
-- "the forms as domains"). The rules are unchanged: `almanac_time_readable` (migration 000032) and
-- `almanac_name_well_formed` (migration 000033) stay their one home, and each domain's check calls its function.
--
-- Why: PostgreSQL reads a table's checks from their stored text, plans them (inlining the functions they call)
-- and prepares them again for every statement that writes the table. With the checks of 000032 and 000033, that
-- was most of what a claim's or a completion's update of eight items spent on checks (0.34 ms a statement against
-- 0.19 without checks, 0.25 with the domains; `pgbench`, one client); in a profile of eight claimers back to back,
-- a sixth of the server's CPU went to `ExecConstraints`. A domain's check is read and planned once per session
-- (PostgreSQL's type cache), and runs only on the columns a statement writes.
--
-- No table is rewritten: the columns change type while the domains have no check yet (a domain over the same type
-- without a check is binary-coercible, and indexes are kept), and adding the checks to the domains then reads
-- every row once, which the checks dropped here have already held. Clients read the columns as before: the
-- server describes a domain's column by its base type.

CREATE DOMAIN almanac_time AS timestamptz;
COMMENT ON DOMAIN almanac_time IS
    'A time every reader of ours can read (almanac_time_readable, migration 000032): every timestamptz column of the schema has this type (migration 000035).';
CREATE DOMAIN almanac_name AS text;
COMMENT ON DOMAIN almanac_name IS
    'A dedup key or worker id in the form the domain reads (almanac_name_well_formed, migration 000033): every column holding one has this type (migration 000035).';

ALTER TABLE work_items DROP CONSTRAINT ck_work_items_dedup_key_form, DROP CONSTRAINT ck_work_items_worker_id_form;
ALTER TABLE config_watches DROP CONSTRAINT ck_config_watches_worker_id_form;

-- Every timestamptz column that 000032's checks hold (every table of the schema then; a table another program
-- added since has none and is left as it is), and the three columns that hold a dedup key or a worker id, change
-- type. PostgreSQL refuses to change the type of a column a trigger's condition reads
-- (`tr_config_watches_taken_without_holder`, `tr_storage_configs_queue_heads`), so the triggers that read one are
-- made again afterwards from their own definitions, enabled or disabled as they were and with their comments.
-- Anything else that reads such a column (a view, a policy, a publication's column list, a generated column; the
-- schema has none) makes the migration fail, changing nothing, with PostgreSQL's message naming it: drop it, run
-- the migration, and make it again.
DO $$
DECLARE
    changed CONSTANT text[] := ARRAY['work_items.dedup_key', 'work_items.worker_id', 'config_watches.worker_id'];
    t record;
BEGIN
    CREATE TEMPORARY TABLE almanac_changed ON COMMIT DROP AS
        SELECT c.oid AS rel, c.relname AS name, a.attnum, a.attname,
               CASE WHEN a.atttypid = 'timestamptz'::regtype THEN 'almanac_time' ELSE 'almanac_name' END AS domain
          FROM pg_class AS c
          JOIN pg_namespace AS n ON n.oid = c.relnamespace
          JOIN pg_attribute AS a ON a.attrelid = c.oid
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
           AND (a.atttypid = 'timestamptz'::regtype
                AND EXISTS (SELECT 1 FROM pg_constraint AS k
                             WHERE k.conrelid = c.oid AND k.conname = 'ck_' || c.relname || '_times_readable')
                OR c.relname || '.' || a.attname = ANY (changed));
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
               string_agg(format('ALTER COLUMN %I TYPE %s', x.attname, x.domain), ', ' ORDER BY x.attnum) AS changes,
               bool_or(x.domain = 'almanac_time') AS has_times
          FROM almanac_changed AS x
         GROUP BY x.name
         ORDER BY x.name
    LOOP
        IF t.has_times THEN
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t.name, 'ck_' || t.name || '_times_readable');
        END IF;
        EXECUTE format('ALTER TABLE %I %s', t.name, t.changes);
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

ALTER DOMAIN almanac_time ADD CONSTRAINT almanac_time_readable CHECK (almanac_time_readable(VALUE));
ALTER DOMAIN almanac_name ADD CONSTRAINT almanac_name_well_formed CHECK (almanac_name_well_formed(VALUE));
