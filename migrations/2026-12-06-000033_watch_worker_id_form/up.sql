-- The worker id of a config's watch is held to the form the domain's `WorkerId` accepts, as migration 000011 held
-- a work item's (ADR 0011, amendment "times every reader can read"). Another client could store a blank id, or one
-- of 300 characters, in `config_watches`; every read of the watches then failed: the scheduler's look at them
-- each tick (so no periodic work for any config), the operator's page and `status`.
--
-- The form is now written once, `almanac_name_well_formed`, and every column holding a dedup key or a worker id
-- is checked with it (the two checks of migration 000011 are rewritten to call it, unchanged in what they accept).
-- An id stored before in another form is cut to 200 characters, or named 'unnamed' when blank, as 000011 did.

CREATE FUNCTION almanac_name_well_formed(t text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN t IS NULL
    OR (char_length(t) <= 200 AND t !~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$');

COMMENT ON FUNCTION almanac_name_well_formed(text) IS
    'Whether a dedup key or worker id has the form the domain reads (DedupKey, WorkerId): NULL, or 1 to 200 characters not all whitespace (whitespace as Rust''s char::is_whitespace knows it). Migration 000033.';

UPDATE config_watches
   SET worker_id = CASE WHEN char_length(worker_id) > 200 AND almanac_name_well_formed(left(worker_id, 200))
                        THEN left(worker_id, 200) ELSE 'unnamed' END
 WHERE NOT almanac_name_well_formed(worker_id);

ALTER TABLE work_items
    DROP CONSTRAINT ck_work_items_dedup_key_form,
    DROP CONSTRAINT ck_work_items_worker_id_form,
    ADD CONSTRAINT ck_work_items_dedup_key_form CHECK (almanac_name_well_formed(dedup_key)),
    ADD CONSTRAINT ck_work_items_worker_id_form CHECK (almanac_name_well_formed(worker_id));
ALTER TABLE config_watches
    ADD CONSTRAINT ck_config_watches_worker_id_form CHECK (almanac_name_well_formed(worker_id));
