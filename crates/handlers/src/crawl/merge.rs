//! The walk beside the catalogue: both in the byte order of paths, so each listed file is matched with what the
//! catalogue knew at its path by stepping two cursors, and neither the tree nor the catalogue is ever held
//! whole. What is kept grows with what changed (files to process, paths not found), not with the library.

use almanac_domain::Cause;
use almanac_domain::ports::{CatalogueError, KnownFile};
use almanac_media::RootFolder;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::report::Counters;
use super::scope::CrawlScope;
use super::walk::{WalkEntry, WalkReport, Walked, walk_folders};

/// How many unchanged files are counted at once.
const UNCHANGED_BATCH: u64 = 1024;

/// The walk of `scope`'s folders beside their known files (`pages`, in path order, an empty page at the end):
/// new and changed files go to `files` with what the catalogue knew at their path (and whether a watcher saw
/// them closed as they are now), unchanged ones are counted there in batches. Answers what the walk passed over
/// and what the merge kept, or the catalogue's error (the walk then stopped). Blocking.
pub(super) fn walk_beside(
    root: &RootFolder,
    scope: &CrawlScope,
    avoid: Option<(u64, u64)>,
    halt: &CancellationToken,
    counters: &Counters,
    mut pages: mpsc::Receiver<Vec<KnownFile>>,
    files: &mpsc::UnboundedSender<Walked>,
) -> (WalkReport, Result<Leftover, CatalogueError>) {
    // A loader gone without its empty page stopped on an error of its own: never the end of the known files,
    // or every file after this point would look vanished.
    let mut merge = Merge::new(|| {
        pages.blocking_recv().ok_or_else(|| CatalogueError::Unexpected(Cause::new("the known files stopped loading")))
    });
    let (mut failed, mut unchanged) = (None, 0);
    let report = walk_folders(root, scope.folders(), avoid, scope.mounts(), halt, |mut entry| {
        // A problem that stops the crawl halts the walk at once, not at the next folder.
        if halt.is_cancelled() {
            return false;
        }
        counters.listed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A file a watcher saw closed after writing is read whatever its size and mtime say: a tool that rewrites a
        // photo and puts its mtime back (`exiftool -P` fixing a date, of the same length) leaves both as they were.
        let closed = scope.closed_as_listed(root, &entry);
        match merge.file(&entry, closed) {
            Err(e) => {
                failed = Some(e);
                false
            }
            Ok(Matched::Unchanged) => {
                unchanged += 1;
                unchanged < UNCHANGED_BATCH || files.send(Walked::Unchanged(std::mem::take(&mut unchanged))).is_ok()
            }
            Ok(Matched::Changed(known)) => {
                entry.closed = closed;
                files.send(Walked::File(Box::new((entry, known)))).is_ok()
            }
        }
    });
    counters.listing_done.store(!report.stopped, std::sync::atomic::Ordering::Relaxed);
    if unchanged > 0 {
        let _ = files.send(Walked::Unchanged(unchanged));
    }
    let merged = match failed {
        Some(e) => Err(e),
        // What a stopped walk left is never settled.
        None if report.stopped => Ok(Leftover::default()),
        None => merge.finish(),
    };
    (report, merged)
}

/// What the catalogue knew at a listed file's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Matched {
    /// A known file, found unchanged: nothing to do.
    Unchanged,
    /// New or changed: to be processed, with the known file at its path, if any.
    Changed(Option<KnownFile>),
}

/// What the merge kept for the end of the crawl.
#[derive(Debug, Default)]
pub(super) struct Leftover {
    /// Known files that were not found unchanged: not found at all, or changed (processing may still find
    /// them, as a move, a copy or a touched file). What processing did not find of these vanished.
    pub not_unchanged: Vec<KnownFile>,
    /// Extra paths (copies) found unchanged: an asset whose own path vanished moves to one of them.
    pub unchanged_extras: Vec<KnownFile>,
    /// The config's active assets (own paths the catalogue listed), for the deletion guards.
    pub active: usize,
}

/// The catalogue's known files, page by page in path order, stepped beside the walk.
pub(super) struct Merge<P> {
    /// The next page, or `Ok(empty)` at the end.
    pages: P,
    page: std::vec::IntoIter<KnownFile>,
    next: Option<KnownFile>,
    ended: bool,
    leftover: Leftover,
}

impl<P: FnMut() -> Result<Vec<KnownFile>, CatalogueError>> Merge<P> {
    /// A merge over the known files `pages` hands out, in path order (an empty page ends them).
    pub fn new(pages: P) -> Self {
        Self { pages, page: Vec::new().into_iter(), next: None, ended: false, leftover: Leftover::default() }
    }

    /// The next listed file (paths come in increasing byte order): whether it is unchanged, or what the
    /// catalogue knew at its path; never unchanged when it is to be `read` whatever its facts say. Known files
    /// passed over on the way were not found.
    pub fn file(&mut self, entry: &WalkEntry, read: bool) -> Result<Matched, CatalogueError> {
        while self.peek()?.is_some_and(|k| k.facts.file_path < entry.rel) {
            let gone = self.take();
            self.leftover.not_unchanged.push(gone);
        }
        // An own path sorts before an extra path at the same bytes: a catalogue holding both (it should not)
        // matches the own path, and the other is treated as not found.
        let mut here = None;
        while self.peek()?.is_some_and(|k| k.facts.file_path == entry.rel) {
            let k = self.take();
            match here {
                None => here = Some(k),
                Some(_) => self.leftover.not_unchanged.push(k),
            }
        }
        Ok(match here {
            Some(k) if !read && unchanged(&k, entry) => {
                if k.extra {
                    self.leftover.unchanged_extras.push(k);
                }
                Matched::Unchanged
            }
            Some(k) => {
                self.leftover.not_unchanged.push(k.clone());
                Matched::Changed(Some(k))
            }
            None => Matched::Changed(None),
        })
    }

    /// After the last listed file: every known file not reached was not found.
    pub fn finish(mut self) -> Result<Leftover, CatalogueError> {
        while self.peek()?.is_some() {
            let gone = self.take();
            self.leftover.not_unchanged.push(gone);
        }
        Ok(self.leftover)
    }

    fn peek(&mut self) -> Result<Option<&KnownFile>, CatalogueError> {
        if self.next.is_none() && !self.ended {
            self.next = match self.page.next() {
                Some(k) => Some(k),
                None => {
                    let page = (self.pages)()?;
                    self.ended = page.is_empty();
                    self.page = page.into_iter();
                    self.page.next()
                }
            };
        }
        Ok(self.next.as_ref())
    }

    fn take(&mut self) -> KnownFile {
        let k = self.next.take().expect("peeked");
        if !k.extra {
            self.leftover.active += 1;
        }
        k
    }
}

/// Unchanged means the same size and mtime at the same path, the same sidecar (an asset's date is read again
/// when its sidecar appears, changes or vanishes), a date read with the rules as they are (one read with a rule
/// since corrected is read again), and no proxy missing (an asset whose proxies were deleted is read again and its
/// proxies made again).
fn unchanged(k: &KnownFile, entry: &WalkEntry) -> bool {
    same_facts(k, entry) && k.proxies_complete && (k.extra || (k.sidecar == entry.sidecar && k.date_current))
}

/// Whether the file has the size and mtime the catalogue has for its path.
pub(super) fn same_facts(k: &KnownFile, entry: &WalkEntry) -> bool {
    k.facts.size == entry.size && k.facts.mtime == entry.mtime
}

#[cfg(test)]
mod tests {
    use almanac_domain::AssetId;
    use almanac_domain::ports::FileFacts;
    use chrono::{DateTime, Utc};

    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    fn known(path: &str, extra: bool) -> KnownFile {
        KnownFile {
            asset_id: AssetId::new(),
            facts: FileFacts { file_path: path.into(), display_path: String::new(), size: 10, mtime: at(1) },
            extra,
            sidecar: None,
            proxies_complete: true,
            date_current: true,
        }
    }

    fn entry(path: &str, size: u64) -> WalkEntry {
        WalkEntry { rel: path.into(), size, mtime: at(1), inode: (1, at(1)), sidecar: None, closed: false }
    }

    /// Pages of `size` known files out of `all`, as the store hands them out, counting the calls.
    fn pages(all: Vec<KnownFile>, size: usize) -> impl FnMut() -> Result<Vec<KnownFile>, CatalogueError> {
        let mut rest = all.into_iter();
        move || Ok(rest.by_ref().take(size).collect())
    }

    fn paths(files: &[KnownFile]) -> Vec<&str> {
        files.iter().map(|k| std::str::from_utf8(&k.facts.file_path).unwrap()).collect()
    }

    #[test]
    fn each_listed_file_meets_what_the_catalogue_knew_at_its_path_across_pages() {
        let mut broken = known("c.jpg", false);
        broken.proxies_complete = false;
        let mut outdated = known("d.jpg", false);
        outdated.date_current = false;
        let catalogue = vec![
            known("a.jpg", false),
            known("a/b.jpg", true),
            known("a/gone.jpg", false),
            known("b.jpg", false),
            broken,
            outdated,
            known("copy/x.jpg", true),
            known("z.jpg", false),
        ];
        for page in [1, 2, 3, 100] {
            let mut merge = Merge::new(pages(catalogue.clone(), page));
            assert_eq!(merge.file(&entry("a.jpg", 10), false).unwrap(), Matched::Unchanged);
            assert_eq!(merge.file(&entry("a/b.jpg", 10), false).unwrap(), Matched::Unchanged);
            assert_eq!(merge.file(&entry("a/new.jpg", 10), false).unwrap(), Matched::Changed(None));
            let Matched::Changed(Some(k)) = merge.file(&entry("b.jpg", 11), false).unwrap() else {
                panic!("b changed")
            };
            assert_eq!(k.facts.file_path, b"b.jpg");
            assert!(
                matches!(merge.file(&entry("c.jpg", 10), false).unwrap(), Matched::Changed(Some(_))),
                "proxies missing"
            );
            assert!(
                matches!(merge.file(&entry("d.jpg", 10), false).unwrap(), Matched::Changed(Some(_))),
                "date outdated"
            );
            assert_eq!(merge.file(&entry("copy/x.jpg", 10), false).unwrap(), Matched::Unchanged);
            let Matched::Changed(Some(k)) = merge.file(&entry("z.jpg", 10), true).unwrap() else { panic!("read") };
            assert_eq!(k.facts.file_path, b"z.jpg", "unchanged by its facts, read all the same");
            let left = merge.finish().unwrap();
            let not_unchanged = ["a/gone.jpg", "b.jpg", "c.jpg", "d.jpg", "z.jpg"];
            assert_eq!(paths(&left.not_unchanged), not_unchanged, "page of {page}");
            assert_eq!(paths(&left.unchanged_extras), ["a/b.jpg", "copy/x.jpg"]);
            assert_eq!(left.active, 6, "own paths only");
        }
    }

    #[test]
    fn an_own_path_and_an_extra_path_at_the_same_bytes_match_the_own_one() {
        let own = known("a.jpg", false);
        let mut merge = Merge::new(pages(vec![own.clone(), known("a.jpg", true)], 1));
        assert_eq!(merge.file(&entry("a.jpg", 10), false).unwrap(), Matched::Unchanged);
        let left = merge.finish().unwrap();
        assert_eq!((left.not_unchanged.len(), left.not_unchanged[0].extra), (1, true));
        assert!(left.unchanged_extras.is_empty());
    }

    #[test]
    fn a_catalogue_that_stops_answering_stops_the_merge() {
        let mut calls = 0;
        let mut merge = Merge::new(|| {
            calls += 1;
            if calls == 1 {
                Ok(vec![known("a.jpg", false), known("c.jpg", false), known("d.jpg", false)])
            } else {
                Err(CatalogueError::Unavailable(Cause::new("connection closed")))
            }
        });
        assert_eq!(merge.file(&entry("a.jpg", 10), false).unwrap(), Matched::Unchanged);
        assert_eq!(merge.file(&entry("b.jpg", 10), false).unwrap(), Matched::Changed(None));
        // Past the first page: the next one is needed, and its error ends the merge (nothing after it may look
        // vanished).
        assert!(matches!(merge.file(&entry("e.jpg", 10), false), Err(CatalogueError::Unavailable(_))));
    }

    /// The whole walk beside the known files `catalogue` (one page, then the end): what it sent, in order.
    fn walk_beside_all(root: &RootFolder, catalogue: Vec<KnownFile>) -> Vec<Walked> {
        let (pages_tx, pages_rx) = mpsc::channel(2);
        pages_tx.try_send(catalogue).unwrap();
        pages_tx.try_send(Vec::new()).unwrap();
        let (files_tx, mut files_rx) = mpsc::unbounded_channel();
        let scope = CrawlScope::of(&almanac_domain::CrawlArgs::default()).unwrap();
        let (_, merged) =
            walk_beside(root, &scope, None, &CancellationToken::new(), &Counters::default(), pages_rx, &files_tx);
        merged.unwrap();
        drop(files_tx);
        std::iter::from_fn(|| files_rx.try_recv().ok()).collect()
    }

    /// Unchanged files reach processing as counts of UNCHANGED_BATCH, not one message each (a re-crawl of a
    /// million unchanged files sends about a thousand), and no empty count at the end.
    #[test]
    fn unchanged_files_are_counted_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let n = 2 * UNCHANGED_BATCH;
        for i in 0..n {
            std::fs::write(dir.path().join(format!("{i:05}.jpg")), b"x").unwrap();
        }
        let root = RootFolder::open(dir.path()).unwrap();
        // A first walk with nothing known hands over every file; the second knows them all as the first saw them.
        let catalogue: Vec<KnownFile> = walk_beside_all(&root, Vec::new())
            .into_iter()
            .map(|w| match w {
                Walked::File(file) => {
                    let (entry, _) = *file;
                    let mut k = known(std::str::from_utf8(&entry.rel).unwrap(), false);
                    (k.facts.size, k.facts.mtime) = (entry.size, entry.mtime);
                    k
                }
                Walked::Unchanged(_) => panic!("nothing is known yet"),
            })
            .collect();
        assert_eq!(catalogue.len() as u64, n);
        let counts: Vec<u64> = walk_beside_all(&root, catalogue)
            .into_iter()
            .map(|w| match w {
                Walked::Unchanged(count) => count,
                Walked::File(_) => panic!("every file is unchanged"),
            })
            .collect();
        assert_eq!(counts, [UNCHANGED_BATCH, UNCHANGED_BATCH]);
    }

    /// A walk that stopped (cancelled, or a problem that stops the crawl) settles nothing: what it did not list
    /// is not taken for vanished, and no more known files are read for it.
    #[test]
    fn a_stopped_walk_settles_nothing_and_reads_no_more_known_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jpg"), b"x").unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        // A page, and then a loader gone without the end: reading on would be an error.
        let (pages_tx, pages_rx) = mpsc::channel(1);
        pages_tx.try_send(vec![known("z.jpg", false)]).unwrap();
        drop(pages_tx);
        let (files_tx, _files_rx) = mpsc::unbounded_channel();
        let halt = CancellationToken::new();
        halt.cancel();
        let scope = CrawlScope::of(&almanac_domain::CrawlArgs::default()).unwrap();
        let (report, merged) = walk_beside(&root, &scope, None, &halt, &Counters::default(), pages_rx, &files_tx);
        assert!(report.stopped);
        let left = merged.expect("a stopped walk reads no more known files");
        assert!(left.not_unchanged.is_empty() && left.unchanged_extras.is_empty());
    }
}
