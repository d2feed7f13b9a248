//! Enqueueing: one item, a batch, or inside a transaction of the caller's (`enqueue_in`). A queued item with the
//! same dedup key wins: its row is answered instead of a new one.

use std::collections::{HashMap, HashSet};

use almanac_domain::{DedupKey, Enqueued, NewWorkItem, QueueError, WorkItem, WorkItemId};
use diesel::pg::Pg;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::sql_query;
use diesel::sql_types::{Array, Integer, Jsonb, Nullable, Text, Timestamptz, Uuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::WorkItemRow;
use crate::PgStore;
use crate::prepared::{Bind, Prepared};
use crate::tx::Lane;

/// How often an enqueue tries again when the queued item holding its dedup key was claimed between its insert
/// and its read.
pub(super) const TRIES: usize = 5;

/// The error after [`TRIES`] tries.
pub(super) fn kept_racing() -> QueueError {
    QueueError::Unexpected("enqueue kept racing with claims of the same dedup key".into())
}

const ENQUEUE: &str = "\
INSERT INTO work_items (id, kind, storage_config_id, payload, dedup_key, run_after, max_attempts)
VALUES ($1, $2, $3, $4, $5, COALESCE($6, now()), $7)
ON CONFLICT (dedup_key) WHERE status = 'queued' DO NOTHING
RETURNING *";

/// The enqueue statement for `item` under `id` (a queued item with the same dedup key wins: nothing inserted).
pub(crate) fn query(id: WorkItemId, item: &NewWorkItem) -> Prepared<'_> {
    Prepared::new(
        ENQUEUE,
        vec![
            Bind::Uuid(id.as_uuid()),
            Bind::Text(item.kind().as_str()),
            Bind::NullableUuid(item.scope().storage_config().map(|c| c.as_uuid())),
            Bind::Jsonb(item.payload()),
            Bind::NullableText(item.dedup_key.as_ref().map(|k| k.as_str())),
            Bind::NullableTimestamptz(item.run_after),
            Bind::Integer(item.max_attempts()),
        ],
    )
}

/// The batch enqueue: one row per array element, inserted in the arrays' order (ids are time-ordered, so the
/// claim order within one `requested_at` follows it too); a queued item with the same dedup key wins, an
/// earlier element of the same batch included.
const ENQUEUE_MANY: &str = "\
INSERT INTO work_items (id, kind, storage_config_id, payload, dedup_key, run_after, max_attempts)
SELECT i.id, i.kind, i.config, i.payload, i.dedup_key, COALESCE(i.run_after, now()), i.max_attempts
  FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::jsonb[], $5::text[], $6::timestamptz[], $7::integer[])
       WITH ORDINALITY AS i(id, kind, config, payload, dedup_key, run_after, max_attempts, n)
 ORDER BY i.n
ON CONFLICT (dedup_key) WHERE status = 'queued' DO NOTHING
RETURNING *";

/// Items per batch statement: bounds the statement's size, not the caller's batch.
const ENQUEUE_MANY_CHUNK: usize = 5_000;

/// The batch enqueue statement for `items` under `ids` (same length).
pub(crate) fn many_query<'a>(
    ids: &[WorkItemId],
    items: impl Iterator<Item = &'a NewWorkItem> + Clone,
) -> BoxedSqlQuery<'static, Pg, SqlQuery> {
    sql_query(ENQUEUE_MANY)
        .into_boxed()
        .bind::<Array<Uuid>, _>(ids.iter().map(|id| id.as_uuid()).collect::<Vec<_>>())
        .bind::<Array<Text>, _>(items.clone().map(|i| i.kind().as_str().to_owned()).collect::<Vec<_>>())
        .bind::<Array<Nullable<Uuid>>, _>(
            items.clone().map(|i| i.scope().storage_config().map(|c| c.as_uuid())).collect::<Vec<_>>(),
        )
        .bind::<Array<Jsonb>, _>(items.clone().map(|i| i.payload().clone()).collect::<Vec<_>>())
        .bind::<Array<Nullable<Text>>, _>(
            items.clone().map(|i| i.dedup_key.as_ref().map(|k| k.as_str().to_owned())).collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Timestamptz>>, _>(items.clone().map(|i| i.run_after).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(items.map(NewWorkItem::max_attempts).collect::<Vec<_>>())
}

const QUEUED_BY_DEDUP_KEY: &str = "SELECT * FROM work_items WHERE dedup_key = $1 AND status = 'queued'";
/// One try of an enqueue on `conn`: the new row, or the row queued under the same dedup key, or `None` when that
/// row was claimed between the insert and the read (try again).
pub(super) async fn once_on(
    conn: &mut AsyncPgConnection,
    item: &NewWorkItem,
) -> Result<Option<(WorkItemRow, bool)>, diesel::result::Error> {
    match query(WorkItemId::new(), item).get_result::<WorkItemRow>(conn).await {
        Ok(row) => return Ok(Some((row, true))),
        Err(diesel::result::Error::NotFound) => {}
        Err(e) => return Err(e),
    }
    let key = item.dedup_key.as_ref().map(|k| k.as_str()).unwrap_or_default();
    let existing: Vec<WorkItemRow> = sql_query(QUEUED_BY_DEDUP_KEY).bind::<Text, _>(key).load(conn).await?;
    Ok(existing.into_iter().next().map(|row| (row, false)))
}

/// [`almanac_domain::WorkQueue::enqueue`]. An existing queued item may be claimed between the insert and the
/// read: try again, a few times. Each try is a transaction whose commit is awaited: an acknowledged enqueue is a
/// committed one.
pub(super) async fn one(store: &PgStore, item: &NewWorkItem) -> Result<Enqueued, QueueError> {
    for _ in 0..TRIES {
        if let Some((row, created)) = store.transaction(Lane::Shared, async |conn| once_on(conn, item).await).await? {
            return Ok(Enqueued { item: row.try_into()?, created });
        }
    }
    Err(kept_racing())
}

/// [`almanac_domain::WorkQueue::enqueue_many`]: in chunks of [`ENQUEUE_MANY_CHUNK`], each a few tries as in
/// [`one`].
pub(super) async fn many(store: &PgStore, items: &[NewWorkItem]) -> Result<Vec<Enqueued>, QueueError> {
    let mut out: Vec<Option<Enqueued>> = (0..items.len()).map(|_| None).collect();
    for start in (0..items.len()).step_by(ENQUEUE_MANY_CHUNK) {
        let mut pending: Vec<usize> = (start..items.len().min(start + ENQUEUE_MANY_CHUNK)).collect();
        for _ in 0..TRIES {
            if pending.is_empty() {
                break;
            }
            pending = try_many(store, items, pending, &mut out).await?;
        }
        if !pending.is_empty() {
            return Err(kept_racing());
        }
    }
    Ok(out.into_iter().map(|e| e.expect("every item was answered")).collect())
}

/// One try of a batch: answers in `out` what it inserted or found queued under the same key, and returns the
/// indexes of `items` whose queued holder was claimed in between (to try again).
async fn try_many(
    store: &PgStore,
    items: &[NewWorkItem],
    pending: Vec<usize>,
    out: &mut [Option<Enqueued>],
) -> Result<Vec<usize>, QueueError> {
    let ids: Vec<WorkItemId> = pending.iter().map(|_| WorkItemId::new()).collect();
    let (inserted, existing) = store
        .transaction(Lane::Shared, async |conn| {
            let inserted: Vec<WorkItemRow> = many_query(&ids, pending.iter().map(|&i| &items[i])).load(conn).await?;
            let new: HashSet<uuid::Uuid> = inserted.iter().map(|r| r.id).collect();
            let keys: Vec<String> = pending
                .iter()
                .zip(&ids)
                .filter(|(_, id)| !new.contains(&id.as_uuid()))
                .filter_map(|(&i, _)| items[i].dedup_key.as_ref().map(|k| k.as_str().to_owned()))
                .collect();
            let existing: Vec<WorkItemRow> = if keys.is_empty() {
                Vec::new()
            } else {
                sql_query("SELECT * FROM work_items WHERE status = 'queued' AND dedup_key = ANY($1)")
                    .bind::<Array<Text>, _>(keys)
                    .load(conn)
                    .await?
            };
            Ok((inserted, existing))
        })
        .await?;
    let mut inserted: HashMap<uuid::Uuid, WorkItemRow> = inserted.into_iter().map(|r| (r.id, r)).collect();
    let mut by_key: HashMap<DedupKey, WorkItem> = HashMap::new();
    for row in existing {
        let item = WorkItem::try_from(row)?;
        if let Some(key) = item.dedup_key.clone() {
            by_key.insert(key, item);
        }
    }
    let mut again = Vec::new();
    for (&i, id) in pending.iter().zip(&ids) {
        if let Some(row) = inserted.remove(&id.as_uuid()) {
            out[i] = Some(Enqueued { item: row.try_into()?, created: true });
        } else if let Some(item) = items[i].dedup_key.as_ref().and_then(|k| by_key.get(k)) {
            out[i] = Some(Enqueued { item: item.clone(), created: false });
        } else {
            again.push(i);
        }
    }
    Ok(again)
}
