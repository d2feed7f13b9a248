-- Drops the check of a watch's worker id and gives the work items' checks back their own words (migration 000011).

ALTER TABLE config_watches DROP CONSTRAINT ck_config_watches_worker_id_form;
ALTER TABLE work_items
    DROP CONSTRAINT ck_work_items_dedup_key_form,
    DROP CONSTRAINT ck_work_items_worker_id_form,
    ADD CONSTRAINT ck_work_items_dedup_key_form CHECK (
        dedup_key IS NULL
        OR (char_length(dedup_key) <= 200
            AND dedup_key !~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$')),
    ADD CONSTRAINT ck_work_items_worker_id_form CHECK (
        worker_id IS NULL
        OR (char_length(worker_id) <= 200
            AND worker_id !~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$'));
DROP FUNCTION almanac_name_well_formed(text);
