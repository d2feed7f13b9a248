ALTER TABLE work_items DROP CONSTRAINT ck_work_items_worker_id_form;
ALTER TABLE work_items DROP CONSTRAINT ck_work_items_dedup_key_form;
ALTER TABLE work_items ADD CONSTRAINT ck_work_items_dedup_key_not_blank CHECK (dedup_key IS NULL OR length(dedup_key) > 0);
