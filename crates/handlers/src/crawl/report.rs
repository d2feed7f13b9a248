//! What a crawl counts while it runs, and the report it ends with ([`CrawlReport`], the item's result).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use almanac_domain::{CrawlCounts, CrawlReport, MOST_LISTED, PathProblem, list_one};
use tracing::info;

use super::scope::SettlingFolders;
use super::walk::WalkReport;

/// The crawl's counters, bumped by the files processed side by side.
#[derive(Default)]
pub(super) struct Counters {
    /// Media files the walk listed so far (the total, once the walk is done).
    pub listed: AtomicU64,
    /// Whether the walk is done (its count is then the total).
    pub listing_done: std::sync::atomic::AtomicBool,
    pub found: AtomicU64,
    pub unchanged: AtomicU64,
    pub ingested: AtomicU64,
    pub moved: AtomicU64,
    pub copies: AtomicU64,
    pub revived: AtomicU64,
    pub touched: AtomicU64,
    pub regenerated: AtomicU64,
    pub redated: AtomicU64,
    /// Assets whose own path a file of other content took ([`CrawlCounts::replaced`]).
    pub replaced: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
    /// Files still being written: left for a crawl later.
    pub settling: AtomicU64,
    /// Files held back until the guard has weighed them ([`super::Run::hold_back`]) and not written yet: found, but
    /// not done.
    pub held_back: AtomicU64,
    /// The folders they are in, for the crawl of some folders asked for again.
    pub settling_in: Mutex<SettlingFolders>,
    pub bytes_hashed: AtomicU64,
    /// The files that failed, and why (the first [`MOST_LISTED`]).
    failures: Mutex<Vec<PathProblem>>,
}

/// Adds one to a counter.
pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// Counts a failed file and lists it while the list has room.
    pub fn failed(&self, path: String, reason: String) {
        bump(&self.failed);
        let mut failures = self.failures.lock().expect("poisoned");
        if failures.len() < MOST_LISTED {
            failures.push(PathProblem::new(path, reason));
        }
    }

    /// Counts a file still being written, at `rel`, and notes its folder.
    pub fn settling(&self, rel: &[u8]) {
        bump(&self.settling);
        self.settling_in.lock().expect("poisoned").add(rel);
    }

    /// Whether this crawl changed any asset (so Live Photo pairs may have formed).
    pub fn changed_assets(&self) -> bool {
        [&self.ingested, &self.moved, &self.revived, &self.touched, &self.regenerated, &self.redated]
            .iter()
            .any(|c| c.load(Ordering::Relaxed) > 0)
    }

    /// Media files the walk listed so far.
    pub fn listed(&self) -> u64 {
        self.listed.load(Ordering::Relaxed)
    }

    /// The counts so far, processing begun at `since`.
    pub fn counts(&self, since: std::time::Instant) -> CrawlCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut counts = CrawlCounts::default();
        counts.found = get(&self.found);
        counts.unchanged = get(&self.unchanged);
        counts.ingested = get(&self.ingested);
        counts.moved = get(&self.moved);
        counts.copies = get(&self.copies);
        counts.revived = get(&self.revived);
        counts.touched = get(&self.touched);
        counts.proxies_regenerated = get(&self.regenerated);
        counts.redated = get(&self.redated);
        counts.replaced = get(&self.replaced);
        counts.skipped = get(&self.skipped);
        counts.failed = get(&self.failed);
        counts.settling = get(&self.settling);
        counts.bytes_hashed = get(&self.bytes_hashed);
        counts.done = get(&self.found).saturating_sub(get(&self.held_back));
        counts.total = self.listing_done.load(Ordering::Relaxed).then(|| self.listed());
        counts.seconds = (since.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        counts
    }

    /// The crawl's report, from its final counts and what the walk and the settling found; logged as
    /// `crawl_finished` (the metrics count crawls from that line).
    pub fn report(&self, counts: CrawlCounts, walk: &WalkReport, soft_deleted: u64, paired: usize) -> CrawlReport {
        let mut report = CrawlReport::default();
        report.counts = counts;
        report.soft_deleted = soft_deleted;
        report.live_photos_paired = paired as u64;
        report.links_skipped = walk.links;
        report.unsupported = walk.unsupported;
        report.proxy_root_inside = walk.proxy_root_inside.clone();
        for passed in &walk.folder_loops {
            list_one(&mut report.folder_loops, &mut report.folder_loops_total, passed.path.clone());
        }
        for u in &walk.unreadable {
            let problem = PathProblem::new(u.path.clone(), u.reason.clone());
            list_one(&mut report.unreadable_folders, &mut report.unreadable_folders_total, problem);
        }
        report.failures = self.failures.lock().expect("poisoned").clone();
        info!(
            event = "crawl_finished",
            files_found = report.counts.found,
            files_ingested = report.counts.ingested,
            files_failed = report.counts.failed,
            files_settling = report.counts.settling,
            bytes_hashed = report.counts.bytes_hashed,
            result = %serde_json::to_value(&report).unwrap_or_default(),
            "crawl finished"
        );
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files held back are found but not done until they are written: the progress moves on during their replay
    /// instead of standing at its total.
    #[test]
    fn files_held_back_are_done_once_written() {
        let counters = Counters::default();
        counters.found.store(10, Ordering::Relaxed);
        counters.held_back.store(3, Ordering::Relaxed);
        let counts = counters.counts(std::time::Instant::now());
        assert_eq!((counts.found, counts.done), (10, 7));
        counters.held_back.fetch_sub(3, Ordering::Relaxed);
        assert_eq!(counters.counts(std::time::Instant::now()).done, 10);
    }

    #[test]
    fn failures_are_all_counted_and_the_first_two_hundred_listed() {
        let counters = Counters::default();
        for i in 0..(MOST_LISTED + 5) {
            counters.failed(format!("f{i}.jpg"), "broken".into());
        }
        let report = counters.report(counters.counts(std::time::Instant::now()), &WalkReport::default(), 0, 0);
        assert_eq!(report.counts.failed, MOST_LISTED as u64 + 5);
        assert_eq!(report.failures.len(), MOST_LISTED);
        assert_eq!(report.failures[0], PathProblem { path: "f0.jpg".into(), reason: "broken".into() });
    }

    /// A library whose folders cannot be read by the thousand (a share copied with another owner's rights) names the
    /// first folders not walked and counts them all, for unreadable folders and loops alike.
    #[test]
    fn folders_not_walked_are_all_counted_and_the_first_two_hundred_listed() {
        let counters = Counters::default();
        let mut walk = WalkReport::default();
        let folder = |i: usize| super::super::walk::FolderNotWalked {
            rel: format!("{i}").into_bytes(),
            path: format!("/photos/{i}"),
            reason: "Permission denied".into(),
        };
        walk.unreadable.extend((0..MOST_LISTED + 3).map(folder));
        walk.folder_loops.extend((0..MOST_LISTED + 1).map(folder));
        let report = counters.report(counters.counts(std::time::Instant::now()), &walk, 0, 0);
        assert_eq!((report.unreadable_folders.len(), report.unreadable_folders_total), (MOST_LISTED, 203));
        assert_eq!(report.unreadable_folders[0], PathProblem::new("/photos/0", "Permission denied"));
        assert_eq!((report.folder_loops.len(), report.folder_loops_total), (MOST_LISTED, 201));
    }

    #[test]
    fn the_time_taken_is_reported_in_tenths_of_a_second() {
        let since = std::time::Instant::now() - std::time::Duration::from_millis(2_040);
        let seconds = Counters::default().counts(since).seconds;
        // 2.04 s rounds to 2.0; 2.1 allows this machine up to 160 ms before the clock is read.
        assert!(seconds == 2.0 || seconds == 2.1, "{seconds}");
    }

    #[test]
    fn only_changes_to_assets_count_as_changed() {
        let counters = Counters::default();
        bump(&counters.unchanged);
        bump(&counters.copies);
        bump(&counters.skipped);
        assert!(!counters.changed_assets(), "copies and unchanged files form no new pair");
        bump(&counters.redated);
        assert!(counters.changed_assets());
    }
}
