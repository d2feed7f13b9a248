use diesel::Connection;
use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::StoreError;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// Applies every pending migration to the database at `database_url` and returns the versions applied.
pub async fn migrate(database_url: &str) -> Result<Vec<String>, StoreError> {
    with_harness(database_url, |h| {
        h.run_pending_migrations(MIGRATIONS).map(|vs| vs.iter().map(ToString::to_string).collect())
    })
    .await
}

/// The versions of the migrations not yet applied to the database at `database_url`.
pub async fn pending_migrations(database_url: &str) -> Result<Vec<String>, StoreError> {
    with_harness(database_url, |h| {
        h.pending_migrations(MIGRATIONS).map(|ms| ms.iter().map(|m| m.name().version().to_string()).collect())
    })
    .await
}

type Harness = AsyncConnectionWrapper<AsyncPgConnection>;
type HarnessResult = diesel::migration::Result<Vec<String>>;

/// diesel's migration harness is synchronous: run it on a thread of its own with a small runtime of its own
/// (timers enabled, for URLs with `connect_timeout`), so it works under any runtime flavour.
async fn with_harness(
    database_url: &str,
    run: impl FnOnce(&mut Harness) -> HarnessResult + Send + 'static,
) -> Result<Vec<String>, StoreError> {
    let url = database_url.to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(StoreError::Migration(format!("starting a runtime: {e}"))));
                return;
            }
        };
        let _context = runtime.enter();
        let result = Harness::establish(&url)
            .map_err(|e| StoreError::Unavailable(e.to_string()))
            .and_then(|mut conn| run(&mut conn).map_err(|e| StoreError::Migration(e.to_string())));
        let _ = tx.send(result);
    });
    rx.await.map_err(|_| StoreError::Migration("the migration thread died".into()))?
}
