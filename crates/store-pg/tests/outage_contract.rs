//! An outage is never a failure of the work (docs/safety.md, invariant 9), on real PostgreSQL speaking English and
//! German: a backend killed mid-statement and a TCP connection dropped mid-statement answer `Unavailable` from
//! every surface of the store (the operator's reads, the catalogue port's reads and fenced writes, the queue's
//! writes). Errors are told apart by the driver's kinds and by asking the connection itself, never by the
//! server's words, which follow its `lc_messages`.
//!
//! Each statement is held mid-way by a table lock the test holds, then its backend is killed (or its TCP path
//! cut), so the error reaches the store while the statement is in flight.

mod support;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::{
    NewWorkItem, QueueError, Scope, StorageConfigId, WorkKind, WorkQueue,
    ports::{CatalogueError, CatalogueStore, Fence, LeaseDuration},
};
use almanac_store_pg::{NewStorageConfig, PgStore, StoreError};
use almanac_testdb::TestDatabase;
use diesel::sql_query;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

/// The languages the server is made to speak: its own English, and German (a Debian server takes the system
/// locale at initdb, so a German NAS has a German server).
const LANGUAGES: [&str; 2] = ["C", "de_DE.UTF-8"];

async fn raw(url: &str) -> AsyncPgConnection {
    AsyncPgConnection::establish(url).await.unwrap()
}

/// A fresh database whose sessions speak `language`, checked by the words of an error.
async fn database_speaking(language: &str) -> TestDatabase {
    let db = TestDatabase::create().await;
    raw(db.url())
        .await
        .batch_execute(&format!("ALTER DATABASE {} SET lc_messages = '{language}'", db.name()))
        .await
        .unwrap_or_else(|e| panic!("the server cannot speak {language} ({e}); `cargo xtask deps` makes the locale"));
    let said = raw(db.url()).await.batch_execute("SELECT * FROM no_such_table").await.unwrap_err().to_string();
    assert_eq!(said.contains("does not exist"), language == "C", "the server speaks {language}? it said: {said}");
    db
}

struct Setup {
    db: TestDatabase,
    config: StorageConfigId,
    fence: Fence,
}

/// A config with a crawl claimed (the fence of a running attempt).
async fn setup(language: &str) -> Setup {
    let db = database_speaking(language).await;
    let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/photos/ann") };
    let config = store.add_storage_config(&new).await.unwrap().1.id;
    store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    let request = support::claimer("w1");
    let fence = store.claim(&request).await.unwrap().expect("the crawl is claimed").fence;
    Setup { db, config, fence }
}

/// Holds every table the store's statements touch, so each of them waits mid-way.
async fn hold_the_tables(db: &TestDatabase) -> AsyncPgConnection {
    let mut holder = raw(db.url()).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE storage_configs, media_assets, work_items IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    holder
}

/// Waits until one session waits on a lock, and kills it.
async fn kill_the_waiting_backend(db: &TestDatabase) {
    assert_eq!(db.sessions_waiting_on_locks(1).await, 1, "the statement never reached the lock");
    #[derive(diesel::QueryableByName)]
    struct Killed {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let killed: Killed = sql_query(
        "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .get_result(&mut raw(db.url()).await)
    .await
    .unwrap();
    assert_eq!(killed.n, 1);
}

/// How a surface of the store answered.
#[derive(Debug)]
enum Answer {
    Outage,
    /// What it answered instead, shown by the assertions.
    Other(#[allow(dead_code)] String),
}

fn store_answer<T: std::fmt::Debug>(r: Result<T, StoreError>) -> Answer {
    match r {
        Err(StoreError::Unavailable(_)) => Answer::Outage,
        other => Answer::Other(format!("{other:?}")),
    }
}

fn catalogue_answer<T: std::fmt::Debug>(r: Result<T, CatalogueError>) -> Answer {
    match r {
        Err(CatalogueError::Unavailable(_)) => Answer::Outage,
        other => Answer::Other(format!("{other:?}")),
    }
}

fn queue_answer<T: std::fmt::Debug>(r: Result<T, QueueError>) -> Answer {
    match r {
        Err(QueueError::Unavailable(_)) => Answer::Outage,
        other => Answer::Other(format!("{other:?}")),
    }
}

/// Each surface of the store, one statement each, on `store`: a read outside a transaction (operator's and
/// catalogue's), a fenced catalogue write and a fenced queue write.
const SURFACES: [&str; 5] = ["list_storage_configs", "known_files", "record_root_identity", "heartbeat", "get"];

async fn call(store: PgStore, surface: &'static str, config: StorageConfigId, fence: Fence) -> Answer {
    match surface {
        "list_storage_configs" => store_answer(store.list_storage_configs().await),
        "known_files" => catalogue_answer(store.known_files(config, b"", None, 100).await),
        "record_root_identity" => catalogue_answer(store.record_root_identity(fence, config, true, &[]).await),
        "heartbeat" => {
            queue_answer(store.heartbeat(fence, LeaseDuration::new(Duration::from_secs(60)).unwrap(), None).await)
        }
        "get" => queue_answer(store.get(fence.id).await),
        other => unreachable!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_mid_statement_is_an_outage_in_any_language() {
    for language in LANGUAGES {
        let s = setup(language).await;
        for surface in SURFACES {
            let store = PgStore::new(s.db.url(), 2, Duration::from_secs(10)).unwrap();
            let mut holder = hold_the_tables(&s.db).await;
            let asked = tokio::spawn(call(store, surface, s.config, s.fence));
            kill_the_waiting_backend(&s.db).await;
            let answer = asked.await.unwrap();
            assert!(matches!(answer, Answer::Outage), "{language}, {surface}: {answer:?}");
            holder.batch_execute("ROLLBACK").await.unwrap();
        }
    }
}

/// A TCP proxy to the test server whose connections can all be dropped at once (both sockets closed, as when a
/// NAT, a firewall or a failing link ends them).
struct Proxy {
    port: u16,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn to(url: &str) -> Self {
        let config = tokio_postgres::Config::from_str(url).unwrap();
        let port = config.get_ports().first().copied().unwrap_or(5432);
        // The private cluster's URL names `localhost` and, in its query, the socket folder it really uses.
        let hosts = config.get_hosts();
        let unix = hosts.iter().find(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
        let host = unix.or(hosts.first()).cloned().expect("a host");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let proxy = Self { port: listener.local_addr().unwrap().port(), links: links.clone() };
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let host = host.clone();
                let link = tokio::spawn(async move {
                    match host {
                        tokio_postgres::config::Host::Unix(dir) => {
                            let path = dir.join(format!(".s.PGSQL.{port}"));
                            let mut server = tokio::net::UnixStream::connect(path).await.unwrap();
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                        tokio_postgres::config::Host::Tcp(name) => {
                            let mut server = tokio::net::TcpStream::connect((name.as_str(), port)).await.unwrap();
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    }
                });
                links.lock().unwrap().push(link.abort_handle());
            }
        });
        proxy
    }

    /// The test database's URL, through this proxy.
    fn url(&self, db: &TestDatabase) -> String {
        let config = tokio_postgres::Config::from_str(db.url()).unwrap();
        let user = config.get_user().unwrap_or("postgres");
        let password = config.get_password().map(|p| format!(":{}", String::from_utf8_lossy(p))).unwrap_or_default();
        format!("postgres://{user}{password}@127.0.0.1:{}/{}?sslmode=disable", self.port, db.name())
    }

    /// Drops every connection through the proxy: both of its sockets are closed.
    fn drop_connections(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_connection_dropped_mid_statement_is_an_outage() {
    for language in LANGUAGES {
        let s = setup(language).await;
        let proxy = Proxy::to(s.db.url()).await;
        for surface in SURFACES {
            let store = PgStore::new(&proxy.url(&s.db), 2, Duration::from_secs(10)).unwrap();
            let mut holder = hold_the_tables(&s.db).await;
            let asked = tokio::spawn(call(store, surface, s.config, s.fence));
            assert_eq!(s.db.sessions_waiting_on_locks(1).await, 1, "{surface} never reached the lock");
            proxy.drop_connections();
            let answer = asked.await.unwrap();
            assert!(matches!(answer, Answer::Outage), "{language}, {surface}: {answer:?}");
            holder.batch_execute("ROLLBACK").await.unwrap();
        }
    }
}

#[tokio::test]
async fn a_database_never_migrated_says_so_in_any_language() {
    for language in LANGUAGES {
        let db = database_speaking(language).await;
        raw(db.url()).await.batch_execute("DROP TABLE work_items CASCADE").await.unwrap();
        let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
        match store.queue_summary().await {
            Err(StoreError::Unexpected(m)) => {
                assert!(m.contains("the database is not migrated; run `almanac-worker migrate`"), "{language}: {m}")
            }
            other => panic!("{language}: {other:?}"),
        }
        // A statement that fails for another reason on a migrated database says nothing of migrating.
        let db = database_speaking(language).await;
        raw(db.url()).await.batch_execute("DROP TABLE storage_configs CASCADE").await.unwrap();
        let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
        match store.list_storage_configs().await {
            Err(StoreError::Unexpected(m)) => assert!(!m.contains("migrate"), "{language}: {m}"),
            other => panic!("{language}: {other:?}"),
        }
    }
}

/// A refused statement is asked about on its own connection (is the database migrated?); when that question is
/// refused too, on a session that still answers, the error is the statement's, not an outage (an outage would
/// send the work back for ever, uncounted).
#[tokio::test]
async fn a_refusal_whose_question_is_refused_too_is_not_an_outage() {
    let db = TestDatabase::create().await;
    // The question's function, shadowed by one that refuses: found first through the database's search path.
    raw(db.url())
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
             ALTER DATABASE {} SET search_path = public, pg_catalog;
             DROP TABLE storage_configs CASCADE;",
            db.name()
        ))
        .await
        .unwrap();
    let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
    match store.list_storage_configs().await {
        Err(StoreError::Unexpected(m)) => assert!(m.contains("storage_configs") && !m.contains("migrate"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// Refusals at login that retrying cannot cure are settings to fix, not outages (an outage sends work back
/// without counting a failure, forever): told by SQLSTATE, in any language.
#[tokio::test]
async fn a_login_the_server_refuses_is_a_setting_to_fix_not_an_outage() {
    let db = database_speaking("de_DE.UTF-8").await;
    let config = tokio_postgres::Config::from_str(db.url()).unwrap();
    let with = |user: &str, database: &str| {
        let mut url = db.url().replacen(&format!("/{}?", db.name()), &format!("/{database}?"), 1);
        url = url.replacen(&format!("{}@", config.get_user().unwrap_or("postgres")), &format!("{user}@"), 1);
        url
    };
    let user = config.get_user().unwrap_or("postgres").to_owned();
    let role = format!("{}_nologin", db.name());
    raw(db.url()).await.batch_execute(&format!("CREATE ROLE {role} NOLOGIN")).await.unwrap();
    for (url, said) in [
        (with(&user, &format!("{}_missing", db.name())), "does not exist"),
        (with(&role, db.name()), "PostgreSQL refused the login"),
    ] {
        let store = PgStore::new(&url, 1, Duration::from_secs(10)).unwrap();
        match store.list_storage_configs().await {
            Err(StoreError::Config(m)) => assert!(m.contains(said), "{url}: {m}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    raw(db.url()).await.batch_execute(&format!("DROP ROLE {role}")).await.unwrap();
}

/// A Worker that starts while the database restarts reads the schema as the server goes away: the session
/// ending under the migration harness's query is an outage (the Worker waits and tries again), not a failed
/// migration (it exited 1: the fault suite's RestartDatabase saw it). Forced here by a schema table whose read
/// ends its own session, as a shutdown would, in English and in German.
#[tokio::test]
async fn a_session_ended_under_the_schema_check_is_an_outage_not_a_failed_migration() {
    for language in LANGUAGES {
        let db = database_speaking(language).await;
        raw(db.url())
            .await
            .batch_execute(
                "ALTER TABLE __diesel_schema_migrations RENAME TO applied;
                 CREATE VIEW __diesel_schema_migrations AS
                     SELECT version, run_on FROM applied WHERE pg_terminate_backend(pg_backend_pid());",
            )
            .await
            .unwrap();
        match almanac_store_pg::schema_state(db.url()).await {
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("{language}: the session ended under the schema check: {other:?}"),
        }
        // A schema check that fails on a connection that still answers stays the migration's own failure.
        raw(db.url())
            .await
            .batch_execute(
                "DROP VIEW __diesel_schema_migrations;
                 CREATE VIEW __diesel_schema_migrations AS SELECT version, run_on FROM applied WHERE 1 / 0 = 1;",
            )
            .await
            .unwrap();
        match almanac_store_pg::schema_state(db.url()).await {
            Err(StoreError::Migration(_)) => {}
            other => panic!("{language}: a division by zero is not an outage: {other:?}"),
        }
    }
}

/// The database's disk full (a NAS whose one volume holds the photos, the proxies and PostgreSQL's data, filled
/// by phones syncing): a write the server refuses for want of space (SQLSTATE 53100, which diesel does not give
/// the store) is an outage, so the work waits for space instead of being failed, in English and in German. The
/// store asks the server whether it can write a page of a new table in the database's own tablespace
/// (`almanac_disk_refuses_writes`). Forced with the whole database moved to a tmpfs tablespace the test fills
/// (root and a server on this machine only: skipped, saying so, elsewhere); once the filler is removed the same
/// write goes through.
#[tokio::test]
async fn a_write_refused_for_a_full_disk_is_an_outage_until_space_is_freed() {
    use std::os::unix::fs::MetadataExt;
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        setting: String,
    }
    for language in LANGUAGES {
        let db = database_speaking(language).await;
        let mut maintenance = raw(&db.url().replacen(&format!("/{}", db.name()), "/postgres", 1)).await;
        let data: Setting = sql_query("SELECT current_setting('data_directory') AS setting")
            .get_result(&mut maintenance)
            .await
            .expect("the test database's role reads the server's settings (a superuser)");
        let Ok(server) = std::fs::metadata(&data.setting) else {
            eprintln!("SKIPPED: the server's data directory is not on this machine");
            return;
        };
        let mount = std::env::temp_dir().join(format!("almanac-full-disk-{}", db.name()));
        let Some(volume) = almanac_media::scratch_volume::ScratchVolume::small(&mount, 65_536, false) else { return };
        std::os::unix::fs::chown(volume.path(), Some(server.uid()), Some(server.gid())).unwrap();
        let space = format!("full_{}", db.name());
        let alone = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}' AND pid <> pg_backend_pid()",
            db.name()
        );
        let moved = |to: &str| format!("ALTER DATABASE {} SET TABLESPACE {to}", db.name());
        maintenance
            .batch_execute(&format!("CREATE TABLESPACE {space} LOCATION '{}'", volume.path().display()))
            .await
            .unwrap();
        maintenance.batch_execute(&alone).await.unwrap();
        maintenance.batch_execute(&moved(&space)).await.unwrap();
        let filler = volume.fill();

        let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
        let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
        let full = store.enqueue(&item).await;
        let freed = std::fs::remove_file(filler);
        let again = store.enqueue(&item).await;

        // The tablespace is the cluster's: the database goes back and it is dropped before anything is asserted.
        drop(store);
        maintenance.batch_execute(&alone).await.unwrap();
        maintenance.batch_execute(&moved("pg_default")).await.unwrap();
        maintenance.batch_execute(&format!("DROP TABLESPACE {space}")).await.unwrap();
        match full {
            Err(QueueError::Unavailable(m)) => assert!(m.to_string().contains("its disk is full"), "{language}: {m}"),
            other => panic!("{language}: a write refused for a full disk: {other:?}"),
        }
        freed.unwrap();
        again.unwrap_or_else(|e| panic!("{language}: with space again: {e}"));
    }
}

/// The disk probe answers for a Worker whose role may not make temporary tables (a database hardened with `REVOKE
/// TEMPORARY ON DATABASE … FROM PUBLIC`): it runs as the role that migrated (migration 000037). Before, it failed
/// there, and a full disk read as a failure of the work. A probe that cannot run at all (here: its role may not
/// call it) is said with the error it was asked about, since a full disk cannot then be told apart.
#[tokio::test]
async fn the_disk_probe_answers_for_a_role_that_may_not_make_temporary_tables() {
    #[derive(diesel::QueryableByName)]
    struct Answer {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        yes: bool,
    }
    let db = TestDatabase::create().await;
    let role = format!("{}_hardened", db.name());
    let mut admin = raw(db.url()).await;
    admin
        .batch_execute(&format!(
            "REVOKE TEMPORARY ON DATABASE {name} FROM PUBLIC;
             CREATE ROLE {role} NOLOGIN;
             GRANT {role} TO CURRENT_USER;
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};",
            name = db.name()
        ))
        .await
        .unwrap();
    let url = db.url_acting_as(&role);
    let mut worker = raw(&url).await;
    let temporary = worker.batch_execute("CREATE TEMPORARY TABLE t (x integer)").await;
    let probe = sql_query("SELECT almanac_disk_refuses_writes() AS yes").get_result::<Answer>(&mut worker).await;
    admin
        .batch_execute(&format!(
            "ALTER TABLE storage_configs RENAME TO configs_kept;
             CREATE VIEW storage_configs AS SELECT * FROM configs_kept WHERE 1 / 0 = 1;
             GRANT SELECT ON storage_configs TO {role};
             REVOKE EXECUTE ON FUNCTION almanac_disk_refuses_writes() FROM PUBLIC;"
        ))
        .await
        .unwrap();
    let store = PgStore::new(&url, 1, Duration::from_secs(10)).unwrap();
    let unplaced = store.list_storage_configs().await;
    // The role is the cluster's, not the test database's: dropped before anything is asserted.
    drop((store, worker));
    admin.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}")).await.unwrap();

    assert!(temporary.is_err(), "the role may not make temporary tables");
    assert!(!probe.expect("the probe answers for the role").yes, "this server's disk is not full");
    match unplaced {
        Err(StoreError::Unexpected(m)) => assert!(m.contains("whether its disk is full failed too"), "{m}"),
        other => panic!("an error the kinds cannot place, with a probe that cannot run: {other:?}"),
    }
}
