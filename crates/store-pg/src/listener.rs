//! Wakes idle Workers when work is enqueued: `LISTEN almanac_work_items` on a dedicated connection, fed by the
//! statement trigger on `work_items` inserts. Polling stays the fallback, so a lost connection only costs
//! latency; the listener reconnects with backoff.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::{ConnectTarget, StoreError};

/// The channel the enqueue trigger notifies.
pub const WORK_CHANNEL: &str = "almanac_work_items";

/// Listens for enqueued work until `stop` is cancelled, calling `wake.notify_one()` on every notification
/// (and once after each (re)connect, in case something was enqueued while it was away).
pub async fn listen_for_work(database_url: String, wake: Arc<Notify>, stop: CancellationToken) {
    let target = match ConnectTarget::parse(&database_url) {
        Ok(t) => t,
        Err(e) => {
            warn!(event = "listener_disconnected", error = %e, "cannot listen for work notifications; polling only");
            return;
        }
    };
    let mut backoff = Duration::from_millis(500);
    while !stop.is_cancelled() {
        match listen_once(&target, &wake, &stop).await {
            Ok(()) => return,
            Err(e) => {
                warn!(event = "listener_disconnected", error = %e, retry_in_ms = backoff.as_millis() as u64,
                      "lost the work notification connection; polling covers the gap");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

async fn listen_once(target: &ConnectTarget, wake: &Notify, stop: &CancellationToken) -> Result<(), StoreError> {
    let (client, mut connection) = target.connect().await?;
    let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
    let sql = format!("LISTEN {WORK_CHANNEL}");
    let listen = client.batch_execute(&sql);
    tokio::pin!(listen);
    // The connection must be driven for LISTEN to complete.
    loop {
        tokio::select! {
            r = &mut listen => { r.map_err(unavailable)?; break; }
            m = messages.next() => match m {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(unavailable(e)),
                None => return Ok(()),
            },
        }
    }
    debug!(event = "listener_connected", "listening for enqueued work");
    wake.notify_one();
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            m = messages.next() => match m {
                Some(Ok(AsyncMessage::Notification(_))) => wake.notify_one(),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(unavailable(e)),
                None => return Ok(()),
            },
        }
    }
}

fn unavailable(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(e.to_string().into())
}
