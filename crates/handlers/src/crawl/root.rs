//! The root's checks, before a crawl reads or changes anything: where it is, how it is reached, and whether
//! the share behind it looks mounted. An unmounted share must never look like a deleted library, and a root
//! swapped for a link must never lead elsewhere.

use std::path::Path;
use std::time::Duration;

use almanac_domain::{CrawlArgs, StorageConfig, ports::CatalogueStore};
use almanac_executor::HandlerError;
use almanac_media::RootFolder;
use tokio_util::sync::CancellationToken;

use super::catalogue_error;
use super::problems::FileProblem;
use super::walk::FolderNotWalked;

mod answered;
pub(super) use answered::{Holds, answered_in_time, stopped_answering};

/// `work` on a blocking thread, or `None` if `stop` fires first: a call into a share whose server stopped answering
/// returns only once it answers again, and it would hold a thread of the runtime, then the attempt, then the
/// Worker's exit. The thread of work given up on is left waiting; an answer that came is taken, even at a stop.
async fn unless_stopped<T: Send + 'static>(
    stop: &CancellationToken,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<Result<T, tokio::task::JoinError>> {
    tokio::select! {
        biased;
        done = tokio::task::spawn_blocking(work) => Some(done),
        () = stop.cancelled() => None,
    }
}

/// `look` (at the library's share, or the proxy volume) on a blocking thread, given up on when the attempt is stopped
/// (a shutdown, a lost lease, a cancel: [`unless_stopped`]). `what` is being done, for messages.
pub(super) async fn looked_at<T: Send + 'static>(
    cancel: &CancellationToken,
    what: &str,
    look: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HandlerError> {
    match unless_stopped(cancel, look).await {
        Some(looked) => looked.map_err(|e| HandlerError::retryable(format!("{what} ended abnormally: {e}"))),
        None => Err(stopped_while(what)),
    }
}

/// A look given up on because the attempt was stopped.
fn stopped_while(what: &str) -> HandlerError {
    HandlerError::retryable(format!(
        "stopped while {what}, which had not answered (a share whose server stopped answering?)"
    ))
}

/// `read` (of the library's files: nothing it does changes anything) on a blocking thread, given up on when the crawl
/// stops (`halt`: the attempt is stopped, or a problem stops the crawl: [`unless_stopped`]). The file is then
/// [`FileProblem::Cancelled`]: nothing is written for it. `what` is being done, for messages.
pub(super) async fn read_by_the_crawl<T: Send + 'static>(
    halt: &CancellationToken,
    what: &str,
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, FileProblem> {
    // Not even begun once the crawl has stopped: a share that stopped answering would keep one more thread.
    if halt.is_cancelled() {
        return Err(FileProblem::Cancelled);
    }
    match unless_stopped(halt, read).await {
        Some(read) => read.map_err(|e| FileProblem::Failed(format!("{what} ended abnormally: {e}"))),
        None => Err(FileProblem::Cancelled),
    }
}

/// Resolves once the library's share behind `root` has stopped answering the crawl's calls ([`stopped_answering`]),
/// looked at once a limit: the error that stops the crawl.
pub(super) async fn until_silent(root: &RootFolder, limit: Duration) -> HandlerError {
    loop {
        tokio::time::sleep(limit.max(Duration::from_millis(100))).await;
        if let Some(e) = stopped_answering(root, limit) {
            return e;
        }
    }
}

/// `work`, a step of the crawl that calls into the share behind `root`, and whether that share stopped answering
/// meanwhile ([`until_silent`]): then the crawl is stopped (`halt`), and `work` ends once it has given its calls up.
pub(super) async fn while_it_answers<T>(
    (root, halt): (&RootFolder, &CancellationToken),
    limit: Duration,
    work: impl Future<Output = T>,
) -> (T, Option<HandlerError>) {
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => (done, None),
        silent = until_silent(root, limit) => {
            halt.cancel();
            (work.await, Some(silent))
        }
    }
}

/// [`looked_at`] beneath `root` after its walk (at copies of vanished assets), given up on too once its share stops
/// answering the crawl's calls for `limit` ([`until_silent`]), as the walk and the reads are.
pub(super) async fn looked_at_while_it_answers<T: Send + 'static>(
    (cancel, limit): (&CancellationToken, Duration),
    root: &RootFolder,
    what: &str,
    look: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HandlerError> {
    tokio::select! {
        biased;
        looked = looked_at(cancel, what, look) => looked,
        silent = until_silent(root, limit) => Err(silent),
    }
}

/// Refuses a root that overlaps the proxy root or another config's root (an older catalogue may hold such
/// roots; new ones are refused when registered): the sweep could delete originals, the crawl could ingest
/// proxies, and two configs on one tree would make the per-config rule protect nothing.
pub(super) async fn check_roots_apart<C: CatalogueStore>(
    catalogue: &C,
    storage: &StorageConfig,
    proxy_root: &Path,
    (cancel, within): (&CancellationToken, Duration),
) -> Result<(), HandlerError> {
    let root = &storage.root_path;
    // An older catalogue may hold a root spelled with `..` or `.`: it may name another tree than it seems.
    if root.to_str().is_none_or(|r| almanac_domain::check_canonical_root(r).is_err()) {
        return Err(HandlerError::permanent(format!(
            "the storage root {} is not a canonical path (it has `.`, `..`, a doubled or trailing slash, or is /), \
             so it may name another folder than the one registered; nothing was read. Deactivate it and register \
             the library's real path with almanac-worker config add",
            root.display()
        )));
    }
    // The proxy root alone first: the comparison looks at it too, and a proxy volume that does not answer must be
    // named as such, not taken for every library's root.
    let proxies = proxy_root.to_owned();
    let (look, at) = (move || almanac_media::identity(&proxies), (proxy_root, Holds::Proxies));
    answered_in_time(cancel, at, within, "looking at the proxy root", look).await?;
    let (both, proxies) = (root.clone(), proxy_root.to_owned());
    let what = format!("comparing the storage root {} with the proxy root", root.display());
    let look = move || almanac_media::trees_overlap(&both, &proxies);
    if answered_in_time(cancel, (root, Holds::Library), within, &what, look).await? {
        return Err(HandlerError::permanent(format!(
            "the storage root {} and the proxy root {} overlap, so the crawl could take proxies for photos and the \
             proxy sweep could delete originals. Nothing was done. Set storage.proxy_root to a folder outside \
             every library",
            root.display(),
            proxy_root.display()
        )));
    }
    let others = catalogue.overlapping_roots(storage.id).await.map_err(catalogue_error)?;
    if let Some(other) = others.first() {
        return Err(HandlerError::permanent(format!(
            "the storage root {} overlaps storage config {} at {}: two configs on one tree would be crawled at the \
             same time. Nothing was done. Deactivate one of them (almanac-worker config deactivate {})",
            root.display(),
            other.id,
            other.root_path.display(),
            other.id
        )));
    }
    Ok(())
}

/// Checks that the proxy root can take a file now ([`almanac_media::check_proxy_root`], on a blocking thread),
/// creating it first when it is missing, as `run` does and as the crawl's writes always have.
pub(super) async fn check_proxy_root(proxy_root: &Path) -> Result<(), almanac_media::MediaError> {
    let root = proxy_root.to_owned();
    let check = move || match std::fs::create_dir_all(&root) {
        Ok(()) => almanac_media::check_proxy_root(&root),
        Err(source) => Err(almanac_media::MediaError::ProxyRootUnwritable { root, source }),
    };
    tokio::task::spawn_blocking(check).await.unwrap_or_else(|e| {
        Err(almanac_media::MediaError::ProxyRootUnwritable {
            root: proxy_root.to_owned(),
            source: std::io::Error::other(format!("the check ended abnormally: {e}")),
        })
    })
}

/// Refuses a crawl of a config whose proxies the catalogue has under the proxy root when their folder
/// (`<proxy root>/<config id>`) is not there: the proxy volume is not mounted (its mount point is an empty folder of
/// the system disk, or the proxy root a folder the crawl would make there), or the folder was removed by hand.
/// Writing on would put every new photo's proxies, and every web video, on whatever disk holds the empty mount
/// point (a NAS's small system partition), hidden again once the volume is mounted. Checked before the proxy root
/// is made or written to.
pub(super) async fn check_proxies_in_place<C: CatalogueStore>(
    catalogue: &C,
    storage: &StorageConfig,
    proxy_root: &Path,
    (cancel, within): (&CancellationToken, Duration),
) -> Result<(), HandlerError> {
    if !catalogue.has_proxy_files(storage.id).await.map_err(catalogue_error)? {
        return Ok(());
    }
    let folder = proxy_root.join(storage.id.to_string());
    // On a blocking thread, within a limit: a proxy volume on a hung NFS server must hold neither the runtime nor
    // the crawl's slot.
    let (looked, what) = (folder.clone(), format!("looking for the proxy folder {}", folder.display()));
    let look = move || std::fs::symlink_metadata(looked);
    let found = match answered_in_time(cancel, (&folder, Holds::Proxies), within, &what, look).await? {
        // A link is there, not missing: `check_proxy_folders` refuses it next, as it does a new config's.
        Ok(meta) if meta.is_dir() || meta.is_symlink() => return Ok(()),
        Ok(_) => "something other than a folder is there".to_owned(),
        Err(e) => e.to_string(),
    };
    Err(crate::proxy_folder_missing(&folder, &found, "Nothing was read or written; the crawl", storage.id))
}

/// Checks that the Worker's user may write the config's proxy folders ([`almanac_media::check_proxy_folders`], on a
/// blocking thread).
pub(super) async fn check_proxy_folders(
    proxy_root: &Path,
    storage: &StorageConfig,
) -> Result<(), almanac_media::MediaError> {
    let folder = proxy_root.join(storage.id.to_string());
    let looked = folder.clone();
    tokio::task::spawn_blocking(move || almanac_media::check_proxy_folders(&looked)).await.unwrap_or_else(|e| {
        Err(almanac_media::MediaError::ProxyRootUnwritable {
            root: folder,
            source: std::io::Error::other(format!("the check ended abnormally: {e}")),
        })
    })
}

/// Checks the folders from the config's proxy folder down to `at` ([`almanac_media::check_proxy_path`], on a
/// blocking thread), after a proxy there could not be made.
pub(super) async fn check_proxy_path(
    proxy_root: &Path,
    config: almanac_domain::StorageConfigId,
    at: std::path::PathBuf,
) -> Result<(), almanac_media::MediaError> {
    let config_dir = proxy_root.join(config.to_string());
    let check = move || almanac_media::check_proxy_path(&config_dir, &at);
    tokio::task::spawn_blocking(check).await.unwrap_or_else(|e| {
        Err(almanac_media::MediaError::ProxyRootUnwritable {
            root: proxy_root.to_owned(),
            source: std::io::Error::other(format!("the check ended abnormally: {e}")),
        })
    })
}

/// A crawl that cannot write proxies: one retryable error naming `storage.proxy_root` and the cause, then what
/// became of the crawl (`then`).
pub(super) fn proxy_root_unwritable(e: almanac_media::MediaError, then: &str) -> HandlerError {
    HandlerError::retryable(format!("{e}. {then}; the crawl is tried again while it has attempts left"))
}

/// Opens the root (reached without any link, a folder, readable) and tells whether it is a mount point now.
/// A root that was a mount point at the last crawl and is not one now is refused unless `args.root_moved`
/// confirms the library moved off its mount: a share that is not mounted leaves an ordinary folder behind.
pub(super) fn open_root(storage: &StorageConfig, args: &CrawlArgs) -> Result<(RootFolder, bool), HandlerError> {
    let path = &storage.root_path;
    let root = RootFolder::open(path).map_err(|e| {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return HandlerError::permanent(format!(
                "the storage root {} is a link now, which is never followed: nothing was read. If the library \
                 really moved, deactivate this config and register its real path with almanac-worker config add",
                path.display()
            ));
        }
        match e.raw_os_error() {
            Some(20) => root_unavailable(path, "is not a folder, or a folder on the way to it is a link"),
            Some(40) => root_unavailable(path, "is reached through a link, which is never followed"),
            _ => root_unavailable(path, &format!("cannot be opened ({e})")),
        }
    })?;
    let is_mount_point =
        root.is_mount_point().map_err(|e| root_unavailable(path, &format!("cannot be examined ({e})")))?;
    if storage.root_is_mount_point == Some(true) && !is_mount_point && !args.root_moved {
        return Err(root_unavailable(
            path,
            &format!(
                "was a mount point at the last crawl and is not one now (a share that is not mounted leaves an \
                 ordinary folder behind). If the library really moved off its own mount, confirm with: \
                 almanac-worker enqueue crawl --config {} --payload '{{\"root_moved\": true}}'",
                storage.id
            ),
        ));
    }
    Ok((root, is_mount_point))
}

/// Refuses a root in which the walk found no media while the catalogue has `active` assets for it, unless
/// `args.allow_mass_deletion` confirms the library really is empty. Decided on what the walk found, not on
/// raw entries: a mount point left with `.DS_Store`, `@eaDir` or `lost+found` holds no media.
/// When the walk could not read some folders (`not_walked`), the refusal names the first: what the catalogue has
/// under them is kept whatever is confirmed, so they, not an unmounted share, may be why nothing was found.
pub(super) fn check_not_emptied(
    storage: &StorageConfig,
    args: &CrawlArgs,
    active: usize,
    media_found: u64,
    not_walked: &[FolderNotWalked],
) -> Result<(), HandlerError> {
    if active > 0 && media_found == 0 && !args.allow_mass_deletion {
        let unread = match not_walked {
            [] => String::new(),
            [first, ..] => format!(
                " ({} of its folders or entries could not be read, e.g. {}: {}; what the catalogue has there is kept)",
                not_walked.len(),
                first.path,
                first.reason
            ),
        };
        return Err(root_unavailable(
            &storage.root_path,
            &format!(
                "holds no photos or videos while the catalogue has {active} active assets for it{unread}. If the \
                 library really is empty now, {}",
                super::rules::how_to_confirm(storage.id)
            ),
        ));
    }
    Ok(())
}

/// A root that looks unavailable: retryable, and nothing was soft-deleted.
fn root_unavailable(root: &Path, what: &str) -> HandlerError {
    HandlerError::retryable(format!(
        "the storage root {} {what}; is the share mounted? Nothing was soft-deleted; the crawl is tried again while \
         it has attempts left",
        root.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that answers is answered; one that never does (a share whose server stopped answering) is given up on
    /// once the crawl stops, its thread left waiting (so the runtime is shut down without waiting for it, as the
    /// Worker's is: `main.rs`).
    #[test]
    fn a_read_that_does_not_answer_is_given_up_on_when_the_crawl_stops() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let halt = CancellationToken::new();
            assert!(matches!(read_by_the_crawl(&halt, "reading", || 7).await, Ok(7)));
            let stopping = halt.clone();
            let stop = tokio::spawn(async move {
                tokio::task::yield_now().await;
                stopping.cancel();
            });
            let never = read_by_the_crawl(&halt, "reading", || -> u32 {
                loop {
                    std::thread::park();
                }
            });
            assert!(matches!(never.await, Err(FileProblem::Cancelled)));
            stop.await.unwrap();
            // Once the crawl has stopped, no read is begun (each would leave a thread in a silent share).
            // The read says it began; a read dropped unbegun drops its sender, which ends the wait for it at once.
            let (began, begun) = std::sync::mpsc::channel::<()>();
            let after = read_by_the_crawl(&halt, "reading", move || began.send(()).unwrap()).await;
            assert!(matches!(after, Err(FileProblem::Cancelled)));
            assert!(begun.recv().is_err(), "not begun");
        });
        runtime.shutdown_background();
    }
}
