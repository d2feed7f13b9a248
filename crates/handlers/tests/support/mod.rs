//! What the handler tests share: a fresh database with one storage config, its folder of originals and a proxy
//! root in a temporary folder.

#![allow(dead_code)]

pub mod logs;
pub mod twist;

use std::path::PathBuf;

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{
    NewWorkItem, Scope, StorageConfigId, WorkItem, WorkItemId, WorkKind, WorkQueue,
    ports::{Attempt, ClaimToken, Fence},
};
use almanac_executor::{Handler, HandlerContext, HandlerError, ProgressReporter};
use almanac_handlers::{CrawlHandler, CrawlSettings};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::{BigInt, Jsonb};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use tokio_util::sync::CancellationToken;

pub struct Library {
    pub db: TestDatabase,
    pub store: Arc<PgStore>,
    pub config: StorageConfigId,
    pub root: PathBuf,
    pub proxies: PathBuf,
    pub dir: tempfile::TempDir,
}

/// A fresh database with user `ann` and one storage config at `<temp>/originals` (created).
pub async fn library() -> Library {
    let db = TestDatabase::create().await;
    let store = Arc::new(PgStore::new(db.url(), 6, Duration::from_secs(10)).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("originals");
    let proxies = dir.path().join("proxies");
    std::fs::create_dir_all(&root).unwrap();
    let (_, config) =
        store.add_storage_config(&NewStorageConfig { username: "ann".into(), root_path: root.clone() }).await.unwrap();
    Library { db, store, config: config.id, root, proxies, dir }
}

impl Library {
    pub async fn conn(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(self.db.url()).await.unwrap()
    }

    /// Enqueues an item and returns it, as a claim would hand it to a handler.
    pub async fn enqueue(&self, new: &NewWorkItem) -> WorkItem {
        self.store.enqueue(new).await.unwrap().item
    }

    /// Enqueues an item whose payload is `payload` as it is written, as a row written by hand or by another
    /// program would hold it (the typed arguments cannot write a wrong one), and returns it as a claim would
    /// hand it to a handler.
    pub async fn work_item(&self, kind: WorkKind, scope: Scope, payload: serde_json::Value) -> WorkItem {
        let mut item = self.enqueue(&NewWorkItem::new(kind, scope).unwrap()).await;
        sql_query("UPDATE work_items SET payload = $1 WHERE id = $2")
            .bind::<Jsonb, _>(&payload)
            .bind::<diesel::sql_types::Uuid, _>(item.id.as_uuid())
            .execute(&mut self.conn().await)
            .await
            .unwrap();
        item.payload = payload;
        item
    }

    /// Runs a handler on an item and returns its result.
    pub async fn run_handler(&self, handler: &impl Handler, item: WorkItem) -> Result<serde_json::Value, HandlerError> {
        self.run_in(handler, item, CancellationToken::new()).await.map(|r| r.expect("a result"))
    }

    /// Runs a handler on an item as an attempt would: the item is taken (running, a new attempt, a lease of an
    /// hour) so the handler's fenced writes hold, and finished afterwards so the config's next item can run.
    pub async fn run_in(
        &self,
        handler: &impl Handler,
        item: WorkItem,
        cancel: CancellationToken,
    ) -> Result<Option<serde_json::Value>, HandlerError> {
        self.run_reporting(handler, item, cancel, ProgressReporter::default()).await
    }

    /// [`Self::run_in`], the handler reporting its progress to `progress`.
    pub async fn run_reporting(
        &self,
        handler: &impl Handler,
        item: WorkItem,
        cancel: CancellationToken,
        progress: ProgressReporter,
    ) -> Result<Option<serde_json::Value>, HandlerError> {
        let fence = self.start(item.id).await;
        let ctx = HandlerContext { item, fence, cancel, progress };
        let result = handler.run(ctx).await;
        self.finish(fence).await;
        result
    }

    /// A live fence for writing fixtures through the fenced ports: an unscoped item taken as a claim would.
    pub async fn fixture_fence(&self) -> Fence {
        let item = self.work_item(WorkKind::TokenCleanup, Scope::Unscoped, serde_json::json!({"fixture": true})).await;
        self.start(item.id).await
    }

    /// Takes an item the way a claim would; returns its fence.
    pub async fn start(&self, id: WorkItemId) -> Fence {
        #[derive(diesel::QueryableByName)]
        struct Started {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            attempt: i32,
            #[diesel(sql_type = diesel::sql_types::Uuid)]
            claim_token: uuid::Uuid,
        }
        let started: Started = sql_query(
            "UPDATE work_items SET status = 'running', attempt = attempt + 1, claim_token = gen_random_uuid(),
                    worker_id = 'test', started_at = now(), lease_expires_at = now() + interval '1 hour'
              WHERE id = $1 RETURNING attempt, claim_token",
        )
        .bind::<diesel::sql_types::Uuid, _>(id.as_uuid())
        .get_result(&mut self.conn().await)
        .await
        .unwrap();
        Fence::new(id, Attempt::new(started.attempt).unwrap(), ClaimToken::from_uuid(started.claim_token))
    }

    /// Ends an attempt started by [`Library::start`] (if it still holds its item).
    pub async fn finish(&self, fence: Fence) {
        sql_query(
            "UPDATE work_items SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
              WHERE id = $1 AND attempt = $2 AND claim_token = $3 AND status = 'running'",
        )
        .bind::<diesel::sql_types::Uuid, _>(fence.id.as_uuid())
        .bind::<diesel::sql_types::Integer, _>(fence.attempt.get())
        .bind::<diesel::sql_types::Uuid, _>(fence.claim.as_uuid())
        .execute(&mut self.conn().await)
        .await
        .unwrap();
    }

    /// The `n` column of a one-row query.
    pub async fn count(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        sql_query(sql).get_result::<N>(&mut self.conn().await).await.unwrap().n
    }

    // The crawl, as the crawl and file-safety tests run it.
    pub fn handler(&self) -> CrawlHandler<PgStore> {
        self.handler_with(4)
    }

    pub fn handler_with(&self, max_concurrent_files: usize) -> CrawlHandler<PgStore> {
        self.crawler(CrawlSettings { max_concurrent_files, ..self.settings() })
    }

    /// The crawl's settings as these tests run it: the shipped ones but for no settle time (the tests write their
    /// files moments before they crawl: none is being written any more) and the household's zone at UTC (so no
    /// test depends on the machine's).
    pub fn settings(&self) -> CrawlSettings {
        CrawlSettings {
            settle_time: Duration::ZERO,
            zone: almanac_domain::Zone::Fixed(chrono::FixedOffset::east_opt(0).unwrap()),
            ..CrawlSettings::new(self.proxies.clone())
        }
    }

    /// A crawl with `settings` (these tests' own, [`Library::settings`], with what a test changes).
    pub fn crawler(&self, settings: CrawlSettings) -> CrawlHandler<PgStore> {
        CrawlHandler::new(self.store.clone(), settings)
    }

    pub async fn item(&self, payload: serde_json::Value) -> WorkItem {
        self.work_item(WorkKind::Crawl, Scope::Config(self.config), payload).await
    }

    pub async fn crawl_with(
        &self,
        payload: serde_json::Value,
        cancel: CancellationToken,
    ) -> Result<serde_json::Value, HandlerError> {
        let item = self.item(payload).await;
        self.run_in(&self.handler(), item, cancel).await.map(|r| r.expect("a crawl reports its result"))
    }

    pub async fn crawl(&self) -> serde_json::Value {
        self.crawl_with(serde_json::json!({}), CancellationToken::new()).await.expect("crawl succeeds")
    }

    pub fn write(&self, rel: &str, content: &[u8]) -> PathBuf {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }
}

/// Runs `crawl` (pinned by the caller, who then awaits its end) until one of its files waits for `handler`'s pixel
/// budget, which the test holds; panics naming `file` if the crawl ends first (its proxies were made without the
/// pixels).
pub async fn until_a_file_waits_for_pixels<F>(handler: &CrawlHandler<PgStore>, crawl: std::pin::Pin<&mut F>, file: &str)
where
    F: std::future::Future<Output = Result<serde_json::Value, HandlerError>>,
{
    let waits = async {
        let deadline = almanac_testdb::Deadline::after(Duration::from_secs(30));
        while handler.pixel_budget().waiting() == 0 {
            deadline.check(format!("{file} to wait for the pixel budget"));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        result = crawl => panic!("{file}: the proxies were made with the pixel budget held: {result:?}"),
        () = waits => {}
    }
}
