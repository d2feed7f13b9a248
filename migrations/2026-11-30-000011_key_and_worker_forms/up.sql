-- Dedup keys and worker ids in the same form the domain's `DedupKey` and `WorkerId` accept (1 to 200
-- characters, not only whitespace, whitespace as Rust's `char::is_whitespace` knows it), so that every stored
-- value reads back as its type. Before, a key of spaces or of 300 characters written by another client than
-- ours was stored, and every read of that item would have failed.

-- Values that another client wrote in another form: a key is dropped (the item stays; at worst its work is
-- queued twice), a worker id is cut to 200 characters or named 'unnamed'.
UPDATE work_items
   SET dedup_key = NULL
 WHERE dedup_key IS NOT NULL
   AND (char_length(dedup_key) > 200
        OR dedup_key ~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$');
UPDATE work_items
   SET worker_id = CASE WHEN worker_id ~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$'
                        THEN 'unnamed' ELSE left(worker_id, 200) END
 WHERE worker_id IS NOT NULL
   AND (char_length(worker_id) > 200
        OR worker_id ~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$');

ALTER TABLE work_items DROP CONSTRAINT ck_work_items_dedup_key_not_blank;
ALTER TABLE work_items
    ADD CONSTRAINT ck_work_items_dedup_key_form CHECK (
        dedup_key IS NULL
        OR (char_length(dedup_key) <= 200
            AND dedup_key !~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$')),
    ADD CONSTRAINT ck_work_items_worker_id_form CHECK (
        worker_id IS NULL
        OR (char_length(worker_id) <= 200
            AND worker_id !~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$'));
