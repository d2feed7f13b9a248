//! A crawl of some folders (ADR 0014): what a watcher saw change. Each folder is walked with everything below it,
//! with the walk's own rules, beside only the known files inside it; what vanished is soft-deleted only inside
//! them, weighed by the mass-deletion guard against the config's whole library. A crawl without folders is the
//! whole root, as it always was.
//!
//! A folder that no longer exists while its parent does (the root passed its checks) was deleted or moved away:
//! its known files were not found, and vanish through the guard. One whose parent cannot be opened either, one
//! its parent still lists although opening it found no such entry, or one that cannot be read, leaves the walk
//! incomplete there, and nothing under it is soft-deleted this time.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;

use almanac_domain::{
    ClosedFile, CrawlArgs, DedupKey, NewWorkItem, Scope, StorageConfig, StorageConfigId, WorkKind,
    ports::CatalogueStore,
};
use almanac_executor::HandlerError;
use almanac_media::{OpenError, RootFolder, split_parent};

use super::mounts::Mounts;
use super::rules::passes_over;
use super::settle::{Unseen, Weighed};
use super::walk::{WalkEntry, WalkReport, passed_over_proxy_root};

/// What one crawl covers: the whole root, or some folders with everything below them.
#[derive(Debug)]
pub(super) struct CrawlScope {
    /// The folders, in the walk's order (the byte order of their paths, each with the `/` its files' paths
    /// continue with), none inside another: `[""]` for the whole root.
    folders: Vec<Vec<u8>>,
    /// The files a watcher saw closed after writing: their size and mtime (in nanoseconds) then.
    closed: HashMap<Vec<u8>, (u64, i64)>,
    /// The folders beneath the root recorded as mount points.
    mounts: Mounts,
}

impl CrawlScope {
    /// The scope of a crawl with these arguments. A folder or closed file's path that does not lie beneath the
    /// root fails the item for good (nothing is read or written): the rule is
    /// [`CrawlArgs::checked_folders`]'s, the one the payload is read with.
    pub fn of(args: &CrawlArgs) -> Result<Self, HandlerError> {
        let folders = args.checked_folders().map_err(|e| HandlerError::permanent(format!("{e}; nothing was read")))?;
        let folders =
            if folders.is_empty() { vec![Vec::new()] } else { folders.into_iter().map(String::into_bytes).collect() };
        let closed = args.closed.iter().map(|c| (c.path.as_bytes().to_vec(), (c.size, c.mtime_ns))).collect();
        Ok(Self { folders, closed, mounts: Mounts::default() })
    }

    /// This scope, with the mount points recorded beneath the root.
    pub fn with_mounts(self, mounts: Mounts) -> Self {
        Self { mounts, ..self }
    }

    /// The mount points recorded beneath the root.
    pub fn mounts(&self) -> &Mounts {
        &self.mounts
    }

    /// Whether this is the whole root.
    pub fn is_whole_root(&self) -> bool {
        self.folders.iter().any(Vec::is_empty)
    }

    /// The folders, in the walk's order (`[""]`: the whole root).
    pub fn folders(&self) -> &[Vec<u8>] {
        &self.folders
    }

    /// Where this crawl's Live Photo pairs may form (a pair's halves lie in one folder): in its folders, or in the
    /// whole config (`None`) for a crawl of the whole root, or one that moves an asset to a surviving copy outside
    /// its folders (it may pair there).
    pub fn pairs_under(&self, unseen: &Unseen) -> Option<&[Vec<u8>]> {
        let moved_out = unseen.promotions.iter().any(|(_, copy)| !self.contains(&copy.file_path));
        (!self.is_whole_root() && !moved_out).then_some(&self.folders[..])
    }

    /// Whether the path (relative to the root) lies in one of the folders, everything below them included.
    pub fn contains(&self, path: &[u8]) -> bool {
        self.folders.iter().any(|f| f.is_empty() || (path.starts_with(f) && path.get(f.len()) == Some(&b'/')))
    }

    /// Whether a watcher saw the file the walk listed closed after writing, as listed, and it still has the size
    /// and mtime (to the nanosecond) it had then: it is read at once, whatever its age (blocking). The listing
    /// must agree too (its mtime is in microseconds), since the crawl records the listing's facts: a file listed
    /// while it was being rewritten (empty, say) and closed again since with its old size and mtime (`cp -p`)
    /// waits for the settle time like any file still being written.
    pub fn closed_as_listed(&self, root: &RootFolder, entry: &WalkEntry) -> bool {
        let Some(&(size, mtime_ns)) = self.closed.get(&entry.rel) else { return false };
        if size != entry.size || mtime_ns.div_euclid(1000) != entry.mtime.timestamp_micros() {
            return false;
        }
        let Ok(open) = root.open_file(&entry.rel) else { return false };
        root.answers()
            .call(|| open.file().metadata())
            .is_ok_and(|m| m.size() == size && ClosedFile::stat_nanos(m.mtime(), m.mtime_nsec()) == mtime_ns)
    }

    /// Whether the walk goes into `folder` of this scope (blocking). The whole root always; a folder only when
    /// it opens beneath the root, no link followed, and neither it nor a folder above it is passed over by the
    /// walk's rules (a skipped name, the proxy root mounted inside the library): the whole crawl would not see
    /// what is in it either. A folder that is gone while its parent is there is not walked, so its known files
    /// are not found; one that cannot be opened for another reason is reported unreadable.
    pub fn enter(
        root: &RootFolder,
        folder: &[u8],
        avoid: Option<(u64, u64)>,
        mounts: &Mounts,
        report: &mut WalkReport,
    ) -> bool {
        if folder.is_empty() {
            return true;
        }
        if passes_over(folder) {
            return false;
        }
        // The folder, or one above it, a disk that was mounted there and is not now: not walked, kept.
        if let Some(why) = not_mounted_on_the_way(root, folder, mounts) {
            report.unreadable_folder(root, folder, why);
            return false;
        }
        match root.open_folder(folder) {
            Ok(_) => {}
            Err(e @ (OpenError::Vanished(_) | OpenError::Escapes(_))) => {
                if let Some(why) = not_there(root, folder, matches!(e, OpenError::Vanished(_))) {
                    report.unreadable_folder(root, folder, why);
                }
                // Gone, or a file or a link now (never followed): what the catalogue knew inside it is not found.
                return false;
            }
            Err(e) => {
                report.unreadable_folder(root, folder, e.to_string());
                return false;
            }
        }
        let Some(avoid) = avoid else { return true };
        // The folder and every folder above it: the proxy root may be mounted at any of them.
        let ends = folder.iter().enumerate().filter(|(_, b)| **b == b'/').map(|(i, _)| i).chain([folder.len()]);
        for end in ends {
            let above = &folder[..end];
            if root.open_folder(above).ok().and_then(|f| root.identity_of(&f)) == Some(avoid) {
                passed_over_proxy_root(root, above, report);
                return false;
            }
        }
        true
    }

    /// What vanished is weighed against ([`Weighed`]): for the whole root, the known files the walk passed
    /// (`listed`), of which those under folders it did not walk were not looked for; for some folders, the
    /// config's whole library (read only when an asset vanished). A crawl of some folders that would soft-delete
    /// every active asset of the config is refused unless confirmed, as the whole root's empty walk is: a share not
    /// mounted must never look like a deleted library.
    pub async fn active_for_guard<C: CatalogueStore>(
        &self,
        catalogue: &C,
        storage: &StorageConfig,
        args: &CrawlArgs,
        listed: usize,
        unseen: &Unseen,
    ) -> Result<Weighed, HandlerError> {
        if self.is_whole_root() {
            return Ok(Weighed { library: listed, looked_for: listed.saturating_sub(unseen.kept) });
        }
        let gone = unseen.assets.len() + unseen.held.len();
        if gone == 0 {
            return Ok(Weighed { library: 0, looked_for: 0 });
        }
        let library = catalogue.active_assets(storage.id).await.map_err(super::catalogue_error)?;
        if gone as u64 >= library && !args.allow_mass_deletion {
            return Err(HandlerError::retryable(format!(
                "refusing to soft-delete all {library} active assets under {}: every one of them was in the \
                 folders this crawl looked at and none was found, which usually means a share is not mounted. \
                 Nothing was deleted. If the files really are gone, {}",
                storage.root_path.display(),
                super::rules::how_to_confirm(storage.id)
            )));
        }
        let library = usize::try_from(library).unwrap_or(usize::MAX);
        Ok(Weighed { library, looked_for: library })
    }

    /// The crawl asked for again once the files still being written may have settled: a crawl of the folders
    /// those files are in (of this crawl's own when they are more than [`CrawlArgs::MAX_FOLDERS`] or not all
    /// named in UTF-8; the whole root when one is the root), under a key of its folders, or for the whole root
    /// `crawl:<config>:settling`. Never the key the scheduler, the page and the watchers use for the whole root
    /// (`crawl:<config>`): one of theirs would join it and wait for it ([`super::settling::StillWritten`] may
    /// make it wait minutes), or shrink to these folders. A crawl of the whole root that found a file being
    /// written asks again for that file's folder, not for the whole library.
    pub fn again(&self, config: StorageConfigId, settling: &SettlingFolders) -> Result<NewWorkItem, HandlerError> {
        let scope = Scope::Config(config);
        let permanent = |e: almanac_domain::DomainError| HandlerError::permanent(e.to_string());
        let named: Option<Vec<String>> = match &settling.folders {
            Some(folders) => folders.iter().map(|f| String::from_utf8(f.clone()).ok()).collect(),
            _ => None,
        };
        let own = || self.folders.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
        let folders =
            CrawlArgs::of_folders(named.unwrap_or_else(own), Vec::new()).checked_folders().map_err(permanent)?;
        let whole = DedupKey::for_work(WorkKind::Crawl, scope);
        let key = match folders.is_empty() {
            true => DedupKey::new(format!("{whole}:settling")).map_err(permanent)?,
            false => {
                let hash = almanac_media::hash_bytes(folders.join("\0").as_bytes()).hash;
                DedupKey::new(format!("{whole}:folders:{}", &hash.as_hex()[..16])).map_err(permanent)?
            }
        };
        let item = NewWorkItem::from_args(&CrawlArgs::of_folders(folders, Vec::new()), scope).map_err(permanent)?;
        Ok(item.with_dedup_key(key))
    }
}

/// Why the folder at `folder` (a folder crawl's, or a copy's) is not to be walked or looked in, when it, or a
/// folder above it, was recorded as a mount point and is on the device of the folder above it now, or is not
/// there while the folder above it is (blocking). Any other folder that cannot be opened is left to the caller.
pub(super) fn not_mounted_on_the_way(root: &RootFolder, folder: &[u8], mounts: &Mounts) -> Option<String> {
    let ends = folder.iter().enumerate().filter(|(_, b)| **b == b'/').map(|(i, _)| i).chain([folder.len()]);
    for end in ends.filter(|end| mounts.was_mounted(&folder[..*end])) {
        let here = &folder[..end];
        let above = split_parent(here).0;
        let device = |rel: &[u8]| root.open_folder(rel).ok().and_then(|f| root.identity_of(&f)).map(|i| i.0);
        let why = match (device(here), device(above)) {
            (Some(own), Some(parent)) if own == parent => mounts.not_mounted(here),
            (None, Some(_)) => mounts.gone(here),
            _ => None,
        };
        if let Some(why) = why {
            let shown = String::from_utf8_lossy(here);
            return Some(if here == folder { why } else { format!("the folder {shown} above it: {why}") });
        }
    }
    None
}

/// Why a folder of the scope that is not there to open (`vanished`: no such entry; otherwise a file or a link
/// now) leaves the walk incomplete, or `None` when it is gone and its known files were not found (blocking).
/// Incomplete when the folder it was in cannot be opened either, or when that folder still lists its name
/// although opening it found no such entry (a mount that failed, or a race): the whole root's walk, listing
/// that folder, would find it unreadable too, never gone.
fn not_there(root: &RootFolder, folder: &[u8], vanished: bool) -> Option<String> {
    let (parent, name) = split_parent(folder);
    let Ok(above) = root.open_folder(parent) else {
        return Some(
            "neither it nor the folder it was in can be opened now (deleted, or a link on the way); the next crawl \
             looks again"
                .into(),
        );
    };
    (vanished && still_listed(root, &above, name)).then(|| {
        "its folder still lists it, but it cannot be opened (a mount that failed, or it changed as the crawl \
         looked); nothing under it is soft-deleted this time and the next crawl looks again"
            .into()
    })
}

/// Whether the open `folder` lists `name` (blocking); a listing that fails counts as listing it, so that what
/// cannot be told is never taken for gone.
fn still_listed(root: &RootFolder, folder: &std::os::fd::OwnedFd, name: &[u8]) -> bool {
    let Ok(mut dir) = root.answers().call(|| rustix::fs::Dir::read_from(folder)) else { return true };
    while let Some(entry) = root.answers().call(|| dir.next()) {
        match entry {
            Ok(entry) if entry.file_name().to_bytes() == name => return true,
            Ok(_) => {}
            Err(_) => return true,
        }
    }
    false
}

/// The files still being written, and their folders for the crawl asked for again: `folders` is `None` once more
/// than [`CrawlArgs::MAX_FOLDERS`], `files` once more than [`SettlingFolders::MAX_FILES`].
#[derive(Debug)]
pub(super) struct SettlingFolders {
    folders: Option<BTreeSet<Vec<u8>>>,
    pub files: Option<Vec<Vec<u8>>>,
}

impl Default for SettlingFolders {
    fn default() -> Self {
        Self { folders: Some(BTreeSet::new()), files: Some(Vec::new()) }
    }
}

impl SettlingFolders {
    /// The most files still being written that one crawl names.
    pub const MAX_FILES: usize = 1024;

    /// Notes the file at `rel`, and its folder.
    pub fn add(&mut self, rel: &[u8]) {
        if let Some(files) = &mut self.files {
            files.push(rel.to_vec());
        }
        self.files = self.files.take().filter(|files| files.len() <= Self::MAX_FILES);
        let Some(folders) = &mut self.folders else { return };
        let folder = split_parent(rel).0;
        if !folders.contains(folder) {
            folders.insert(folder.to_vec());
        }
        self.folders = self.folders.take().filter(|folders| folders.len() <= CrawlArgs::MAX_FOLDERS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(folders: &[&str]) -> CrawlScope {
        CrawlScope::of(&CrawlArgs::of_folders(folders.iter().map(|f| f.to_string()).collect(), vec![])).unwrap()
    }

    fn settling(paths: &[&[u8]]) -> SettlingFolders {
        let mut folders = SettlingFolders::default();
        for path in paths {
            folders.add(path);
        }
        folders
    }

    #[test]
    fn a_crawl_is_asked_for_again_in_the_settling_files_folders_or_its_own_or_the_whole_root() {
        let config = StorageConfigId::new();
        let whole_key = DedupKey::for_work(WorkKind::Crawl, Scope::Config(config));
        // The whole root's crawl asks for the folder of its file being written, or for the whole root when that
        // folder is the root; never under the key the scheduler and the watchers use.
        let again = scope(&[]).again(config, &settling(&[b"a/1.jpg"])).unwrap();
        assert_eq!(again.payload()["folders"], serde_json::json!(["a"]));
        let again = scope(&[]).again(config, &settling(&[b"a/1.jpg", b"2.jpg"])).unwrap();
        let settling_key = DedupKey::new(format!("{whole_key}:settling")).unwrap();
        assert_eq!((again.payload().get("folders"), again.dedup_key.as_ref()), (None, Some(&settling_key)));
        assert!(scope(&[""]).is_whole_root() && scope(&["x", ""]).folders() == [Vec::<u8>::new()]);

        let some = scope(&["a", "c"]);
        let again = some.again(config, &settling(&[b"a/b/1.jpg", b"a/b/2.jpg", b"c/3.jpg"])).unwrap();
        assert_eq!(again.payload()["folders"], serde_json::json!(["a/b", "c"]));
        let key = again.dedup_key.clone().unwrap();
        assert!(key.starts_with(&format!("{whole_key}:folders:")) && key.len() == whole_key.len() + 25, "{key}");
        let same = some.again(config, &settling(&[b"c/4.jpg", b"a/b/5.jpg"])).unwrap();
        assert_eq!(same.dedup_key, Some(key.clone()), "the same folders, the same key");
        let other = some.again(config, &settling(&[b"c/4.jpg"])).unwrap();
        assert_ne!(other.dedup_key, Some(key));

        // A folder not named in UTF-8, or too many folders: this crawl's own.
        let own = serde_json::json!(["a", "c"]);
        let again = some.again(config, &settling(&[b"a/\xff/1.jpg"])).unwrap();
        assert_eq!(again.payload()["folders"], own);
        let files = |n: usize| -> Vec<Vec<u8>> { (0..n).map(|i| format!("a/{i:03}/x.jpg").into_bytes()).collect() };
        let at_most = files(CrawlArgs::MAX_FOLDERS);
        let at_most: Vec<&[u8]> = at_most.iter().map(Vec::as_slice).collect();
        let named = some.again(config, &settling(&at_most)).unwrap();
        assert_eq!(
            named.payload()["folders"].as_array().map(Vec::len),
            Some(CrawlArgs::MAX_FOLDERS),
            "as many as allowed"
        );
        let many = files(CrawlArgs::MAX_FOLDERS + 1);
        let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        assert_eq!(some.again(config, &settling(&many)).unwrap().payload()["folders"], own);
    }

    #[test]
    fn a_closed_file_counts_only_with_the_size_and_mtime_it_has_now() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jpg"), b"12345").unwrap();
        let meta = std::fs::metadata(dir.path().join("a.jpg")).unwrap();
        let mtime_ns = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
        let root = RootFolder::open(dir.path()).unwrap();
        let listed = WalkEntry {
            rel: b"a.jpg".to_vec(),
            size: 5,
            mtime: chrono::DateTime::from_timestamp_micros(mtime_ns.div_euclid(1000)).unwrap(),
            inode: (1, chrono::DateTime::UNIX_EPOCH),
            sidecar: None,
            closed: false,
        };
        let with = |path: &str, size: u64, mtime_ns: i64| {
            let closed = vec![almanac_domain::ClosedFile { path: path.into(), size, mtime_ns }];
            CrawlScope::of(&CrawlArgs::of_folders(vec![], closed)).unwrap()
        };
        assert!(with("a.jpg", 5, mtime_ns).closed_as_listed(&root, &listed));
        assert!(!with("a.jpg", 6, mtime_ns).closed_as_listed(&root, &listed), "another size");
        assert!(!with("a.jpg", 5, mtime_ns - 1).closed_as_listed(&root, &listed), "another mtime, by 1 ns");
        assert!(!with("b.jpg", 5, mtime_ns).closed_as_listed(&root, &listed), "another file");
        // Listed while it was rewritten, closed again since as the watcher saw it: the listing is what the crawl
        // records, so the file is not taken as closed.
        let emptied = WalkEntry { size: 0, ..listed.clone() };
        assert!(!with("a.jpg", 5, mtime_ns).closed_as_listed(&root, &emptied), "listed empty");
        let touched = WalkEntry { mtime: listed.mtime + chrono::Duration::microseconds(1), ..listed.clone() };
        assert!(!with("a.jpg", 5, mtime_ns).closed_as_listed(&root, &touched), "listed with another mtime");
    }

    #[test]
    fn the_walk_enters_a_folder_only_as_the_whole_walk_would_reach_it() {
        let dir = tempfile::tempdir().unwrap();
        for folder in ["2019/trip", "proxies/ab", "proxies-old/2019", "@eaDir/x", "outside"] {
            std::fs::create_dir_all(dir.path().join(folder)).unwrap();
        }
        std::os::unix::fs::symlink(dir.path().join("outside"), dir.path().join("2019/link")).unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        let avoid = almanac_media::identity(&dir.path().join("proxies"));
        let mut report = WalkReport::default();
        let mut enter =
            |folder: &str| CrawlScope::enter(&root, folder.as_bytes(), avoid, &Mounts::default(), &mut report);
        assert!(enter("") && enter("2019") && enter("2019/trip"));
        assert!(!enter("proxies/ab"), "inside the proxy root mounted in the library");
        assert!(enter("proxies-old/2019"), "beside the proxy root, under a name that begins with its name");
        assert!(!enter("@eaDir/x"), "a skipped name on the way");
        assert!(!enter("2019/gone"), "gone while its parent is there: not walked, nothing unreadable");
        assert!(!enter("2019/link"), "a link now: never followed");
        assert!(!enter("gone/deeper"), "its parent gone too");
        assert_eq!(report.proxy_root_inside.len(), 1, "{report:?}");
        assert_eq!(report.unreadable.len(), 1, "{report:?}");
        assert!(report.unreadable[0].path.ends_with("gone/deeper") && report.unreadable[0].rel == b"gone/deeper");
    }

    #[test]
    fn a_folder_its_parent_still_lists_is_unreadable_never_gone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("2019/trip")).unwrap();
        std::fs::write(dir.path().join("2019/file"), b"x").unwrap();
        let root = RootFolder::open(dir.path()).unwrap();
        // Opening `2019/trip` found no such entry (a mount that failed, a race), yet `2019` still lists it.
        let why = not_there(&root, b"2019/trip", true).expect("unreadable");
        assert!(why.contains("still lists it"), "{why}");
        assert_eq!(not_there(&root, b"2019/gone", true), None, "not listed: gone");
        assert_eq!(not_there(&root, b"2019/file", false), None, "a file now, not a folder: gone");
        assert!(not_there(&root, b"gone/deeper", true).is_some(), "its parent gone too: unreadable");
        let top = not_there(&root, b"2019", true).expect("the root lists it");
        assert!(top.contains("still lists it"), "{top}");
    }
}
