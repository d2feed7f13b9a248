use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use almanac_domain::{StorageConfigId, WorkArgs, WorkItem, WorkKind, ports::Fence};
use tokio_util::sync::CancellationToken;

/// A boxed, sendable future: what a [`Handler`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a handler did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    /// What went wrong and what to do about it.
    pub message: String,
    /// Whether another attempt may succeed (a vanished share, an outage) or not (a bad payload).
    pub retryable: bool,
    /// Whether the database was unavailable to the handler (a lost connection, a killed backend, a failover):
    /// not a failure of the work. The item goes back to the queue without counting a failure (docs/safety.md,
    /// invariant 9).
    pub outage: bool,
}

impl HandlerError {
    /// An error another attempt may not hit.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self { message: message.into(), retryable: true, outage: false }
    }

    /// An error that no retry will fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self { message: message.into(), retryable: false, outage: false }
    }

    /// The database was unavailable: the item goes back to the queue, no failure counted.
    pub fn outage(message: impl Into<String>) -> Self {
        Self { message: message.into(), retryable: true, outage: true }
    }

    /// The handler stopped because its token was cancelled.
    pub fn cancelled() -> Self {
        Self::retryable("cancelled before finishing")
    }
}

/// Where a handler reports progress; the latest report rides on the next heartbeat.
#[derive(Debug, Clone, Default)]
pub struct ProgressReporter {
    latest: Arc<Mutex<Option<serde_json::Value>>>,
}

impl ProgressReporter {
    /// Replaces the progress to send with the next heartbeat.
    pub fn report(&self, progress: serde_json::Value) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(progress);
    }

    /// The latest progress reported, if any.
    pub fn latest(&self) -> Option<serde_json::Value> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What a handler gets for one attempt.
#[derive(Debug, Clone)]
pub struct HandlerContext {
    /// The claimed item.
    pub item: WorkItem,
    /// This attempt's fence: every catalogue write the handler makes carries it, so nothing of a stale
    /// attempt commits (ADR 0008 rule 5).
    pub fence: Fence,
    /// Cancelled when the handler must stop: a cancel request, a lost lease, the self-stop, or the end of the
    /// shutdown grace. Handlers check it between steps and stop promptly.
    pub cancel: CancellationToken,
    /// Where to report progress.
    pub progress: ProgressReporter,
}

impl HandlerContext {
    /// The item's storage config. An unscoped item of a kind that needs one (the queue refuses to enqueue it,
    /// so only a row written by hand) is a permanent error.
    pub fn config(&self) -> Result<StorageConfigId, HandlerError> {
        self.item.scope.storage_config().ok_or_else(|| {
            HandlerError::permanent(format!("a {} work item needs a storage config; this one has none", self.item.kind))
        })
    }

    /// The item's arguments, read from its payload. A payload that is not those arguments (a mistyped field) is a
    /// permanent error that names what is wrong. A field this build does not know is retryable: the command line
    /// and typed arguments refuse a misspelt one before it is queued, so it is most likely an item of a newer
    /// version (queued by a web backend or Worker upgraded first), which a newer Worker may take on a retry.
    pub fn args<A: WorkArgs>(&self) -> Result<A, HandlerError> {
        A::from_payload(&self.item.payload).map_err(|e| match e {
            almanac_domain::DomainError::UnknownField { .. } => HandlerError::retryable(format!(
                "{e}. It is tried again while it has attempts left, so that a newer Worker may take it: upgrade this \
                 Worker to the version that queued it"
            )),
            other => HandlerError::permanent(other.to_string()),
        })
    }
}

/// Runs the work items of one kind, untyped: what the registry holds. Handlers implement [`WorkHandler`],
/// which makes them one of these. The handler contract: honour `cancel` between steps, make every file
/// write idempotent (temporary name, then rename), never touch an original, return a result summary or an
/// error that says what happened and what to do.
pub trait Handler: Send + Sync + 'static {
    /// The kind this handler runs.
    fn kind(&self) -> WorkKind;

    /// Runs one attempt. `Ok` carries an optional result summary stored on the item.
    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>>;
}

/// A handler of one kind, typed: the kind is its arguments' ([`WorkArgs::KIND`]), it gets those arguments read
/// from the item's payload, and returns the kind's result ([`WorkArgs::Output`]), which is stored on the item.
/// Every such handler is a [`Handler`]: a payload that is not the kind's arguments (a misspelt or mistyped
/// field) fails the attempt with a permanent error naming what is wrong, before the handler runs.
pub trait WorkHandler: Send + Sync + 'static {
    /// The arguments of the kind it runs.
    type Args: WorkArgs<Output: Send> + Send;

    /// Runs one attempt with the item's arguments.
    fn work(
        &self,
        args: Self::Args,
        ctx: HandlerContext,
    ) -> BoxFuture<'_, Result<<Self::Args as WorkArgs>::Output, HandlerError>>;
}

impl<H: WorkHandler> Handler for H {
    fn kind(&self) -> WorkKind {
        H::Args::KIND
    }

    fn run(&self, ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
        Box::pin(async move {
            let args = ctx.args::<H::Args>()?;
            let output = self.work(args, ctx).await?;
            let result = serde_json::to_value(output).map_err(|e| {
                HandlerError::permanent(format!("the result of a {} could not be written as JSON: {e}", H::Args::KIND))
            })?;
            Ok(Some(result))
        })
    }
}

/// The handlers of one Worker, by kind. A Worker never claims an item whose kind has no handler here.
#[derive(Clone, Default)]
pub struct HandlerRegistry {
    handlers: BTreeMap<WorkKind, Arc<dyn Handler>>,
}

impl std::fmt::Debug for HandlerRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.handlers.keys()).finish()
    }
}

impl HandlerRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a handler, replacing any earlier one of the same kind.
    pub fn register(mut self, handler: impl Handler) -> Self {
        self.handlers.insert(handler.kind(), Arc::new(handler));
        self
    }

    /// The kinds this Worker can run.
    pub fn kinds(&self) -> Vec<WorkKind> {
        self.handlers.keys().copied().collect()
    }

    pub(crate) fn get(&self, kind: WorkKind) -> Option<Arc<dyn Handler>> {
        self.handlers.get(&kind).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Noop(WorkKind);

    impl Handler for Noop {
        fn kind(&self) -> WorkKind {
            self.0
        }
        fn run(&self, _ctx: HandlerContext) -> BoxFuture<'_, Result<Option<serde_json::Value>, HandlerError>> {
            Box::pin(async { Ok(None) })
        }
    }

    #[test]
    fn the_registry_lists_its_kinds_once_each_and_shows_them() {
        let registry = HandlerRegistry::new()
            .register(Noop(WorkKind::Purge))
            .register(Noop(WorkKind::Crawl))
            .register(Noop(WorkKind::Purge));
        assert_eq!(registry.kinds(), [WorkKind::Crawl, WorkKind::Purge]);
        assert_eq!(format!("{registry:?}"), "[Crawl, Purge]");
        assert!(registry.get(WorkKind::Crawl).is_some() && registry.get(WorkKind::TokenCleanup).is_none());
    }

    #[test]
    fn progress_keeps_the_latest_report() {
        let progress = ProgressReporter::default();
        assert_eq!(progress.latest(), None);
        progress.report(serde_json::json!({"done": 1}));
        progress.report(serde_json::json!({"done": 2}));
        assert_eq!(progress.latest(), Some(serde_json::json!({"done": 2})));
    }

    fn context(kind: WorkKind, scope: almanac_domain::Scope, payload: serde_json::Value) -> HandlerContext {
        let now = chrono::Utc::now();
        let item = WorkItem {
            id: almanac_domain::WorkItemId::new(),
            kind,
            scope,
            status: almanac_domain::Status::Running,
            payload,
            dedup_key: None,
            requested_at: now,
            run_after: now,
            attempt: 1,
            failures: 0,
            stalls: 0,
            max_attempts: 5,
            lease_expires_at: Some(now),
            worker_id: None,
            started_at: Some(now),
            heartbeat_at: Some(now),
            finished_at: None,
            cancel_requested_at: None,
            last_error: None,
            progress: None,
            result: None,
        };
        let claim = almanac_domain::ports::ClaimToken::from_uuid(uuid::Uuid::nil());
        let fence = Fence::new(item.id, almanac_domain::ports::Attempt::new(1).unwrap(), claim);
        HandlerContext { item, fence, cancel: CancellationToken::new(), progress: ProgressReporter::default() }
    }

    #[test]
    fn the_context_gives_the_item_s_config_and_arguments_or_an_error_saying_why() {
        let config = StorageConfigId::new();
        let scoped = context(WorkKind::Crawl, almanac_domain::Scope::Config(config), serde_json::json!({}));
        assert_eq!(scoped.config(), Ok(config));
        let unscoped = context(WorkKind::Crawl, almanac_domain::Scope::Unscoped, serde_json::json!({}));
        let e = unscoped.config().unwrap_err();
        assert!(!e.retryable && e.message.contains("a crawl work item needs a storage config"), "{e}");

        let confirmed = context(
            WorkKind::Crawl,
            almanac_domain::Scope::Config(config),
            serde_json::json!({"allow_mass_deletion": true}),
        );
        assert!(confirmed.args::<almanac_domain::CrawlArgs>().unwrap().allow_mass_deletion);
        let misspelt =
            context(WorkKind::Crawl, almanac_domain::Scope::Config(config), serde_json::json!({"allow": true}));
        let e = misspelt.args::<almanac_domain::CrawlArgs>().unwrap_err();
        assert!(e.retryable && e.message.contains("unknown field `allow`"), "a newer version's field, maybe: {e}");
        assert!(e.message.contains("upgrade this Worker"), "{e}");
        let mistyped =
            context(WorkKind::Crawl, almanac_domain::Scope::Config(config), serde_json::json!({"root_moved": 3}));
        let e = mistyped.args::<almanac_domain::CrawlArgs>().unwrap_err();
        assert!(!e.retryable && e.message.contains("root_moved"), "{e}");
    }

    /// Counts the assets of its arguments as deleted.
    struct Deleter;

    impl WorkHandler for Deleter {
        type Args = almanac_domain::ProxyDeletionArgs;

        fn work(
            &self,
            args: Self::Args,
            _ctx: HandlerContext,
        ) -> BoxFuture<'_, Result<almanac_domain::DeletionReport, HandlerError>> {
            Box::pin(async move { Ok(almanac_domain::DeletionReport::new(args.asset_ids.len() as u64)) })
        }
    }

    #[tokio::test]
    async fn a_typed_handler_runs_its_kind_with_its_arguments_and_stores_its_result() {
        assert_eq!(Handler::kind(&Deleter), WorkKind::ProxyDeletion);
        let ids = [almanac_domain::AssetId::new(), almanac_domain::AssetId::new()];
        let ctx =
            context(WorkKind::ProxyDeletion, almanac_domain::Scope::Unscoped, serde_json::json!({"asset_ids": ids}));
        assert_eq!(Deleter.run(ctx).await, Ok(Some(serde_json::json!({"deleted": 2}))));
        let ctx =
            context(WorkKind::ProxyDeletion, almanac_domain::Scope::Unscoped, serde_json::json!({"asset_ids": 7}));
        let e = Deleter.run(ctx).await.unwrap_err();
        assert!(!e.retryable && e.message.contains("proxy_deletion") && e.message.contains("asset_ids"), "{e}");
    }

    #[test]
    fn handler_errors_say_whether_to_retry() {
        assert!(HandlerError::retryable("x").retryable);
        assert!(!HandlerError::permanent("x").retryable);
        assert!(HandlerError::cancelled().retryable);
        assert!(HandlerError::outage("x").outage && HandlerError::outage("x").retryable);
        assert!(!HandlerError::retryable("x").outage && !HandlerError::permanent("x").outage);
        assert_eq!(HandlerError::permanent("bad payload").to_string(), "bad payload");
    }
}
