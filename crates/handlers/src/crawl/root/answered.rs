//! A crawl's looks before it reads anything (at its root, at the proxy root), each given up on after a time limit as
//! well as at a stop: a share whose server stopped answering must not hold the crawl's slot, and the thread each such
//! look leaves waiting must not be followed by another at every attempt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use almanac_executor::HandlerError;
use tokio_util::sync::CancellationToken;

/// The looks given up on whose calls have not returned yet (their threads wait on the share), by the folder looked
/// at: each look's number and when it started.
static GIVEN_UP: Mutex<BTreeMap<PathBuf, BTreeMap<u64, Instant>>> = Mutex::new(BTreeMap::new());

/// Numbers the looks, so that one that returns late clears its own entry only.
static LOOKS: AtomicU64 = AtomicU64::new(0);

/// The looks given up on, whatever a thread panicking while it held them left.
fn given_up() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, BTreeMap<u64, Instant>>> {
    GIVEN_UP.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long after the newest of `waiting` looks given up on at a folder (each limited to `within`) no other is made
/// there: ten limits, doubled for each look already waiting, at most a day. So a share silent for days holds a few
/// threads (about ten over two days at the shipped 30 s), while one remounted at the same path (the old mount's calls
/// never return) is looked at again within minutes to hours, without a restart.
fn none_again_for(within: Duration, waiting: usize) -> Duration {
    let doubled = 1u32 << waiting.saturating_sub(1).min(16);
    within.saturating_mul(10).saturating_mul(doubled).min(Duration::from_secs(86_400))
}

/// A look, as its blocking thread and its waiter both see it.
struct Look {
    at: PathBuf,
    number: u64,
    started: Instant,
    /// Set, under [`GIVEN_UP`]'s lock, once the call returned (or its thread unwound).
    returned: AtomicBool,
}

impl Look {
    /// Notes the look given up on, unless its call returned meanwhile.
    fn given_up(&self) {
        let mut given_up = given_up();
        if !self.returned.load(Ordering::SeqCst) {
            given_up.entry(self.at.clone()).or_default().insert(self.number, self.started);
        }
    }
}

/// Held by the look's thread: when it returns (or unwinds), the look is no longer waited on.
struct Returns(Arc<Look>);

impl Drop for Returns {
    fn drop(&mut self) {
        let mut given_up = given_up();
        self.0.returned.store(true, Ordering::SeqCst);
        if let Some(looks) = given_up.get_mut(&self.0.at) {
            looks.remove(&self.0.number);
            if looks.is_empty() {
                given_up.remove(&self.0.at);
            }
        }
    }
}

/// Why no look at `at` is made now, if none is: a look given up on there has not returned, and the newest such
/// started less than [`none_again_for`] ago.
fn refused(at: &Path, within: Duration, what: &str) -> Option<HandlerError> {
    let given_up = given_up();
    let looks = given_up.get(at)?;
    let newest = looks.values().max()?;
    (newest.elapsed() < none_again_for(within, looks.len())).then(|| {
        not_answering(&format!(
            "{what}: {} has not answered a look made {} s ago, so no other is made for now",
            at.display(),
            newest.elapsed().as_secs()
        ))
    })
}

/// `look` at the folder `at` (or at what lies on the volume it is on) on a blocking thread, given up on if it has
/// not answered `within` (a share whose server stopped answering, a disk that did not wake) or when the attempt is
/// stopped (`cancel`). While a look at `at` given up on earlier has not returned, no other is made for a while
/// ([`none_again_for`]): this one is refused at once, so a share that stays silent for days holds a few threads per
/// folder looked at, not one per attempt. Looks under way and not given up on may run side by side. Each refusal is
/// retryable, nothing having been read: the crawl is tried again later (`queue.retry_base`, doubling), its slot free
/// meanwhile. `what` is being done, for messages;
/// `look` must only look (it may still run after the attempt ended).
pub(in crate::crawl) async fn answered_in_time<T: Send + 'static>(
    cancel: &CancellationToken,
    at: &Path,
    within: Duration,
    what: &str,
    look: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HandlerError> {
    if let Some(refusal) = refused(at, within, what) {
        return Err(refusal);
    }
    let this = Arc::new(Look {
        at: at.to_owned(),
        number: LOOKS.fetch_add(1, Ordering::Relaxed),
        started: Instant::now(),
        returned: AtomicBool::new(false),
    });
    let returns = Returns(this.clone());
    let answer = tokio::time::timeout(
        within,
        tokio::task::spawn_blocking(move || {
            let _returns = returns;
            look()
        }),
    );
    tokio::select! {
        biased;
        answered = answer => match answered {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(HandlerError::retryable(format!("{what} ended abnormally: {e}"))),
            Err(_) => {
                this.given_up();
                Err(not_answering(&format!("{what}: {} did not answer within {}", at.display(), spoken(within))))
            }
        },
        () = cancel.cancelled() => {
            this.given_up();
            Err(HandlerError::retryable(format!(
                "stopped while {what}, which had not answered (a share whose server stopped answering?)"
            )))
        }
    }
}

/// `limit` as said: in seconds, or in milliseconds if not whole seconds.
fn spoken(limit: Duration) -> String {
    match limit.subsec_millis() {
        0 => format!("{} s", limit.as_secs()),
        _ => format!("{} ms", limit.as_millis()),
    }
}

/// A look given up on, or not made: retryable, nothing read.
fn not_answering(what: &str) -> HandlerError {
    HandlerError::retryable(format!(
        "{what} (a share whose server stopped answering, or a disk that did not wake?). Nothing was read; the crawl is \
         tried again later while it has attempts left, its slot free meanwhile. `almanac-worker pause --config …` \
         holds the library's crawls until its NAS is back"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look that answers is answered, beside another under way at the same folder. One that does not answer within
    /// its limit is given up on, and while its call waits no other look at the same folder is made for a while (the
    /// next is refused at once, its look never run), then one is; a look at another folder is made meanwhile; once
    /// the first call returns, the folder is looked at again at once.
    /// (Real time: a paused clock does not move while a blocking call runs. The look that never answers is given
    /// a short limit, the others a long one.)
    #[tokio::test]
    async fn a_look_not_answered_in_time_is_given_up_on_and_not_made_again_while_it_waits() {
        let cancel = CancellationToken::new();
        let (share, other) = (Path::new("/nas/photos"), Path::new("/disk/photos"));
        let (within, short) = (Duration::from_secs(600), Duration::from_millis(100));
        assert_eq!(answered_in_time(&cancel, share, within, "looking", || 7).await, Ok(7));

        let (release, released) = std::sync::mpsc::channel::<()>();
        let (returned, has_returned) = tokio::sync::oneshot::channel();
        let silent = answered_in_time(&cancel, share, short, "opening the storage root", move || {
            let _ = released.recv();
            let _ = returned.send(());
        });
        // A look at the same folder made while the first is under way, not given up on yet, is made.
        let beside = answered_in_time(&cancel, share, within, "looking", || 10);
        let (refused, beside) = tokio::join!(silent, beside);
        assert_eq!(beside, Ok(10));
        let refused = refused.unwrap_err();
        assert!(refused.retryable, "{refused:?}");
        assert!(refused.message.contains("/nas/photos did not answer within 100 ms"), "{}", refused.message);
        assert!(refused.message.contains("Nothing was read"), "{}", refused.message);

        let made = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let looked = made.clone();
        let again = answered_in_time(&cancel, share, within, "opening the storage root", move || {
            looked.store(true, Ordering::SeqCst);
        });
        let refused = again.await.unwrap_err();
        assert!(refused.message.contains("has not answered a look made"), "{}", refused.message);
        assert!(!made.load(Ordering::SeqCst), "no second look is made while the first waits");
        assert_eq!(answered_in_time(&cancel, other, within, "looking", || 8).await, Ok(8));
        // Ten limits after the look given up on (the share may have been mounted again), one more is made.
        tokio::time::sleep(none_again_for(short, 1)).await;
        assert_eq!(answered_in_time(&cancel, share, short, "looking", || 11).await, Ok(11));

        release.send(()).unwrap();
        has_returned.await.unwrap();
        // The entry is cleared as the call returns, just after it answered the test.
        let mut tries = 0;
        let answer = loop {
            match answered_in_time(&cancel, share, within, "looking", || 9).await {
                Err(e) if e.message.contains("has not answered a look made") && tries < 60_000 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                answer => break answer,
            }
        };
        assert_eq!(answer, Ok(9), "looked at again once the first call returned");
    }

    /// A look is given up on when the attempt is stopped, before its limit.
    /// Ten limits, doubled for each look already waiting, at most a day.
    #[test]
    fn a_folder_is_looked_at_again_later_the_more_looks_wait_on_it() {
        let limit = Duration::from_secs(30);
        let waits: Vec<_> = (1..=12).map(|n| none_again_for(limit, n).as_secs()).collect();
        assert_eq!(waits, [300, 600, 1200, 2400, 4800, 9600, 19200, 38400, 76800, 86400, 86400, 86400]);
    }

    #[tokio::test]
    async fn a_look_is_given_up_on_at_a_stop() {
        let cancel = CancellationToken::new();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let stopping = cancel.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            stopping.cancel();
        });
        let at = Path::new("/nas/stopped");
        let given_up = answered_in_time(&cancel, at, Duration::from_secs(600), "opening", move || {
            let _ = released.recv();
        });
        let e = given_up.await.unwrap_err();
        assert!(e.message.starts_with("stopped while opening"), "{}", e.message);
        release.send(()).unwrap();
    }
}
