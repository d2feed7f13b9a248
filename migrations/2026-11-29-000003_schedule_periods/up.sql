-- The scheduler records each period it enqueued periodic work for, so that however many Workers run their
-- schedulers, each period's item is enqueued exactly once (the insert that wins enqueues).
CREATE TABLE schedule_periods (
    schedule_key    text PRIMARY KEY,
    work_item_id    uuid,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_schedule_periods_created ON schedule_periods (created_at);
COMMENT ON TABLE schedule_periods IS 'One row per (periodic work, period) the scheduler has enqueued, e.g. crawl:<config>:<period number>. Old rows are deleted by work_item_retention.';
COMMENT ON COLUMN schedule_periods.work_item_id IS 'The item enqueued for the period (kept for tracing; the item may be deleted since).';
