//! What becomes of a file's problem, and of the files a crawl held back: the crawl's own decisions around each
//! file's journey ([`super::ingest`]).

use std::sync::Mutex;

use almanac_domain::{
    StorageConfig, StorageConfigId,
    ports::{CatalogueError, CatalogueStore, DatabaseClock, KnownFile},
};
use almanac_executor::{HandlerError, ProgressReporter};
use futures_util::StreamExt;
use tracing::warn;

use super::ingest::Run;
use super::problems::FileProblem;
use super::report::bump;
use super::{CrawlHandler, FILE_OUTAGE_RETRIES, WalkEntry, display, root, rules, settle};

impl<C: CatalogueStore + DatabaseClock + 'static> CrawlHandler<C> {
    /// The error that stops a crawl whose proxy write the volume refused (full, read-only): a folder on the way that
    /// the Worker's user may not write is named rather than the volume ([`root::check_proxy_path`]).
    async fn proxy_volume_refused(&self, config: StorageConfigId, e: almanac_media::MediaError) -> HandlerError {
        let folder = match &e {
            almanac_media::MediaError::ProxyWrite { path, .. } => {
                root::check_proxy_path(&self.settings.proxy_root, config, path.clone()).await.err()
            }
            _ => None,
        };
        root::proxy_root_unwritable(folder.unwrap_or(e), "The crawl stopped before its end")
    }

    /// Writes the files the walk held back because each takes another asset's own path ([`Run::hold_back`]), once
    /// the guard has weighed them with what vanished: more than it lets go at once refuses the crawl with nothing
    /// replaced or deleted, so every attempt meets the library as it was (a replacement written before a refusal
    /// would shrink what the next attempt weighs). A few at a time, as the walk's files.
    pub(super) async fn replace_held_back(
        &self,
        run: &Run<'_, C>,
        storage: &StorageConfig,
        unseen: &settle::Unseen,
        active: settle::Weighed,
        progress: &ProgressReporter,
    ) -> Result<(), HandlerError> {
        let held = std::mem::take(&mut *run.held_back.lock().expect("poisoned"));
        if held.is_empty() {
            return Ok(());
        }
        let vanished = unseen.assets.len() + unseen.held.len();
        let (library, looked_for) = (active.library as u64, active.looked_for as u64);
        if self.settings.mass_deletion.refuses_of(library, looked_for, (vanished + held.len()) as u64) {
            return Err(HandlerError::retryable(format!(
                "refusing to soft-delete {vanished} of {looked_for} assets under {} and to replace {} more whose paths \
                 files of other content now have: {} at once, which usually means a share is only partly mounted, \
                 or another disk is mounted in its place. Nothing was replaced or deleted. If the files really are \
                 gone or replaced, {}",
                storage.root_path.display(),
                held.len(),
                self.settings.mass_deletion.describe(),
                rules::how_to_confirm(storage.id)
            )));
        }
        let fatal: Mutex<Option<HandlerError>> = Mutex::default();
        // Progress goes on while they are written: each is done once written (the walk's are all done by then).
        let replayed = std::sync::atomic::AtomicU64::new(0);
        futures_util::stream::iter(held)
            .for_each_concurrent(self.settings.max_concurrent_files.max(1), |(entry, known)| {
                let (fatal, replayed) = (&fatal, &replayed);
                async move {
                    // Stopped (`halt`: cancelled, a problem, a share that stopped answering): none begun.
                    if run.halt.is_cancelled() || fatal.lock().expect("poisoned").is_some() {
                        return;
                    }
                    self.one_file(run, &entry, Some(&known), true, fatal).await;
                    run.counters.held_back.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    let n = replayed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    if n.is_multiple_of(super::PROGRESS_EVERY) {
                        crate::report_progress(progress, &run.counts());
                    }
                }
            })
            .await;
        if run.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        fatal.into_inner().expect("poisoned").map_or(Ok(()), Err)
    }

    /// One file's journey ([`Run::file_through_outages`]) and what its problem comes to: one that stops the crawl
    /// is kept in `fatal` (the first only), and nothing more is wanted from the walk.
    pub(super) async fn one_file(
        &self,
        run: &Run<'_, C>,
        entry: &WalkEntry,
        known: Option<&KnownFile>,
        held_back: bool,
        fatal: &Mutex<Option<HandlerError>>,
    ) {
        if let Err(problem) = run.file_through_outages(entry, known, held_back).await
            && let Some(e) = self.file_problem(run, entry, problem).await
        {
            fatal.lock().expect("poisoned").get_or_insert(e);
            run.halt.cancel();
        }
    }

    /// What a file's problem comes to: counted against the file (the crawl goes on), or the error that stops
    /// the crawl.
    pub(super) async fn file_problem(
        &self,
        run: &Run<'_, C>,
        entry: &WalkEntry,
        problem: FileProblem,
    ) -> Option<HandlerError> {
        match problem {
            FileProblem::Cancelled => None,
            FileProblem::Settling => {
                run.counters.settling(&entry.rel);
                tracing::debug!(path = %run.abs(entry).display(), "still being written; left for a crawl later");
                None
            }
            FileProblem::Skipped(reason) => {
                bump(&run.counters.skipped);
                tracing::debug!(path = %run.abs(entry).display(), reason, "skipped");
                None
            }
            FileProblem::Failed(reason) => {
                warn!(event = "file_failed", path = %run.abs(entry).display(), reason, "file skipped");
                run.counters.failed(display(&entry.rel), reason);
                None
            }
            FileProblem::Damaged(reason) => {
                warn!(event = "file_failed", path = %run.abs(entry).display(), reason, "file skipped");
                let failed = run.failures.failed(entry, &reason);
                run.counters.failed(display(&entry.rel), reason);
                // Not remembered (an outage, the attempt lost): read again at the next crawl, as before.
                if let Err(e) = run.catalogue.remember_failed_file(run.fence, run.config, &failed).await {
                    tracing::info!(path = %run.abs(entry).display(), error = %e, "a failed file is not remembered");
                }
                None
            }
            FileProblem::FailedBefore(reason) => {
                tracing::debug!(path = %run.abs(entry).display(), reason, "failed before and unchanged: not read");
                run.counters.failed(display(&entry.rel), reason);
                None
            }
            FileProblem::ProxyNotWritten { reason, at } => {
                // One file's trouble, unless the proxy root can take no file now (the volume filled up, went
                // read-only), or a folder on the way to this file's proxies refuses the Worker's user (one a Worker
                // run once as root left): then the crawl stops with that one error.
                let proxy_root = &self.settings.proxy_root;
                let refused = match (root::check_proxy_root(proxy_root).await, at) {
                    (Ok(()), Some(at)) => root::check_proxy_path(proxy_root, run.config, at).await.err(),
                    (Ok(()), None) => None,
                    (Err(e), _) => Some(e),
                };
                if let Some(e) = refused {
                    return Some(root::proxy_root_unwritable(e, "The crawl stopped before its end"));
                }
                warn!(event = "file_failed", path = %run.abs(entry).display(), reason, "file skipped");
                run.counters.failed(display(&entry.rel), reason);
                None
            }
            FileProblem::ProxyVolume(e) => Some(self.proxy_volume_refused(run.config, e).await),
            FileProblem::Replacing(reason) => Some(HandlerError::retryable(reason)),
            // This file's values, refused by the catalogue: they would be refused again; the others may be taken.
            FileProblem::Catalogue(e @ CatalogueError::Refused(_)) => {
                let reason = format!("{}: {e}", run.abs(entry).display());
                warn!(event = "file_failed", path = %run.abs(entry).display(), reason, "file skipped");
                run.counters.failed(display(&entry.rel), reason);
                None
            }
            FileProblem::Catalogue(e) => {
                Some(crate::store_error_while(&format!("the crawl stopped at {}: ", run.abs(entry).display()), e))
            }
        }
    }
}

impl<C: CatalogueStore> Run<'_, C> {
    /// One file's journey, tried again while the catalogue is unavailable (see [`FILE_OUTAGE_RETRIES`]).
    pub(super) async fn file_through_outages(
        &self,
        entry: &WalkEntry,
        known: Option<&KnownFile>,
        held_back: bool,
    ) -> Result<(), FileProblem> {
        let mut wait = std::time::Duration::from_millis(100);
        for _ in 0..FILE_OUTAGE_RETRIES {
            match self.file(entry, known, held_back).await {
                Err(FileProblem::Catalogue(CatalogueError::Unavailable(e))) => {
                    tracing::info!(event = "catalogue_retry", path = %self.abs(entry).display(), error = %e,
                        retry_in_ms = wait.as_millis() as u64, "the catalogue was unavailable; trying the file again");
                }
                other => return other,
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.cancel.cancelled() => return Err(FileProblem::Cancelled),
            }
            wait = (wait * 2).min(std::time::Duration::from_secs(2));
        }
        self.file(entry, known, held_back).await
    }
}
