-- Every JSON value the database holds is one every reader of ours can read (ADR 0011, amendment "JSON every
-- reader can read"), as migrations 000032 and 000033 made every time, dedup key and worker id read back.
--
-- The store reads a work item's `payload`, `progress` and `result` as serde_json values. jsonb holds numbers of
-- any size and nests as deep as a client likes; serde_json refuses a number past `f64` (`1e400`) and a value nested
-- 128 containers deep, and such a value fails the read of its whole row. No writer of ours writes one (serde_json
-- writes only what it reads), but another client can, and the effect is the one 000032 ended for times: a claim of
-- the item, committed by the server, fails in its answer and is handed back, and the next claim takes it again;
-- the operator's page and the CLI cannot list the queue.
--
-- The rule is written once, `almanac_json_readable`, and held by a domain, `almanac_json`, which the work items' three
-- JSON columns have (every jsonb column of the schema; a contract test holds a later one to it too). A domain's check
-- runs only on the values a statement writes (an item's payload when it is enqueued, its progress with a heartbeat, its
-- result at its end), never on a claim, which writes none of them but a NULL progress (migration 000035 says why a
-- domain and not a table check).
--
-- A value stored before that breaks the rule is kept as text in a readable document, `{"unreadable": "<the value as
-- PostgreSQL prints it>"}`, and the migration raises a NOTICE for each column it changed. Nothing is lost, and the
-- row reads again. An item whose payload was changed is claimed instead of stopping every claim: a crawl or a
-- proxy deletion then fails (its handler refuses a payload it does not know), a kind without arguments runs with
-- its defaults.

-- Whether `j` is a JSON value every reader of ours can read: no value (NULL), or one with no number beyond ±1e308
-- and no container nested 128 deep (the root is the first; serde_json's limit). Depth is looked at first, and only
-- to level 127 (a container deeper has one there), so that a value nested thousands deep, which jsonb takes, is
-- refused instead of exhausting the server's stack in a walk of the whole value. The bound is short of f64's
-- largest (1.7976931348623157e308) on purpose: PostgreSQL prints a jsonb number without an exponent, and
-- serde_json, reading such a long integer, overflows for some values just under f64's largest (that one included).
CREATE FUNCTION almanac_json_readable(j jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN j IS NULL
    OR CASE WHEN jsonb_path_exists(j, 'strict $.**{127} ? (@.type() == "object" || @.type() == "array")') THEN false
            ELSE NOT jsonb_path_exists(j, 'strict $.** ? (@.type() == "number" && (@ > 1e308 || @ < -1e308))') END;

COMMENT ON FUNCTION almanac_json_readable(jsonb) IS
    'Whether a JSON value is one every reader of ours can read (serde_json): NULL, or with no number beyond ±1e308 and no container nested 128 deep. The check of the domain almanac_json (migration 000036).';

CREATE DOMAIN almanac_json AS jsonb;
COMMENT ON DOMAIN almanac_json IS
    'A JSON value every reader of ours can read (almanac_json_readable): every jsonb column of the schema has this type (migration 000036).';

DO $$
DECLARE
    t record;
    kept bigint;
BEGIN
    FOR t IN
        SELECT a.attname AS col
          FROM pg_attribute AS a
         WHERE a.attrelid = 'work_items'::regclass AND a.attnum > 0 AND NOT a.attisdropped
           AND a.atttypid = 'jsonb'::regtype
         ORDER BY a.attnum
    LOOP
        EXECUTE format('UPDATE work_items SET %1$I = jsonb_build_object(''unreadable'', %1$I::text)
                         WHERE NOT almanac_json_readable(%1$I)', t.col);
        GET DIAGNOSTICS kept = ROW_COUNT;
        IF kept > 0 THEN
            RAISE NOTICE 'work_items.%: % rows held JSON no reader can read (a number beyond ±1e308, or nested 128 deep); kept as text in {"unreadable": ...}', t.col, kept;
        END IF;
        EXECUTE format('ALTER TABLE work_items ALTER COLUMN %I TYPE almanac_json', t.col);
    END LOOP;
END $$;

ALTER DOMAIN almanac_json ADD CONSTRAINT almanac_json_readable CHECK (almanac_json_readable(VALUE));
