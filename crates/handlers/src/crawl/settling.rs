//! Files still being written (a phone syncing into the library, a copy in progress): a file is read only once
//! its size and mtime have stayed the same for the settle time (`storage.settle_time`). A file modified within
//! it is not read now, and a file whose size or mtime changed between the walk and the end of its hashing is
//! not written: both are counted as settling, and the crawl asks for itself again once they may have settled.
//!
//! Mtimes are judged by the database's clock (the queue's, which also decides when the crawl asked for again is
//! due), read once at the crawl's start and advanced by the monotonic clock. A local file's mtime comes from this
//! machine's clock, a share's from its server's: the clocks are expected in step (NTP). A file dated less than
//! the settle time ahead (a server whose clock runs a little ahead) is settling until it is that old; one dated
//! further ahead is not judged by its age (a camera set to the wrong year, or a server far off), since it would
//! look fresh for as long as the clocks disagree, and a crawl would be asked for again and again: it is read, and
//! only the look after its hashing tells whether it was still being written.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::walk::WalkEntry;

/// The time a crawl judges mtimes by: the database's at the crawl's start, advanced by the monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct CrawlClock {
    at_start: DateTime<Utc>,
    started: Instant,
}

impl CrawlClock {
    /// A clock that read `db_now` just now.
    pub fn new(db_now: DateTime<Utc>) -> Self {
        Self { at_start: db_now, started: Instant::now() }
    }

    /// The database's time now, as far as this crawl knows it.
    pub fn now(&self) -> DateTime<Utc> {
        self.at_start + chrono_duration(self.started.elapsed())
    }

    /// When a crawl asked for again finds every file that settles now settled: the settle time from now.
    pub fn after(&self, settle: Duration) -> DateTime<Utc> {
        self.now() + chrono_duration(settle)
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Whether a file modified at `mtime` may still be being written at `now`: modified less than `settle` ago, or
/// dated less than `settle` ahead of `now`. A file dated further ahead is not judged by its age (see the module's
/// words). A settle time of zero judges nothing by age.
pub(super) fn modified_recently(mtime: DateTime<Utc>, now: DateTime<Utc>, settle: Duration) -> bool {
    let settle = chrono_duration(settle);
    mtime > now - settle && mtime < now + settle
}

/// Whether the file the walk listed as `entry` has another size or mtime now (`now`: what `fstat` of the open
/// file says, as [`almanac_media::Original::size_and_mtime`] reads it).
pub(super) fn changed_since_listed(entry: &WalkEntry, now: (u64, DateTime<Utc>)) -> bool {
    now != (entry.size, entry.mtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    #[test]
    fn a_file_settles_once_older_than_the_settle_time_and_one_dated_far_ahead_is_not_judged_by_age() {
        let (now, settle) = (at(1_000_000), Duration::from_secs(10));
        assert!(modified_recently(at(1_000_000), now, settle), "written just now");
        assert!(modified_recently(at(999_991), now, settle), "9 s ago");
        assert!(!modified_recently(at(999_990), now, settle), "10 s ago: settled");
        assert!(!modified_recently(at(1), now, settle), "long ago");
        assert!(modified_recently(at(1_000_009), now, settle), "9 s ahead: a server's clock a little ahead");
        assert!(!modified_recently(at(1_000_010), now, settle), "10 s ahead or more: not judged by age");
        assert!(!modified_recently(at(4_000_000_000), now, settle), "a camera set to 2096");
        assert!(!modified_recently(now, now, Duration::ZERO), "a settle time of zero judges nothing by age");
    }

    #[test]
    fn the_crawls_clock_runs_from_the_databases_time() {
        let clock = CrawlClock::new(at(500));
        assert!(clock.now() >= at(500) && clock.now() < at(560));
        let due = clock.after(Duration::from_secs(10));
        assert!(due >= at(510) && due < at(570), "{due}");
    }

    #[test]
    fn another_size_or_mtime_than_the_walk_listed_is_a_change() {
        let entry = WalkEntry {
            rel: b"a.jpg".to_vec(),
            size: 10,
            mtime: at(5),
            inode: (1, at(5)),
            sidecar: None,
            closed: false,
        };
        assert!(!changed_since_listed(&entry, (10, at(5))));
        assert!(changed_since_listed(&entry, (11, at(5))), "grew");
        assert!(changed_since_listed(&entry, (10, at(6))), "written again, same size");
    }
}
