//! What the binary's unit tests share.

use almanac_domain::{NewWorkItem, Scope, Status, WorkItem, WorkItemId, WorkKind};

/// Runs `statement` (one or more, as a test sets a state up) on the database at `url`.
pub async fn sql(url: &str, statement: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.batch_execute(statement).await.unwrap();
}

/// A fresh unscoped item of `kind` with `status` and `progress`, as the store would hand it back (a running one
/// with its first attempt).
pub fn item(kind: WorkKind, status: Status, progress: Option<serde_json::Value>) -> WorkItem {
    let now = chrono::Utc::now();
    let running = (status == Status::Running).then_some(now);
    WorkItem {
        id: WorkItemId::new(),
        kind,
        scope: Scope::Unscoped,
        status,
        payload: serde_json::json!({}),
        dedup_key: None,
        requested_at: now,
        run_after: now,
        attempt: i32::from(status != Status::Queued),
        failures: 0,
        stalls: 0,
        max_attempts: NewWorkItem::DEFAULT_MAX_ATTEMPTS,
        lease_expires_at: running,
        worker_id: None,
        started_at: running,
        heartbeat_at: running,
        finished_at: status.is_finished().then_some(now),
        cancel_requested_at: None,
        last_error: None,
        progress,
        result: None,
    }
}
