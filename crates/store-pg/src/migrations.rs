use diesel::connection::SimpleConnection;
use diesel::migration::MigrationSource;
use diesel::pg::Pg;
use diesel::{Connection, QueryableByName, RunQueryDsl};
use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use almanac_domain::Cause;

use crate::{ConnectTarget, StoreError};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// The advisory lock migrations run under (the key spells "almanac" in ASCII): Workers started with
/// `--migrate` at the same time apply each migration once, one after the other.
const MIGRATION_LOCK: i64 = 0x0061_6c6d_616e_6163;

/// Applies every pending migration to the database at `database_url` and returns the versions applied: all of
/// them in one transaction, which first takes the migration lock (a concurrent call waits, then finds nothing
/// pending). The lock is the transaction's (`pg_advisory_xact_lock`), so it ends with the transaction whatever
/// happens, also through a pooler in transaction mode, where a session lock would stay on a server session
/// another client then gets (ADR 0012). A migration that fails leaves the schema as it was. A database whose text
/// is not UTF-8 is refused before anything is written in it ([`refuse_other_encodings`]).
pub async fn migrate(database_url: &str) -> Result<Vec<String>, StoreError> {
    with_harness(database_url, |h| {
        h.transaction(|h| {
            refuse_other_encodings(h)?;
            // A `migrate` killed while a migration waits for a table's lock must not leave its request queued,
            // every statement on that table waiting behind it. For this transaction only: through a pooler in
            // transaction mode, the server session is another client's after it.
            let check = crate::pooler::client_check(true);
            h.batch_execute(&format!(
                "SET LOCAL TimeZone = 'UTC'; {check}; SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"
            ))?;
            h.run_pending_migrations(MIGRATIONS).map(|vs| vs.iter().map(ToString::to_string).collect())
        })
    })
    .await
}

/// The names of the migrations this build carries (their folders' names under `migrations/`), in order.
pub fn migration_names() -> Vec<String> {
    let migrations = MigrationSource::<Pg>::migrations(&MIGRATIONS).expect("embedded migrations are listed");
    migrations.iter().map(|m| m.name().to_string()).collect()
}

/// A digest of the migrations this build carries (their folders' names and `up.sql`, as the build embedded
/// them): the name of a test template migrated by this build (`almanac_testdb`), so a binary built before a
/// migration was edited never migrates a template under the edited files' name.
pub fn migrations_digest() -> &'static str {
    env!("ALMANAC_MIGRATIONS_DIGEST")
}

/// The versions of the migrations not yet applied to the database at `database_url`.
pub async fn pending_migrations(database_url: &str) -> Result<Vec<String>, StoreError> {
    Ok(schema_state(database_url).await?.pending)
}

/// Where a database's schema stands against the migrations this build carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaState {
    /// Migrations of this build not applied yet.
    pub pending: Vec<String>,
    /// Migrations applied to the database that this build does not know: a newer Worker migrated it, and this
    /// one must not run against it.
    pub unknown: Vec<String>,
    /// The newest migration this build knows.
    pub newest_known: String,
}

/// Compares the database's applied migrations with this build's. A database whose text is not UTF-8 is refused
/// first, before anything is created in it ([`refuse_other_encodings`]): every verb that uses the database, `run`
/// included, reads this before anything else.
pub async fn schema_state(database_url: &str) -> Result<SchemaState, StoreError> {
    let (known, applied): (Vec<String>, Vec<String>) = with_harness(database_url, |h| {
        let known = known_versions()?;
        // In a transaction: through a pooler in transaction mode, a statement is prepared and executed on one
        // server session only inside one. Under the migration lock: diesel creates its table of applied
        // migrations if it is missing, and a `migrate` running meanwhile has created it in its own transaction,
        // uncommitted until every migration is applied; without the lock the two creations collide (a unique
        // violation once `migrate` commits) and a Worker starting beside it would fail instead of waiting.
        let applied: Vec<String> = h
            .transaction(|h| {
                refuse_other_encodings(h)?;
                h.batch_execute(&format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))?;
                h.applied_migrations()
            })?
            .iter()
            .map(ToString::to_string)
            .collect();
        Ok((known, applied))
    })
    .await?;
    Ok(compared(&known, &applied))
}

/// The versions of the migrations this build carries.
fn known_versions() -> diesel::migration::Result<Vec<String>> {
    Ok(MigrationSource::<Pg>::migrations(&MIGRATIONS)?.iter().map(|m| m.name().version().to_string()).collect())
}

/// This build's migrations (`known`) against those the database has (`applied`).
fn compared(known: &[String], applied: &[String]) -> SchemaState {
    let mut unknown: Vec<String> = applied.iter().filter(|v| !known.contains(v)).cloned().collect();
    unknown.sort();
    SchemaState {
        pending: known.iter().filter(|v| !applied.contains(v)).cloned().collect(),
        unknown,
        newest_known: known.iter().max().cloned().unwrap_or_default(),
    }
}

impl crate::PgStore {
    /// Where the schema stands, read through the store's own connections: nothing is created and no lock is
    /// taken, so it is cheap to ask now and then. A running Worker asks it to stop when a newer Worker migrates
    /// the database under it (the migrations a `migrate` applies appear together, at its commit).
    pub async fn schema_state(&self) -> Result<SchemaState, StoreError> {
        #[derive(QueryableByName)]
        struct Applied {
            #[diesel(sql_type = diesel::sql_types::Text)]
            version: String,
        }
        let applied: Vec<Applied> = self
            .read(async |conn| {
                diesel_async::RunQueryDsl::load(
                    diesel::sql_query("SELECT version FROM __diesel_schema_migrations"),
                    conn,
                )
                .await
            })
            .await?;
        let known = known_versions()
            .map_err(|e| StoreError::Migration(format!("listing this build's migrations: {e}").into()))?;
        let applied: Vec<String> = applied.into_iter().map(|a| a.version).collect();
        Ok(compared(&known, &applied))
    }
}

type Harness = AsyncConnectionWrapper<AsyncPgConnection>;

/// The only encoding of a database the store works in, as PostgreSQL names it.
const UTF8: &str = "UTF8";

/// A database whose text is not UTF-8, refused: what to tell the operator ([`encoding_refusal`]).
#[derive(Debug)]
struct OtherEncoding(String);

impl std::fmt::Display for OtherEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OtherEncoding {}

/// Refuses a database whose encoding is not UTF8, read before anything else. Another encoding takes the Worker's
/// text (file names, paths, JSON) only as far as it has room for its characters: in LATIN1 or WIN1252 (a server
/// made under a European or a Windows-1252 locale) a file named with an emoji, or in a script the
/// encoding lacks, cannot be stored, and every crawl of its library fails on it. SQL_ASCII stores any bytes
/// unchecked (another program's text may be no UTF-8, which the Worker cannot read back) and counts lengths in
/// bytes. Said at start-up, with the way out, instead of as failures item by item.
fn refuse_other_encodings(h: &mut Harness) -> diesel::migration::Result<()> {
    #[derive(QueryableByName)]
    struct Encoding {
        #[diesel(sql_type = diesel::sql_types::Text)]
        database: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        encoding: String,
    }
    let found: Encoding = diesel::sql_query(
        "SELECT datname::text AS database, pg_encoding_to_char(encoding)::text AS encoding
           FROM pg_database WHERE datname = current_database()",
    )
    .get_result(h)?;
    if found.encoding == UTF8 {
        return Ok(());
    }
    Err(Box::new(OtherEncoding(encoding_refusal(&found.database, &found.encoding))))
}

/// What the operator is told about the database `database` in `encoding`: what goes wrong, and the way out. The
/// copy is dumped to a file and restored only when the dump ended well: a byte `pg_dump` cannot give as UTF-8 (in
/// `SQL_ASCII`, or a byte `WIN1252` leaves undefined) stops it half-way, and a restore of what it wrote so far would
/// be a database without the rest of the rows, nor the indexes and triggers, that looks whole.
fn encoding_refusal(database: &str, encoding: &str) -> String {
    let why = match encoding {
        "SQL_ASCII" => {
            "SQL_ASCII stores any bytes as text unchecked (another program's text there may be no UTF-8, which the \
             Worker cannot read) and counts lengths in bytes"
        }
        _ => "it has no room for many names a library holds (a file named with an emoji, or in a script it lacks)",
    };
    format!(
        "the database \"{database}\" stores text in {encoding}: {why}. Almanac needs a database in {UTF8}: make one \
         (`createdb --encoding=UTF8 --locale=C --template=template0 almanac_utf8`); if this one holds anything, dump \
         it (`pg_dump --encoding=UTF8 --file=almanac.sql \"{database}\"`, which stops at a byte it cannot give as \
         UTF-8, naming it: mend that text and dump again) and restore it only once the dump succeeded (`psql \
         --set=ON_ERROR_STOP=1 --single-transaction --file=almanac.sql almanac_utf8`); then point database.url at \
         almanac_utf8"
    )
}

/// diesel's migration harness is synchronous: run it on a thread of its own with a small runtime of its own
/// (timers enabled, for URLs with `connect_timeout`), so it works under any runtime flavour. Its connection is
/// set up to leave nothing on a server session and prepares nothing it keeps, and `run` does its work in
/// transactions: it works through a pooler in transaction mode as directly (no setting needed).
async fn with_harness<T: Send + 'static>(
    database_url: &str,
    run: impl FnOnce(&mut Harness) -> diesel::migration::Result<T> + Send + 'static,
) -> Result<T, StoreError> {
    let target = ConnectTarget::parse(database_url)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(StoreError::Migration(format!("starting a runtime: {e}").into())));
                return;
            }
        };
        let _context = runtime.enter();
        let result = runtime
            .block_on(crate::pooler::establish_unpinned(&target))
            .map(Harness::from)
            .and_then(|mut conn| run(&mut conn).map_err(|e| harness_error(&mut conn, e)));
        let _ = tx.send(result);
    });
    rx.await.map_err(|_| StoreError::Migration("the migration thread died".into()))?
}

/// What the migration harness's error comes to, placed by asking its connection (ADR 0010): a connection that
/// no longer answers (the server shut down or restarted mid-way, the backend was terminated), or a server that
/// only reads (a standby: the harness's own table is created even to read it), is an outage, so a Worker
/// starting while the database restarts or fails over waits for it; a database in another encoding than UTF-8 is a
/// setting to fix ([`refuse_other_encodings`]); anything else is the migration's own failure.
fn harness_error(conn: &mut Harness, e: Box<dyn std::error::Error + Send + Sync>) -> StoreError {
    if let Some(refused) = e.downcast_ref::<OtherEncoding>() {
        return StoreError::Config(refused.0.clone());
    }
    let said = e.to_string();
    let lost = e.downcast_ref::<diesel::result::Error>().is_some_and(crate::error::is_outage)
        || conn.batch_execute("SELECT 1").is_err();
    let cause = Cause::with_boxed_source(said, e);
    if lost { StoreError::Unavailable(cause) } else { StoreError::Migration(cause) }
}
