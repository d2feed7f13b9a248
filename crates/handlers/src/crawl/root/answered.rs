//! A crawl's looks before it reads anything (at the proxy root, at its root, at its proxy folder), each given up on
//! after a time limit as well as at a stop, and its calls into its library's share in the middle of it, given up on
//! once none answered within that limit ([`stopped_answering`]): a share whose server stopped answering must not hold
//! the crawl's slot, and the thread each such call leaves waiting must not be followed by another at every attempt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use almanac_executor::HandlerError;
use tokio_util::sync::CancellationToken;

/// What a folder that does not answer holds up, for what is said of it.
#[derive(Debug, Clone, Copy)]
pub(in crate::crawl) enum Holds {
    /// A library's root: its crawls.
    Library,
    /// The proxy root or a proxy folder: every crawl that writes proxies there.
    Proxies,
}

impl Holds {
    fn remedy(self) -> &'static str {
        match self {
            Holds::Library => "`almanac-worker pause --config …` holds the library's crawls until its NAS is back",
            Holds::Proxies => {
                "every library's crawls wait for the proxy volume (storage.proxy_root): pausing one library does not \
                 help; see to the volume"
            }
        }
    }
}

/// At most this many looks given up on wait at one folder (their threads caught in the share), and in all: past
/// either, no look is made there until one returns or the Worker is restarted. Tokio's blocking pool has 512 threads,
/// which every read of the Worker shares.
const MOST_WAITING_AT_A_FOLDER: usize = 8;
const MOST_WAITING: usize = 128;

/// A folder some look at which was given up on.
#[derive(Debug, Default)]
struct Folder {
    /// The looks given up on whose calls have not returned: each one's number, and when it started.
    waiting: BTreeMap<u64, Instant>,
    /// When the first look that did not answer in time started, since the folder last answered; `None` once it
    /// answers (a look made in time, or a call given up on that returned).
    silent_since: Option<Instant>,
    /// The looks that did not answer in time since the folder last answered.
    in_a_row: u32,
    /// When the newest of those started, and its limit.
    last: Option<(Instant, Duration)>,
    /// The one look made at the folder while it is silent, under way.
    trying: Option<u64>,
}

/// The folders some look at which was given up on.
static FOLDERS: Mutex<BTreeMap<PathBuf, Folder>> = Mutex::new(BTreeMap::new());

/// Numbers the looks.
static LOOKS: AtomicU64 = AtomicU64::new(0);

/// The folders, whatever a thread panicking while it held them left.
fn folders() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Folder>> {
    FOLDERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long after the newest look at a folder that did not answer in time (limited to `within`, the `in_a_row`th
/// since the folder last answered) no other is made there: ten limits, doubled for each before it, at most a day.
/// So a share silent for days holds a few threads (eight at most), while one mounted again at the same path (the
/// old mount's calls never return) is looked at again within minutes to hours, without a restart.
fn none_again_for(within: Duration, in_a_row: u32) -> Duration {
    let doubled = 1u32 << in_a_row.saturating_sub(1).min(16);
    within.saturating_mul(10).saturating_mul(doubled).min(Duration::from_secs(86_400))
}

/// Whether look `number` may be made at `at` now: not where [`MOST_WAITING_AT_A_FOLDER`] calls (or
/// [`MOST_WAITING`] in all) wait; otherwise yes at once while the folder answers, and while it is silent one look at a
/// time, [`none_again_for`] after the last. Otherwise why not.
fn admitted(at: &Path, number: u64) -> Result<(), String> {
    let mut folders = folders();
    let waiting: usize = folders.values().map(|f| f.waiting.len()).sum();
    let Some(folder) = folders.get_mut(at) else { return Ok(()) };
    let restart = "restarting the Worker looks again at once";
    if folder.waiting.len() >= MOST_WAITING_AT_A_FOLDER || waiting >= MOST_WAITING {
        return Err(format!(
            "{} looks at {} ({waiting} in all) still wait on a share that did not answer them, the most kept: none is \
             made until one returns; {restart}",
            folder.waiting.len(),
            at.display()
        ));
    }
    let (Some(since), Some((last, limit))) = (folder.silent_since, folder.last) else { return Ok(()) };
    let silent = format!("{} has not answered since a look made {} s ago", at.display(), since.elapsed().as_secs());
    if folder.trying.is_some() {
        return Err(format!("{silent}; a look at it is under way"));
    }
    let again = none_again_for(limit, folder.in_a_row);
    if last.elapsed() < again {
        let next = again.saturating_sub(last.elapsed()).as_secs();
        return Err(format!("{silent}; it is looked at again in {next} s at the soonest ({restart})"));
    }
    folder.trying = Some(number);
    Ok(())
}

/// A look, as its blocking thread and its waiter both see it.
struct Look {
    at: PathBuf,
    number: u64,
    started: Instant,
    /// Set, under [`FOLDERS`]' lock, once the call returned (or its thread unwound).
    returned: AtomicBool,
}

impl Look {
    /// Notes that the folder answered this look: it is no longer silent, unless a look that started after this one
    /// was given up on since.
    fn answered(&self, folder: &mut Folder) {
        if folder.last.is_none_or(|(last, _)| self.started >= last) {
            (folder.silent_since, folder.in_a_row, folder.last) = (None, 0, None);
        }
        if folder.trying == Some(self.number) {
            folder.trying = None;
        }
    }

    /// Notes the look answered in time.
    fn came_in_time(&self) {
        let mut folders = folders();
        if let Some(folder) = folders.get_mut(&self.at) {
            self.answered(folder);
            if folder.waiting.is_empty() && folder.silent_since.is_none() {
                folders.remove(&self.at);
            }
        }
    }

    /// Notes the look given up on (after `limit`, or at a stop when `timed_out` is false), unless its call returned
    /// meanwhile: its thread waits. A look that did not answer in time makes the folder silent; it counts towards
    /// the next look's wait if it was the first since the folder answered or the one look let through while silent
    /// (looks given up on together count once). The one let through, stopped, still sets when the next is made.
    fn given_up(&self, limit: Duration, timed_out: bool) {
        let mut folders = folders();
        if self.returned.load(Ordering::SeqCst) {
            return;
        }
        let folder = folders.entry(self.at.clone()).or_default();
        folder.waiting.insert(self.number, self.started);
        let was_trying = folder.trying == Some(self.number);
        if was_trying {
            folder.trying = None;
        }
        let newest = |last: Option<(Instant, Duration)>| match last {
            Some((at, _)) if at > self.started => last,
            _ => Some((self.started, limit)),
        };
        if timed_out {
            if folder.silent_since.is_none() || was_trying {
                folder.in_a_row += 1;
            }
            folder.silent_since.get_or_insert(self.started);
            folder.last = newest(folder.last);
        } else if was_trying {
            folder.last = newest(folder.last);
        }
    }
}

/// Held by the look's thread: when the call returns (or unwinds), it no longer waits, and a call that was given up
/// on and returns says the folder answers again.
struct Returns(Arc<Look>);

impl Drop for Returns {
    fn drop(&mut self) {
        let mut folders = folders();
        self.0.returned.store(true, Ordering::SeqCst);
        let Some(folder) = folders.get_mut(&self.0.at) else { return };
        if folder.waiting.remove(&self.0.number).is_some() {
            self.0.answered(folder);
        }
        if folder.trying == Some(self.0.number) {
            folder.trying = None;
        }
        if folder.waiting.is_empty() && folder.silent_since.is_none() && folder.trying.is_none() {
            folders.remove(&self.0.at);
        }
    }
}

/// `look` at the folder `at` (or at what lies on the volume it is on) on a blocking thread, given up on if it has
/// not answered `within` (a share whose server stopped answering, a disk that did not wake) or when the attempt is
/// stopped (`cancel`). While the folder is silent (a look at it did not answer in time, and none has since), looks
/// at it are refused at once but for one now and then ([`admitted`]), so a share silent for days holds a few threads,
/// not one per attempt; looks at a folder that answers run side by side. Each refusal is retryable, nothing having
/// been read: the crawl is tried again later (`queue.retry_base`, doubling), its slot free meanwhile. `what` is being
/// done and `holds` what the folder holds up, for messages; `look` must only look (it may still run after the attempt
/// ended).
pub(in crate::crawl) async fn answered_in_time<T: Send + 'static>(
    cancel: &CancellationToken,
    (at, holds): (&Path, Holds),
    within: Duration,
    what: &str,
    look: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HandlerError> {
    let number = LOOKS.fetch_add(1, Ordering::Relaxed);
    if let Err(why) = admitted(at, number) {
        return Err(not_answering(&format!("{what}: {why}"), holds));
    }
    let this = Arc::new(Look { at: at.to_owned(), number, started: Instant::now(), returned: AtomicBool::new(false) });
    let returns = Returns(this.clone());
    let work = move || {
        let _returns = returns;
        look()
    };
    match tokio::time::timeout(within, super::unless_stopped(cancel, work)).await {
        Ok(Some(Ok(answer))) => {
            this.came_in_time();
            Ok(answer)
        }
        Ok(Some(Err(e))) => Err(HandlerError::retryable(format!("{what} ended abnormally: {e}"))),
        Ok(None) => {
            this.given_up(within, false);
            Err(super::stopped_while(what))
        }
        Err(_) => {
            this.given_up(within, true);
            let said = format!("{what}: {} did not answer within {}", at.display(), spoken(within));
            Err(not_answering(&said, holds))
        }
    }
}

/// In the middle of a crawl, its library's share may answer none of its calls for this many limits
/// (`storage.root_answer_limit`) before the crawl gives them up, where a look before the walk gets one: a single call
/// into a share that answers may rightly wait longer than a look (an SMB open breaking a sleeping client's oplock,
/// about 35 s; an NFSv4 open recalling a dead client's delegation, up to 90 s; a folder beneath the root automounted).
pub(in crate::crawl) const LIMITS_OF_SILENCE: u32 = 4;

/// Whether the library's share behind `root` stopped answering the crawl's calls (its listings, its reads: none
/// answered within [`LIMITS_OF_SILENCE`] times `within` while one has waited at least that long;
/// [`almanac_media::Answers::silent_since`]). If so,
/// the calls under way are given up on, each kept as a look at the root given up on (its thread waits in the share):
/// the next crawls' looks at the root are refused while it stays silent, as after a look that did not answer, and each
/// call that returns says it answers again. Answers the error that stops the crawl.
pub(in crate::crawl) fn stopped_answering(root: &almanac_media::RootFolder, within: Duration) -> Option<HandlerError> {
    let (at, silence) = (root.path(), within.saturating_mul(LIMITS_OF_SILENCE));
    let now = Instant::now();
    let (since, calls) = root.answers().give_up_if_silent(now, silence, || {
        let number = LOOKS.fetch_add(1, Ordering::Relaxed);
        // Entered as a look begun now: the next look is made ten limits after the crawl gave up (not after the call
        // began, four limits or more before), and a call that returns says the folder answers again.
        let look = Arc::new(Look { at: at.to_owned(), number, started: now, returned: AtomicBool::new(false) });
        look.given_up(within, true);
        let returns = Returns(look);
        Box::new(move || drop(returns))
    })?;
    Some(HandlerError::retryable(format!(
        "the library's share at {} stopped answering in the middle of the crawl: {calls} call(s) into it (listing a \
         folder, reading a file) waited, the first for {} s, and none answered within {} (a share whose server \
         stopped answering, or a disk that did not wake?). What the crawl found before is kept, nothing it did not \
         look at is taken for deleted, and it is tried again later while it has attempts left, its slot free \
         meanwhile. {}; if the share is only slow, raise storage.root_answer_limit",
        at.display(),
        since.elapsed().as_secs(),
        spoken(silence),
        Holds::Library.remedy()
    )))
}

/// `limit` as said: in seconds, or in milliseconds if not whole seconds.
fn spoken(limit: Duration) -> String {
    match limit.subsec_millis() {
        0 => format!("{} s", limit.as_secs()),
        _ => format!("{} ms", limit.as_millis()),
    }
}

/// A look given up on, or not made: retryable, nothing read.
fn not_answering(what: &str, holds: Holds) -> HandlerError {
    HandlerError::retryable(format!(
        "{what} (a share whose server stopped answering, or a disk that did not wake?). Nothing was read; the crawl is \
         tried again later while it has attempts left, its slot free meanwhile. {}",
        holds.remedy()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate: every look that passes through it waits (as a call into a silent share does) until it opens.
    #[derive(Clone, Default)]
    struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

    impl Gate {
        fn waits(&self) -> impl FnOnce() + Send + 'static {
            let gate = self.clone();
            move || {
                let (open, opened) = &*gate.0;
                let mut open = open.lock().unwrap();
                while !*open {
                    open = opened.wait(open).unwrap();
                }
            }
        }
    }

    /// Holds its gate shut until dropped (at the test's end, or as it panics: the runtime's end waits for the calls).
    struct Shut(Gate);

    impl Drop for Shut {
        fn drop(&mut self) {
            let (open, opened) = &*(self.0).0;
            *open.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
            opened.notify_all();
        }
    }

    const LONG: Duration = Duration::from_secs(600);
    const SHORT: Duration = Duration::from_millis(100);

    /// Looks at `at` (a library's root) that answer are answered, side by side. One that does not answer within its
    /// limit is given up on, saying so; while its call waits, the next look at that folder is refused at once, its
    /// look never run, and a look at another folder is made. Once the call returns, the folder is looked at again.
    /// (Real time: a paused clock does not move while a blocking call runs. A look that must be given up on has a
    /// short limit, the others a long one.)
    #[tokio::test]
    async fn a_look_not_answered_in_time_is_given_up_on_and_not_made_again_while_it_waits() {
        let cancel = CancellationToken::new();
        let (share, other) = ((Path::new("/nas/photos"), Holds::Library), (Path::new("/disk/photos"), Holds::Library));
        assert_eq!(answered_in_time(&cancel, share, LONG, "looking", || 7).await, Ok(7));

        let gate = Gate::default();
        let shut = Shut(gate.clone());
        let beside = answered_in_time(&cancel, share, LONG, "looking", || 10);
        // A second: its folder is then not looked at again for ten, however slow the machine.
        let silent = answered_in_time(&cancel, share, Duration::from_secs(1), "opening the storage root", gate.waits());
        let (beside, given_up) = tokio::join!(beside, silent);
        assert_eq!(beside, Ok(10), "a look under way, not given up on, holds no other back");
        let given_up = given_up.unwrap_err();
        assert!(given_up.retryable, "{given_up:?}");
        for said in ["/nas/photos did not answer within 1 s", "Nothing was read", "pause --config"] {
            assert!(given_up.message.contains(said), "{said}: {}", given_up.message);
        }

        let made = Arc::new(AtomicBool::new(false));
        let looked = made.clone();
        let again = answered_in_time(&cancel, share, LONG, "opening the storage root", move || {
            looked.store(true, Ordering::SeqCst);
        });
        let refused = again.await.unwrap_err();
        assert!(refused.message.contains("/nas/photos has not answered since a look made"), "{}", refused.message);
        assert!(!made.load(Ordering::SeqCst), "no second look is made while the first waits");
        assert_eq!(answered_in_time(&cancel, other, LONG, "looking", || 8).await, Ok(8));

        drop(shut);
        let mut tries = 0;
        let answer = loop {
            match answered_in_time(&cancel, share, LONG, "looking", || 9).await {
                Err(e) if e.message.contains("has not answered since") && tries < 60_000 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                answer => break answer,
            }
        };
        assert_eq!(answer, Ok(9), "looked at again once the call given up on returned");
    }

    /// While a folder is silent, one look is made ten limits after the last given up on (the share may have been
    /// mounted again), one at a time: another at the same moment is refused. Once one answers, the folder answers.
    /// A silent proxy volume is said to hold up every library.
    #[tokio::test]
    async fn a_silent_folder_is_looked_at_again_once_at_a_time_after_a_while() {
        let cancel = CancellationToken::new();
        let proxies = (Path::new("/nas/proxies"), Holds::Proxies);
        let gate = Gate::default();
        let shut = Shut(gate.clone());
        let given_up = answered_in_time(&cancel, proxies, SHORT, "looking at the proxy root", gate.waits()).await;
        let given_up = given_up.unwrap_err();
        assert!(given_up.message.contains("every library's crawls wait for the proxy volume"), "{}", given_up.message);
        tokio::time::sleep(none_again_for(SHORT, 1)).await;

        let (refused, was_refused) = std::sync::mpsc::channel();
        let trying = answered_in_time(&cancel, proxies, LONG, "looking", move || {
            was_refused.recv_timeout(LONG).expect("the look beside was refused");
            12
        });
        let beside = async {
            let beside = answered_in_time(&cancel, proxies, LONG, "looking", || 13).await;
            refused.send(()).unwrap();
            beside
        };
        let (trying, beside) = tokio::join!(trying, beside);
        assert_eq!(trying, Ok(12));
        let refused = beside.unwrap_err();
        assert!(refused.message.contains("a look at it is under way"), "{}", refused.message);
        assert_eq!(answered_in_time(&cancel, proxies, LONG, "looking", || 14).await, Ok(14), "it answers again");
        drop(shut);
    }

    /// Eight calls waiting at a folder are the most kept: past them, no look is made there, whenever the last was.
    #[tokio::test]
    async fn no_more_than_eight_looks_wait_at_a_folder() {
        let at = (Path::new("/nas/full"), Holds::Library);
        let gate = Gate::default();
        let shut = Shut(gate.clone());
        for _ in 0..MOST_WAITING_AT_A_FOLDER - 1 {
            let stopped = CancellationToken::new();
            stopped.cancel();
            let e = answered_in_time(&stopped, at, LONG, "opening", gate.waits()).await.unwrap_err();
            assert!(e.message.starts_with("stopped while opening"), "{}", e.message);
        }
        let cancel = CancellationToken::new();
        answered_in_time(&cancel, at, Duration::from_millis(1), "opening", gate.waits()).await.unwrap_err();
        tokio::time::sleep(none_again_for(Duration::from_millis(1), 1)).await;
        let refused = answered_in_time(&cancel, at, LONG, "opening", || ()).await.unwrap_err();
        assert!(refused.message.contains("8 looks at /nas/full ("), "{}", refused.message);
        assert!(refused.message.contains("in all) still wait"), "{}", refused.message);
        assert!(refused.message.contains("restarting the Worker looks again at once"), "{}", refused.message);
        drop(shut);
    }

    /// docs/operations.md gives the bounds as the code has them.
    #[test]
    fn the_guide_states_the_bounds_on_looks_at_a_silent_folder() {
        let guide = include_str!("../../../../../docs/operations.md").replace("\n  ", " ");
        let first = none_again_for(almanac_media::ROOT_ANSWERS_WITHIN, 1).as_secs() / 60;
        for said in [
            format!("ten limits after the last ({first} min)"),
            format!("Once {MOST_WAITING_AT_A_FOLDER} calls wait at one folder ({MOST_WAITING} in all)"),
            format!(
                "for {LIMITS_OF_SILENCE} times `storage.root_answer_limit` ({} min unless set)",
                (almanac_media::ROOT_ANSWERS_WITHIN * LIMITS_OF_SILENCE).as_secs() / 60
            ),
        ] {
            assert!(guide.contains(&said), "docs/operations.md: {said}");
        }
    }

    /// Ten limits, doubled for each look given up on before, at most a day.
    #[test]
    fn a_folder_is_looked_at_again_later_the_more_looks_were_given_up_on() {
        let limit = Duration::from_secs(30);
        let waits: Vec<_> = (1..=12).map(|n| none_again_for(limit, n).as_secs()).collect();
        assert_eq!(waits, [300, 600, 1200, 2400, 4800, 9600, 19200, 38400, 76800, 86400, 86400, 86400]);
    }

    /// A look is given up on when the attempt is stopped, before its limit.
    #[tokio::test]
    async fn a_look_is_given_up_on_at_a_stop() {
        let cancel = CancellationToken::new();
        let stopping = cancel.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            stopping.cancel();
        });
        let gate = Gate::default();
        let shut = Shut(gate.clone());
        let at = (Path::new("/nas/stopped"), Holds::Library);
        let e = answered_in_time(&cancel, at, LONG, "opening", gate.waits()).await.unwrap_err();
        assert!(e.message.starts_with("stopped while opening"), "{}", e.message);
        drop(shut);
    }
}
