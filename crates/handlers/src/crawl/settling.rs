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

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use almanac_domain::StorageConfigId;

use super::scope::CrawlScope;
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

/// Since when each file a crawl found still being written has been found so, by config and path, for every
/// crawl a Worker runs. A crawl that found files still being written asks for itself again once they may have
/// settled: the settle time after it, at first. A file written for a long time (a camera recording into the
/// library, a copy of hours over a slow link, one file after the other) made that a crawl of its folder every
/// settle time for as long as it was written. Now the crawl asked for again waits half as long as the file that
/// started last among them has been found being written, [`StillWritten::MAX_WAIT`] at most.
/// Kept in memory only: a Worker that restarts, or another Worker's crawl, starts again from the settle time.
#[derive(Debug, Default)]
pub(super) struct StillWritten {
    seen: std::sync::Mutex<HashMap<(StorageConfigId, Vec<u8>), Seen>>,
}

/// When a file was first found still being written, and when last, by the crawls' clock.
#[derive(Debug, Clone, Copy)]
struct Seen {
    first: DateTime<Utc>,
    last: DateTime<Utc>,
}

impl StillWritten {
    /// The longest a crawl asked for again for files still being written waits.
    pub const MAX_WAIT: Duration = Duration::from_secs(5 * 60);
    /// A file not found being written for this long is forgotten (its config deleted, its crawls run elsewhere).
    const FORGET_AFTER: Duration = Duration::from_secs(3600);
    /// The most files remembered; beyond, all are forgotten (each waits the settle time again, as before).
    const MAX_REMEMBERED: usize = 10_000;

    /// Notes what a crawl of `config` covering `scope` found at its end (`now`): the files still being written
    /// (`None`: more than it names), so that those in its scope it did not find so are forgotten (read, or gone),
    /// and answers how long the crawl it asks for again waits: `settle`, or half as long as the file that started
    /// last has been found being written, up to [`StillWritten::MAX_WAIT`] (never less than `settle`). Called at
    /// the end of every crawl, whatever it found.
    pub fn wait(
        &self,
        config: StorageConfigId,
        scope: &CrawlScope,
        files: Option<&[Vec<u8>]>,
        now: DateTime<Utc>,
        settle: Duration,
    ) -> Duration {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let forgotten = now - chrono_duration(Self::FORGET_AFTER);
        seen.retain(|_, s| s.last >= forgotten);
        let Some(files) = files else { return settle };
        let found: HashSet<&[u8]> = files.iter().map(Vec::as_slice).collect();
        seen.retain(|(c, path), _| *c != config || !scope.contains(path) || found.contains(path.as_slice()));
        if seen.len() + files.len() > Self::MAX_REMEMBERED {
            seen.clear();
        }
        let mut started_last = None;
        for file in files {
            let s = seen.entry((config, file.clone())).or_insert(Seen { first: now, last: now });
            s.last = now;
            started_last = started_last.max(Some(s.first));
        }
        let written_for = started_last.map_or(Duration::ZERO, |at| (now - at).to_std().unwrap_or_default());
        (written_for / 2).clamp(settle, Self::MAX_WAIT.max(settle))
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

    /// A file found still being written crawl after crawl has its folder asked for again less and less often,
    /// five minutes apart at most; a file that arrives beside it brings that back to the settle time; one no
    /// longer found so in the crawl's scope is forgotten, one outside it, or another config's, is not.
    #[test]
    fn a_file_still_being_written_crawl_after_crawl_is_asked_for_less_and_less_often() {
        let (still, settle, config) = (StillWritten::default(), Duration::from_secs(10), StorageConfigId::new());
        let whole = CrawlScope::of(&almanac_domain::CrawlArgs::default()).unwrap();
        let cam = CrawlScope::of(&almanac_domain::CrawlArgs::of_folders(vec!["cam".into()], vec![])).unwrap();
        let rec = vec![b"cam/rec.mp4".to_vec()];
        let mut waits = Vec::new();
        let mut t = at(1_000_000);
        for _ in 0..10 {
            let wait = still.wait(config, &cam, Some(&rec), t, settle);
            waits.push(wait.as_secs());
            t += chrono_duration(wait);
        }
        assert_eq!(waits, [10, 10, 10, 15, 22, 33, 50, 75, 113, 170]);
        for _ in 0..5 {
            let wait = still.wait(config, &cam, Some(&rec), t, settle);
            t += chrono_duration(wait);
        }
        assert_eq!(still.wait(config, &cam, Some(&rec), t, settle), StillWritten::MAX_WAIT);
        let both = [rec[0].clone(), b"cam/new.jpg".to_vec()];
        assert_eq!(still.wait(config, &cam, Some(&both), t, settle), settle, "a file that just arrived");
        assert_eq!(still.wait(config, &cam, None, t, settle), settle, "more than a crawl names");
        let other = StorageConfigId::new();
        assert_eq!(still.wait(other, &whole, Some(&[b"x.jpg".to_vec()]), t, settle), settle);
        let elsewhere = CrawlScope::of(&almanac_domain::CrawlArgs::of_folders(vec!["b".into()], vec![])).unwrap();
        still.wait(config, &elsewhere, Some(&[b"b/x.jpg".to_vec()]), t, settle);
        assert_eq!(still.wait(config, &cam, Some(&rec), t, settle), StillWritten::MAX_WAIT, "kept outside its scope");
        still.wait(config, &whole, Some(&[b"b/x.jpg".to_vec()]), t, settle);
        assert_eq!(still.wait(config, &cam, Some(&rec), t, settle), settle, "settled, then written again");
        for _ in 0..5 {
            let wait = still.wait(config, &cam, Some(&rec), t, settle);
            t += chrono_duration(wait);
        }
        assert_eq!(still.wait(config, &cam, Some(&[]), t, settle), settle, "none found");
        assert_eq!(still.wait(config, &cam, Some(&rec), t, settle), settle, "read by a crawl that found none");
        for _ in 0..5 {
            let wait = still.wait(config, &cam, Some(&rec), t, settle);
            t += chrono_duration(wait);
        }
        let later = t + chrono_duration(StillWritten::FORGET_AFTER);
        assert_eq!(still.wait(config, &cam, Some(&rec), later, settle), settle, "not seen for an hour");
        let long = Duration::from_secs(3600);
        assert_eq!(still.wait(config, &cam, Some(&rec), t, long), long, "never less than the settle time");
        let guide = include_str!("../../../../docs/operations.md");
        let said = format!("`settle_time` at least and {} minutes at most", StillWritten::MAX_WAIT.as_secs() / 60);
        assert!(guide.contains(&said), "docs/operations.md says how long at most: {said}");
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
