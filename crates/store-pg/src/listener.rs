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
    let mut next = FIRST_RETRY;
    while !stop.is_cancelled() {
        let mut connected = false;
        let wait = match listen_once(&target, &wake, &stop, &mut connected).await {
            Ok(()) => return,
            Err(e) => {
                let wait;
                (wait, next) = retry_wait(next, connected);
                warn!(event = "listener_disconnected", error = %e, retry_in_ms = wait.as_millis() as u64,
                      "lost the work notification connection; polling covers the gap");
                wait
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The first wait before reconnecting, and the longest.
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LONGEST_RETRY: Duration = Duration::from_secs(30);

/// How long to wait before reconnecting, and the wait after that: the first wait again after a connection that
/// was up (an outage long ago must not slow the recovery from the next one), each wait twice the one before
/// while attempts fail, up to the longest.
fn retry_wait(next: Duration, was_connected: bool) -> (Duration, Duration) {
    let wait = if was_connected { FIRST_RETRY } else { next };
    (wait, (wait * 2).min(LONGEST_RETRY))
}

async fn listen_once(
    target: &ConnectTarget,
    wake: &Notify,
    stop: &CancellationToken,
    connected: &mut bool,
) -> Result<(), StoreError> {
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
    *connected = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_while_failing_and_start_over_after_a_connection_that_was_up() {
        let (mut next, mut waits) = (FIRST_RETRY, Vec::new());
        for _ in 0..8 {
            let wait;
            (wait, next) = retry_wait(next, false);
            waits.push(wait.as_millis());
        }
        assert_eq!(waits, [500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
        // Up again for a while, then lost: the first wait again, and doubling from there.
        assert_eq!(retry_wait(next, true), (FIRST_RETRY, FIRST_RETRY * 2));
    }
}
