//! Whether a share still answers, told from the calls made into it: a crawl's listings and reads are blocking calls
//! that no token interrupts, and a share whose server stops answering in the middle of a crawl leaves them waiting
//! for ever. A call that is slow but moves (a large video read block by block from a slow NAS, a folder of fifty
//! thousand photos listed entry by entry) answers often; a share that stopped answers nothing.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What is done once a call given up on returns (from its own thread).
pub type OnReturn = Box<dyn FnOnce() + Send>;

/// The most one read through [`Answering`] asks for: a read of a network share returns only once all it asked for has
/// come, and `read_to_end` asks for up to half a large still at once (minutes over a slow link).
const MOST_READ_AT_ONCE: usize = 1 << 20;

/// The calls made into one share (through one [`crate::RootFolder`] and the files opened beneath it): which are under
/// way, since when, and when one last answered. Each is one system call (an open, a `stat`, a block of a listing or
/// of a file), so a share that answers at all answers within moments.
#[derive(Default)]
pub struct Answers {
    calls: Mutex<Calls>,
}

#[derive(Default)]
struct Calls {
    next: u64,
    /// The calls under way: each one's number, when it started, and what its return does if it was given up on.
    under_way: BTreeMap<u64, (Instant, Option<OnReturn>)>,
    /// When a call last returned.
    last_answer: Option<Instant>,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls = self.calls();
        f.debug_struct("Answers")
            .field("under_way", &calls.under_way.len())
            .field("last_answer", &calls.last_answer)
            .finish()
    }
}

/// A call under way; its end (a return or an unwind) is noted when dropped.
struct UnderWay<'a> {
    answers: &'a Answers,
    number: u64,
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let on_return = {
            let mut calls = self.answers.calls();
            calls.last_answer = Some(Instant::now());
            calls.under_way.remove(&self.number).and_then(|(_, on_return)| on_return)
        };
        if let Some(on_return) = on_return {
            on_return();
        }
    }
}

impl Answers {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `call` into the share, noted as under way until it returns.
    pub fn call<T>(&self, call: impl FnOnce() -> T) -> T {
        let number = {
            let mut calls = self.calls();
            let number = calls.next;
            calls.next += 1;
            calls.under_way.insert(number, (Instant::now(), None));
            number
        };
        let _under_way = UnderWay { answers: self, number };
        call()
    }

    /// When the oldest call under way started, if the share is silent at `now`: that call has waited at least `limit`,
    /// and no call returned within the last `limit`. One file that never answers (a bad sector, a file the server
    /// holds) while others do is not silence until the crawl waits on it alone for `limit`.
    pub fn silent_since(&self, now: Instant, limit: Duration) -> Option<Instant> {
        Self::silent(&self.calls(), now, limit)
    }

    fn silent(calls: &Calls, now: Instant, limit: Duration) -> Option<Instant> {
        let oldest = calls.under_way.values().next()?.0;
        let waited = |since: Instant| now.saturating_duration_since(since) >= limit;
        (waited(oldest) && calls.last_answer.is_none_or(waited)).then_some(oldest)
    }

    /// If the share is silent at `now` ([`Answers::silent_since`]), gives up on the calls under way: `given_up`
    /// answers, for each, what is to be done once it returns (it is then run on that call's thread). Answers when the
    /// oldest started and how many there were (none given up on twice).
    pub fn give_up_if_silent(
        &self,
        now: Instant,
        limit: Duration,
        mut given_up: impl FnMut() -> OnReturn,
    ) -> Option<(Instant, usize)> {
        let mut calls = self.calls();
        let since = Self::silent(&calls, now, limit)?;
        let mut count = 0;
        for (_, on_return) in calls.under_way.values_mut() {
            if on_return.is_none() {
                *on_return = Some(given_up());
                count += 1;
            }
        }
        Some((since, count))
    }

    /// `file` read (and sought) with each call noted here.
    pub fn reading<'a, F>(&'a self, file: F) -> Answering<'a, F> {
        Answering { answers: self, file }
    }
}

/// A file whose every read is a call noted by [`Answers`].
pub struct Answering<'a, F> {
    answers: &'a Answers,
    file: F,
}

impl<F: Read> Read for Answering<'_, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let (file, at_once) = (&mut self.file, buf.len().min(MOST_READ_AT_ONCE));
        self.answers.call(|| file.read(&mut buf[..at_once]))
    }
}

impl<F: Seek> Seek for Answering<'_, F> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let file = &mut self.file;
        self.answers.call(|| file.seek(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LIMIT: Duration = Duration::from_secs(30);

    #[test]
    fn a_share_is_silent_only_once_a_call_waited_the_limit_and_none_answered_within_it() {
        let answers = Answers::default();
        let start = Instant::now();
        assert_eq!(answers.silent_since(start + LIMIT * 10, LIMIT), None, "no call under way: nothing waits");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let answers = &answers;
            s.spawn(move || {
                answers.call(|| {
                    entered_tx.send(()).unwrap();
                    rx.recv().unwrap();
                })
            });
            entered.recv().unwrap();
            let began = answers.calls().under_way.values().next().unwrap().0;
            assert_eq!(answers.silent_since(began + LIMIT / 2, LIMIT), None, "waited half the limit");
            assert_eq!(answers.silent_since(began + LIMIT, LIMIT), Some(began), "waited the limit, nothing answered");
            // Another call answers meanwhile: the share answers, though the first call still waits.
            answers.call(|| ());
            let answered = answers.calls().last_answer.unwrap();
            assert_eq!(answers.silent_since(answered + LIMIT / 2, LIMIT), None, "an answer within the limit");
            assert_eq!(answers.silent_since(answered + LIMIT, LIMIT), Some(began), "the first waits alone");
            tx.send(()).unwrap();
        });
        assert_eq!(answers.silent_since(start + LIMIT * 10, LIMIT), None, "every call returned");
    }

    #[test]
    fn a_call_given_up_on_says_so_when_it_returns_and_only_a_silent_share_s_are_given_up_on() {
        let answers = Arc::new(Answers::default());
        answers.call(|| ());
        let returned = Arc::new(AtomicUsize::new(0));
        let counted = |returned: &Arc<AtomicUsize>| {
            let returned = returned.clone();
            move || -> OnReturn {
                let returned = returned.clone();
                Box::new(move || {
                    returned.fetch_add(1, Ordering::SeqCst);
                })
            }
        };
        let late = Instant::now() + LIMIT * 10;
        assert_eq!(answers.give_up_if_silent(late, LIMIT, counted(&returned)), None, "nothing under way");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
        let waiting = {
            let answers = answers.clone();
            std::thread::spawn(move || {
                answers.call(|| {
                    entered_tx.send(()).unwrap();
                    rx.recv().unwrap();
                })
            })
        };
        entered.recv().unwrap();
        let began = answers.calls().under_way.values().next().unwrap().0;
        assert_eq!(answers.give_up_if_silent(began + LIMIT / 2, LIMIT, counted(&returned)), None, "not silent yet");
        let late = began + LIMIT * 10;
        assert_eq!(answers.give_up_if_silent(late, LIMIT, counted(&returned)), Some((began, 1)));
        assert_eq!(answers.give_up_if_silent(late, LIMIT, counted(&returned)), Some((began, 0)), "given up on once");
        assert_eq!(returned.load(Ordering::SeqCst), 0, "not returned yet");
        tx.send(()).unwrap();
        waiting.join().unwrap();
        assert_eq!(returned.load(Ordering::SeqCst), 1, "told once as it returned");
    }

    #[test]
    fn a_large_read_through_answering_is_asked_for_a_block_at_a_time() {
        let mut file = std::io::Cursor::new(vec![7u8; 3 * MOST_READ_AT_ONCE]);
        let answers = Answers::default();
        let mut buf = vec![0u8; 3 * MOST_READ_AT_ONCE];
        assert_eq!(answers.reading(&mut file).read(&mut buf).unwrap(), MOST_READ_AT_ONCE);
    }

    #[test]
    fn reads_through_answering_are_calls() {
        let mut file = std::io::Cursor::new(vec![7u8; 10]);
        let answers = Answers::default();
        let mut read = Vec::new();
        answers.reading(&mut file).read_to_end(&mut read).unwrap();
        assert_eq!(read.len(), 10);
        let reads = answers.calls().next;
        assert!(reads >= 2, "the block and the end, each a call: {reads}");
        answers.reading(&mut file).seek(SeekFrom::Start(0)).unwrap();
        assert_eq!(answers.calls().next, reads + 1);
        assert!(answers.calls().under_way.is_empty() && answers.calls().last_answer.is_some());
    }
}
