//! What the handler tests share: a fresh database with one storage config, its folder of originals and a proxy
//! root in a temporary folder.

#![allow(dead_code)]

use std::path::PathBuf;

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{NewWorkItem, Scope, StorageConfigId, WorkItem, WorkKind, WorkQueue};
use almanac_executor::{Handler, HandlerContext, HandlerError, ProgressReporter};
use almanac_handlers::{CrawlHandler, CrawlSettings, MassDeletionGuard};
use almanac_media::ToolLimits;
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::BigInt;
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
    pub async fn work_item(&self, kind: WorkKind, scope: Scope, payload: serde_json::Value) -> WorkItem {
        let new = NewWorkItem::new(kind, scope).unwrap().with_payload(payload);
        self.store.enqueue(&new).await.unwrap().item
    }

    /// Runs a handler on an item and returns its result.
    pub async fn run_handler(&self, handler: &impl Handler, item: WorkItem) -> Result<serde_json::Value, HandlerError> {
        let ctx = HandlerContext { item, cancel: CancellationToken::new(), progress: ProgressReporter::default() };
        handler.run(ctx).await.map(|r| r.expect("a result"))
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
    pub fn handler(&self) -> CrawlHandler<PgStore, PgStore> {
        self.handler_with(4)
    }

    pub fn handler_with(&self, max_concurrent_files: usize) -> CrawlHandler<PgStore, PgStore> {
        let settings = CrawlSettings {
            proxy_root: self.proxies.clone(),
            max_concurrent_files,
            tool_limits: ToolLimits::default(),
            mass_deletion: MassDeletionGuard::default(),
        };
        CrawlHandler::new(self.store.clone(), self.store.clone(), settings)
    }

    pub async fn item(&self, payload: serde_json::Value) -> WorkItem {
        self.work_item(WorkKind::Crawl, Scope::Config(self.config), payload).await
    }

    pub async fn crawl_with(
        &self,
        payload: serde_json::Value,
        cancel: CancellationToken,
    ) -> Result<serde_json::Value, HandlerError> {
        let ctx = HandlerContext { item: self.item(payload).await, cancel, progress: ProgressReporter::default() };
        self.handler().run(ctx).await.map(|r| r.expect("a crawl reports its result"))
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
