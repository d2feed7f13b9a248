//! Log capture that holds when tests share a process: [`each_thread_chooses_its_lines`].
//!
//! tracing caches, once per process, whether a log line's call site is wanted. While at most one subscriber
//! is registered, it asks only the subscriber of the thread that reaches the line first: a test capturing with
//! a scoped subscriber (`set_default`, `with_subscriber`) loses a line that a test beside it, on a thread with
//! no subscriber, reached first, because "no subscriber" answered "never" for the whole process. Plain
//! `cargo test` runs a binary's tests as threads of one process, so such a capture fails now and then (a
//! watcher's `watch_started` went missing that way). nextest, one process per test, never shows it.

use std::sync::Once;

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Event, Metadata};

/// Sets, once per process, a global subscriber that wants nothing itself and answers "ask each time" for every
/// call site, so that every line is offered to the subscriber of the thread that logs it, whichever thread
/// reached it first. Call it before a scoped capture; a global subscriber another test set first is kept.
pub fn each_thread_chooses_its_lines() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        let _ = tracing::subscriber::set_global_default(AskEachTime);
    });
}

/// A subscriber that keeps nothing and never lets a call site's interest be cached.
struct AskEachTime;

impl Subscriber for AskEachTime {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        // Unknown, so the process's level filter is set by the scoped subscribers alone.
        None
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    use super::*;

    /// Counts the lines it is given.
    struct Counting(Arc<AtomicUsize>);

    impl Subscriber for Counting {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    fn the_line() {
        tracing::info!(event = "probe", "a line two threads reach");
    }

    /// The order that lost lines, forced: the capture's subscriber is made (the only one registered), then a
    /// thread with no subscriber reaches the line first, then the capturing thread reaches it.
    #[test]
    fn a_line_another_thread_reached_first_without_a_subscriber_is_still_captured() {
        each_thread_chooses_its_lines();
        let count = Arc::new(AtomicUsize::new(0));
        let capture_made = Arc::new(Barrier::new(2));
        let line_reached = Arc::new(Barrier::new(2));
        let capturing = {
            let (count, capture_made, line_reached) = (count.clone(), capture_made.clone(), line_reached.clone());
            std::thread::spawn(move || {
                let _guard = tracing::subscriber::set_default(Counting(count));
                capture_made.wait();
                line_reached.wait();
                the_line();
            })
        };
        let bare = std::thread::spawn(move || {
            capture_made.wait();
            the_line();
            line_reached.wait();
        });
        bare.join().unwrap();
        capturing.join().unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 1, "the capturing thread's line reached its subscriber");
    }

    /// The global subscriber wants nothing: on a thread that captures nothing, a line is not even built (its
    /// fields are not computed), so setting it costs the tests nothing.
    #[test]
    fn a_line_on_a_thread_that_captures_nothing_is_not_built() {
        each_thread_chooses_its_lines();
        let built = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                tracing::info!(event = "probe", field = built.fetch_add(1, Ordering::SeqCst), "never built");
            });
        });
        assert_eq!(built.load(Ordering::SeqCst), 0, "the line's fields were computed");
    }
}
