//! Polling (ADR 0014, decision 3): where the file system raises no event for what other machines write, the
//! folders' mtimes and ctimes say where to look. Only folders are stat'ed, never every file; a folder whose
//! stamp changed is listed again, which finds the folders made in it, and it is a change only when what the
//! crawl would look at in it changed (an app's database journal made and removed beside the photos at every
//! write is not one). The proxy root, when it is mounted inside
//! the library, is passed over with everything beneath it, as the crawl passes it over (`avoid`, its identity).
//! Blocking: run it on a blocking thread, at the Worker's low priority.

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use almanac_domain::ClosedFile;

use super::tree::{Listing, list};
use crate::crawl::reads_file_named;

/// A folder's mtime and ctime, in nanoseconds (a file made, removed or renamed in it changes them).
type Stamp = (i64, i64);

/// The folders of a root as the last pass found them.
#[derive(Debug, Default)]
pub struct FolderTree {
    folders: HashMap<PathBuf, Known>,
}

/// How close to the clock a folder's ctime is when it was listed for it to be listed again at the next pass even if
/// its stamp stays the same (nanoseconds): file systems that keep times to the second or two (ext3, FAT, and the NFS or SMB
/// servers that store on them) give a second change made within that time the stamp of the first. As git treats an
/// index entry "racily clean".
const RACY: i64 = 2_000_000_000;

/// A folder as the last pass found it.
#[derive(Debug, Clone, Copy)]
struct Known {
    /// Its stamp when it was last listed whole.
    stamp: Stamp,
    /// The digest of what the crawl would look at in it then (`Listing::read`).
    read: u64,
    /// Whether its last listing failed: it is listed again at each pass until it can be (its stamp kept until then,
    /// so nothing made in it meanwhile is missed). The crawl is asked to judge it when it fails, not at each change
    /// while it stays unlistable: the listing that works again finds what changed meanwhile.
    unlisted: bool,
    /// Whether a change since it was listed may have left its stamp as it was ([`racy`]): it is listed again at the
    /// next pass.
    racy: bool,
}

/// Whether a change made in a folder since it was listed at `stamp` may have left the stamp as it is: its ctime
/// (its file system's clock: an mtime may be set to anything) is so close to the clock, or after it (another
/// machine's), or, when the listing was for a new stamp, holds no fraction of a second (a file system that keeps
/// whole seconds, whatever its server's clock says).
fn racy((_, ctime): Stamp, restamped: bool) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let now = i64::try_from(now.as_nanos()).unwrap_or(i64::MAX);
    (restamped && ctime.rem_euclid(1_000_000_000) == 0) || ctime > now.saturating_sub(RACY)
}

impl FolderTree {
    /// The first pass, the baseline: every folder under `root` (the crawl's skipped names and the folder whose
    /// identity is `avoid` passed over, links never followed) with its stamp. It reports nothing.
    pub fn baseline(root: &Path, avoid: Option<(u64, u64)>, stop: &CancellationToken) -> Self {
        let mut tree = Self::default();
        tree.add_subtree(root, PathBuf::new(), avoid, stop);
        tree
    }

    /// How many folders are known.
    pub fn len(&self) -> usize {
        self.folders.len()
    }

    /// Whether no folder is known (not even the root: it could not be read).
    pub fn is_empty(&self) -> bool {
        self.folders.is_empty()
    }

    /// A pass: stats the folders known, lists again those whose stamp changed (finding new folders), those that
    /// could not be listed whole last time and those whose stamp was [`RACY`], forgets those gone. Answers the folders that came or went, those in
    /// which what the crawl would look at changed, and those that changed and cannot be listed (relative to the
    /// root, as the crawl names them). A root that cannot be read changes nothing (an unmounted share is no change:
    /// the crawl judges it).
    pub fn pass(&mut self, root: &Path, avoid: Option<(u64, u64)>, stop: &CancellationToken) -> Vec<String> {
        if self.is_empty() {
            // The root could not be read at the baseline: this pass is the baseline.
            *self = Self::baseline(root, avoid, stop);
            return Vec::new();
        }
        if std::fs::symlink_metadata(root).is_err() {
            return Vec::new();
        }
        let mut changed = Vec::new();
        // In path order: a folder gone is met before what was beneath it, which goes with it.
        let mut known: Vec<PathBuf> = self.folders.keys().cloned().collect();
        known.sort();
        for rel in known {
            if stop.is_cancelled() {
                break;
            }
            let Some(known) = self.folders.get(&rel).copied() else { continue };
            match stamp(&root.join(&rel)) {
                Ok(Some((now, _))) if now == known.stamp && !known.unlisted && !known.racy => {}
                Ok(Some((now, _))) => {
                    let listing = list(&root.join(&rel));
                    self.add_new_subfolders(root, &rel, &listing, avoid, stop);
                    if listing.complete {
                        // Listed again for a stamp that stayed: only what the listing says can have changed.
                        let restamped = now != known.stamp;
                        let racy = racy(now, restamped);
                        self.folders
                            .insert(rel.clone(), Known { stamp: now, read: listing.read, unlisted: false, racy });
                        let since = known.stamp.0.max(known.stamp.1);
                        if listing.read != known.read || (restamped && read_file_changed_since(&listing, since)) {
                            changed.push(crawl_folder(&rel));
                        }
                    } else {
                        self.folders.insert(rel.clone(), Known { unlisted: true, ..known });
                        if !known.unlisted {
                            changed.push(crawl_folder(&rel));
                        }
                    }
                }
                // Gone (or no longer a folder): it and everything beneath it.
                Ok(None) => {
                    self.folders.retain(|p, _| !p.starts_with(&rel));
                    changed.push(crawl_folder(&rel));
                }
                // Unreadable for now (a share's hiccup): looked at again next pass.
                Err(_) => {}
            }
        }
        changed
    }

    /// Of a changed folder's listing, the folders not known yet are added with their subtrees.
    fn add_new_subfolders(
        &mut self,
        root: &Path,
        rel: &Path,
        listing: &Listing,
        avoid: Option<(u64, u64)>,
        stop: &CancellationToken,
    ) {
        for sub in subfolders(listing) {
            let sub = rel.join(sub);
            if !self.folders.contains_key(&sub) {
                self.add_subtree(root, sub, avoid, stop);
            }
        }
    }

    /// Adds `rel` and every folder beneath it but the one whose identity is `avoid`, one folder listed at a time.
    fn add_subtree(&mut self, root: &Path, rel: PathBuf, avoid: Option<(u64, u64)>, stop: &CancellationToken) {
        let mut todo = vec![rel];
        while let Some(rel) = todo.pop() {
            if stop.is_cancelled() {
                return;
            }
            let path = root.join(&rel);
            let Ok(Some((stamp, identity))) = stamp(&path) else { continue };
            if Some(identity) == avoid {
                continue;
            }
            let listing = list(&path);
            todo.extend(subfolders(&listing).into_iter().map(|name| rel.join(name)));
            let known = Known { stamp, read: listing.read, unlisted: !listing.complete, racy: racy(stamp, false) };
            self.folders.insert(rel, known);
        }
    }
}

/// A folder's stamp, and its identity (device, inode); `None` when nothing or something else than a folder is
/// there (a link is never followed).
fn stamp(path: &Path) -> std::io::Result<Option<(Stamp, (u64, u64))>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(Some((
            (ClosedFile::stat_nanos(m.mtime(), m.mtime_nsec()), ClosedFile::stat_nanos(m.ctime(), m.ctime_nsec())),
            (m.dev(), m.ino()),
        ))),
        Ok(_) => Ok(None),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The names of the folders in a folder's listing (by the entry's type, links not followed), the crawl's skipped
/// names passed over. An unreadable folder has none.
fn subfolders(listing: &Listing) -> Vec<std::ffi::OsString> {
    let mut seen = HashSet::new();
    let folders = listing.folders.iter().filter_map(|p| p.file_name().map(ToOwned::to_owned));
    folders.filter(|name| seen.insert(name.clone())).collect()
}

/// Whether a file the crawl reads in a listed folder changed (written, or renamed there: its ctime) since `since`,
/// the folder's last change as its file system dated it (nanoseconds), less two seconds for file systems that
/// keep coarse times (FAT). The digest misses a photo rewritten in place beside a temporary file (`exiftool
/// -overwrite_original_in_place`), or renamed over one of the same name where the file system gives every entry
/// the same inode number (FUSE: sshfs); the folder's stamp changed, and so did that file's. Only the read files
/// of a folder whose stamp changed are stat'ed.
fn read_file_changed_since(listing: &Listing, since: i64) -> bool {
    let since = since.saturating_sub(2_000_000_000);
    let read = listing.files.iter().filter(|f| f.file_name().is_some_and(|n| reads_file_named(n.as_bytes())));
    read.filter_map(|f| std::fs::symlink_metadata(f).ok()).any(|m| {
        let written = ClosedFile::stat_nanos(m.mtime(), m.mtime_nsec());
        written.max(ClosedFile::stat_nanos(m.ctime(), m.ctime_nsec())) >= since
    })
}

/// A folder as the crawl names it (a folder that holds it when a name is not UTF-8).
fn crawl_folder(rel: &Path) -> String {
    super::events::crawl_path(rel).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    /// Only a folder has a stamp; nothing there, or a file on the way, is no folder; any other error is one.
    #[test]
    fn a_folder_is_stamped_and_a_file_a_link_or_nothing_is_no_folder() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("folder")).unwrap();
        std::fs::write(d.join("file"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("folder"), d.join("link")).unwrap();
        std::os::unix::fs::symlink(d.join("loop"), d.join("loop")).unwrap();
        assert!(stamp(&d.join("folder")).unwrap().is_some());
        for none in ["file", "link", "missing", "file/below"] {
            assert!(stamp(&d.join(none)).unwrap().is_none(), "{none}");
        }
        assert!(stamp(&d.join("loop/below")).is_err(), "a path through a link to itself cannot be resolved");
    }

    #[test]
    fn a_folders_subfolders_are_its_folders_by_name_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for folder in ["b", "a", "@eaDir", "a/inner"] {
            std::fs::create_dir(d.join(folder)).unwrap();
        }
        std::fs::write(d.join("photo.jpg"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("link")).unwrap();
        let mut names = subfolders(&list(d));
        names.sort();
        assert_eq!(names, ["a", "b"]);
        assert!(subfolders(&list(&d.join("missing"))).is_empty());
    }

    #[test]
    fn a_pass_finds_the_folders_changed_made_and_removed_after_the_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["a/b", "c", "@eaDir/x"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let stop = CancellationToken::new();
        let mut tree = FolderTree::baseline(root, None, &stop);
        assert_eq!(tree.len(), 4, "the root, a, a/b and c; not the NAS's folder");
        assert!(tree.pass(root, None, &stop).is_empty(), "nothing changed");
        std::fs::write(root.join("a/b/new.jpg"), b"x").unwrap();
        std::fs::create_dir_all(root.join("c/d/e")).unwrap();
        std::fs::write(root.join("@eaDir/x/thumb.jpg"), b"x").unwrap();
        assert_eq!(sorted(tree.pass(root, None, &stop)), ["a/b", "c"]);
        assert_eq!(tree.len(), 6, "c/d and c/d/e found");
        std::fs::remove_dir_all(root.join("c")).unwrap();
        assert_eq!(sorted(tree.pass(root, None, &stop)), ["", "c"], "what was beneath a folder gone goes with it");
        assert_eq!(tree.len(), 3);
    }

    /// A folder whose stamp changed for a file the crawl does not read (a journal made and removed, a text saved
    /// under a new name) is no change; one in which a photo or a sidecar came, went, or was replaced by a rename
    /// is, and so is a subfolder made or removed.
    #[test]
    fn a_pass_passes_over_folders_changed_only_in_files_the_crawl_does_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/IMG_1.jpg"), b"x").unwrap();
        std::fs::write(root.join("digikam4.db"), b"x").unwrap();
        // Every read file changed two seconds or more before its folder's last change (see the in-place step).
        std::thread::sleep(std::time::Duration::from_millis(2100));
        std::fs::write(root.join("a/.lock"), b"l").unwrap();
        std::fs::remove_file(root.join("a/.lock")).unwrap();
        let stop = CancellationToken::new();
        let mut tree = FolderTree::baseline(root, None, &stop);
        // Each step changes the folders' stamps; the ones after the first three change what the crawl reads.
        let steps: [Step; 10] = [
            ("a journal made", |r| std::fs::write(r.join("digikam4.db-journal"), b"j").unwrap(), &[]),
            ("a journal removed", |r| std::fs::remove_file(r.join("digikam4.db-journal")).unwrap(), &[]),
            ("a text renamed", |r| rename(r, "digikam4.db", "a/notes.txt"), &[]),
            ("a photo made", |r| std::fs::write(r.join("a/IMG_2.jpg"), b"y").unwrap(), &["a"]),
            (
                "a photo replaced by a rename",
                |r| {
                    std::fs::write(r.join("a/.IMG_1.jpg.tmp"), b"z").unwrap();
                    rename(r, "a/.IMG_1.jpg.tmp", "a/IMG_1.jpg");
                },
                &["a"],
            ),
            ("a sidecar made", |r| std::fs::write(r.join("a/IMG_1.xmp"), b"<x/>").unwrap(), &["a"]),
            (
                "a photo rewritten in place beside a temporary file",
                |r| {
                    std::fs::write(r.join("a/IMG_1.jpg_exiftool_tmp"), b"w").unwrap();
                    std::fs::write(r.join("a/IMG_1.jpg"), b"w").unwrap();
                    std::fs::remove_file(r.join("a/IMG_1.jpg_exiftool_tmp")).unwrap();
                },
                &["a"],
            ),
            ("a text renamed to a photo's name", |r| rename(r, "a/notes.txt", "a/IMG_3.JPG"), &["a"]),
            ("a subfolder made", |r| std::fs::create_dir(r.join("a.db")).unwrap(), &[""]),
            ("a photo removed", |r| std::fs::remove_file(r.join("a/IMG_2.jpg")).unwrap(), &["a"]),
        ];
        for (what, step, changed) in steps {
            // A stamp is the folders' time to the nanosecond, whatever the file system keeps: some keep less.
            std::thread::sleep(std::time::Duration::from_millis(20));
            step(root);
            assert_eq!(sorted(tree.pass(root, None, &stop)), changed, "{what}");
        }
    }

    /// What a step is, what it does to the library, and the folders a pass then finds changed.
    type Step = (&'static str, fn(&Path), &'static [&'static str]);

    fn rename(root: &Path, from: &str, to: &str) {
        std::fs::rename(root.join(from), root.join(to)).unwrap();
    }

    #[test]
    fn a_root_that_cannot_be_read_changes_nothing_and_its_return_is_the_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("share");
        let stop = CancellationToken::new();
        let mut tree = FolderTree::baseline(&root, None, &stop);
        assert!(tree.is_empty());
        std::fs::create_dir_all(root.join("a")).unwrap();
        assert!(tree.pass(&root, None, &stop).is_empty());
        assert_eq!(tree.len(), 2);
        std::fs::rename(&root, dir.path().join("away")).unwrap();
        assert!(tree.pass(&root, None, &stop).is_empty(), "a missing root is not a deleted library");
        assert_eq!(tree.len(), 2);
    }

    /// A folder that changed when it could not be listed (a directory block that took a bad write here; a
    /// network share's hiccup elsewhere) is the crawl's to judge, once; it is listed again at each pass until it
    /// can be, and what was made in it meanwhile is polled from then on. Before, its new stamp was kept with the
    /// empty listing, and a folder made in it then was never polled. Skipped, saying so, where an ext4 image
    /// cannot be mounted.
    #[test]
    fn a_folder_that_cannot_be_listed_is_listed_again_until_it_can_and_what_was_made_in_it_is_then_polled() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("disk");
        let Some(mut volume) = almanac_media::scratch_volume::ScratchVolume::ext4(&root) else { return };
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/IMG_1.jpg"), b"x").unwrap();
        let stop = CancellationToken::new();
        let mut tree = FolderTree::baseline(&root, None, &stop);
        assert_eq!(tree.len(), 2);
        std::fs::create_dir(root.join("a/new")).unwrap();
        std::fs::write(root.join("a/new/IMG_2.jpg"), b"y").unwrap();
        let damaged = volume.damage_folder("a");
        assert!(std::fs::read_dir(root.join("a")).unwrap().any(|e| e.is_err()), "the folder cannot be listed");
        assert_eq!(tree.pass(&root, None, &stop), ["a"], "changed, and the crawl's to judge");
        assert!(tree.pass(&root, None, &stop).is_empty(), "said once");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::open(root.join("a")).unwrap().set_modified(later).unwrap();
        assert!(tree.pass(&root, None, &stop).is_empty(), "not again at each change while it cannot be listed");
        volume.mend_folder(damaged);
        assert_eq!(tree.pass(&root, None, &stop), ["a"], "listed at last: a folder came");
        assert_eq!(tree.len(), 3, "the folder made while it could not be listed is polled");
        std::fs::write(root.join("a/new/IMG_3.jpg"), b"z").unwrap();
        assert_eq!(tree.pass(&root, None, &stop), ["a/new"]);
        assert!(tree.pass(&root, None, &stop).is_empty());
    }

    /// Where times are kept to the second (ext3, FAT, the NFS or SMB servers that store on them), a photo made in a
    /// folder within the second it was listed in leaves the folder's stamp as it was: the folder is listed again at
    /// the next pass and found changed. Before, that photo waited for the folder's next change. Skipped, saying so,
    /// where an ext4 image cannot be mounted.
    #[test]
    fn a_photo_made_within_the_second_its_folder_was_listed_in_is_found_where_times_are_kept_to_the_second() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("disk");
        let Some(_volume) = almanac_media::scratch_volume::ScratchVolume::ext4_to_the_second(&root) else { return };
        std::fs::create_dir(root.join("a")).unwrap();
        let stop = CancellationToken::new();
        let mut tree = FolderTree::baseline(&root, None, &stop);
        let folder_stamp = || stamp(&root.join("a")).unwrap().unwrap().0;
        for attempt in 0.. {
            // Just after the second turns, so that what follows falls within it.
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            std::thread::sleep(std::time::Duration::from_nanos(
                u64::from(1_000_000_000 - now.subsec_nanos()) + 50_000_000,
            ));
            std::fs::write(root.join(format!("a/IMG_{attempt}_1.jpg")), b"x").unwrap();
            let listed = tree.pass(&root, None, &stop);
            let (listed_at, second) = (folder_stamp(), root.join(format!("a/IMG_{attempt}_2.jpg")));
            std::fs::write(second, b"y").unwrap();
            if folder_stamp() != listed_at {
                assert!(attempt < 5, "the second photo never fell within the second of the first");
                continue;
            }
            assert_eq!(listed, ["a"], "the first photo");
            assert_eq!(tree.pass(&root, None, &stop), ["a"], "the second photo, the folder's stamp as it was");
            assert!(tree.pass(&root, None, &stop).is_empty(), "listed again, nothing more changed");
            break;
        }
    }

    #[test]
    fn a_pass_never_looks_beneath_the_proxy_root_mounted_inside_the_library() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["a", "proxies/c1"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let avoid = almanac_media::identity(&root.join("proxies"));
        let stop = CancellationToken::new();
        let mut tree = FolderTree::baseline(root, avoid, &stop);
        assert_eq!(tree.len(), 2, "the root and a");
        std::fs::create_dir_all(root.join("proxies/c1/ab/hash")).unwrap();
        std::fs::write(root.join("proxies/c1/ab/hash/thumbnail.jpg"), b"t").unwrap();
        assert!(tree.pass(root, avoid, &stop).is_empty(), "proxies written are no change");
        std::fs::write(root.join("a/new.jpg"), b"x").unwrap();
        assert_eq!(tree.pass(root, avoid, &stop), ["a"]);
        assert_eq!(tree.len(), 2);
        assert_eq!(FolderTree::baseline(root, None, &stop).len(), 6, "without it, its folders are polled");
    }
}
