//! Contract tests of the watch lease (ADR 0014) on real PostgreSQL: one Worker watches a config at a time, whoever
//! asks and however many ask at once; the holder renews, another takes over only once the lease ran out by the
//! database clock; a release frees the watch; the targets are the active configs a Worker serves.

mod support;

use support::{config, setup};

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::ports::{
    DatabaseClock, ServedConfigs, WatchChoice, WatchHolder, WatchMode, WatchReport, WatchState, WatchStore,
};
use almanac_domain::{StorageConfigId, WorkerId};
use almanac_store_pg::{NewStorageConfig, PgStore};
use diesel::sql_query;
use diesel::sql_types::{BigInt, Text, Uuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use tokio::sync::Barrier;

/// A Worker process named `name` (each call another process, with a token of its own).
fn worker(name: &str) -> WatchHolder {
    WatchHolder::new(WorkerId::new(name).unwrap())
}

fn report(mode: WatchMode, pending_files: u64) -> WatchReport {
    WatchReport { mode, last_change_at: None, pending_files, note: None }
}

const MINUTE: Duration = Duration::from_secs(60);

async fn state(store: &PgStore, config: StorageConfigId) -> WatchState {
    store.watch_states().await.unwrap().into_iter().find(|s| s.config == config).expect("every config has a state")
}

async fn holder(store: &PgStore, config: StorageConfigId) -> Option<String> {
    state(store, config).await.held.map(|h| h.worker_id.to_string())
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Two Workers, each with connections of its own, ask for one config's watch at the same moment: exactly one
/// holds it. The overlap is forced: a third session holds a lock on the table that both statements wait behind
/// until both wait, then lets them go together. Half the rounds start with no row (both insert), half with a
/// third Worker's expired lease (both update).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_workers_asking_at_once_holds_a_config() {
    let (db, store) = setup().await;
    let stores = [store.clone(), PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap()];
    let mut raw = AsyncPgConnection::establish(db.url()).await.unwrap();
    for round in 0..20 {
        let config = config(&store, "ann", &format!("/photos/r{round}")).await.id;
        if round % 2 == 1 {
            sql_query(
                "INSERT INTO config_watches (storage_config_id, worker_id, since, lease_expires_at, mode)
                 VALUES ($1, 'gone', now() - interval '1 hour', now() - interval '1 second', 'events')",
            )
            .bind::<Uuid, _>(config.as_uuid())
            .execute(&mut raw)
            .await
            .unwrap();
        }
        raw.batch_execute("BEGIN; LOCK TABLE config_watches IN SHARE ROW EXCLUSIVE MODE").await.unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let asks: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (s, barrier) = (s.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    s.hold_watch(config, &worker(&format!("w{i}")), MINUTE, &report(WatchMode::Events, 0)).await
                })
            })
            .collect();
        assert_eq!(db.sessions_waiting_on_locks(2).await, 2, "round {round}: both wait behind the lock");
        raw.batch_execute("COMMIT").await.unwrap();
        let mut held = Vec::new();
        for (i, ask) in asks.into_iter().enumerate() {
            if ask.await.unwrap().unwrap() {
                held.push(format!("w{i}"));
            }
        }
        assert_eq!(held.len(), 1, "round {round}: holders {held:?}");
        assert_eq!(holder(&store, config).await.as_deref(), Some(held[0].as_str()), "round {round}");
    }
}

/// The holder renews (its `since` kept, its lease moved, its report stored); another Worker is refused until
/// the lease ran out by the database clock, and takes over then, with a `since` of its own.
#[tokio::test]
async fn the_holder_renews_and_another_takes_over_only_after_its_lease_ran_out() {
    let (db, store) = setup().await;
    let other = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
    let config = config(&store, "ann", "/photos/ann").await.id;
    let (a, b) = (worker("a"), worker("b"));
    assert!(store.hold_watch(config, &a, MINUTE, &report(WatchMode::Events, 0)).await.unwrap());
    let first = state(&store, config).await.held.expect("a holds it");
    assert_eq!(&first.worker_id, a.worker());
    assert!(!other.hold_watch(config, &b, MINUTE, &report(WatchMode::Polling, 0)).await.unwrap());

    let seen = store.db_now().await.unwrap();
    let renewed = WatchReport {
        mode: WatchMode::Polling,
        last_change_at: Some(seen),
        pending_files: 7,
        note: Some("the event queue overflowed".into()),
    };
    let lease = Duration::from_millis(1500);
    assert!(store.hold_watch(config, &a, lease, &renewed).await.unwrap());
    let second = state(&store, config).await.held.expect("a still holds it");
    assert_eq!((&second.worker_id, second.since), (a.worker(), first.since), "a renewal keeps since");
    assert_eq!(second.report, renewed);
    assert!(second.lease_expires_at < first.lease_expires_at, "the lease is the one asked for last");
    let expires = second.lease_expires_at;

    // Until the lease runs out b is refused; then b takes the watch. A refusal means the statement ran before the
    // expiry, so the clock read before it was earlier still; a take means it ran after, so the clock read after
    // it is later.
    loop {
        let before = store.db_now().await.unwrap();
        let took = other.hold_watch(config, &b, MINUTE, &report(WatchMode::Events, 0)).await.unwrap();
        let after = store.db_now().await.unwrap();
        if took {
            assert!(after >= expires, "b took the watch at {after} before a's lease ran out at {expires}");
            break;
        }
        assert!(before < expires, "b was refused at {before} after a's lease ran out at {expires}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let third = state(&store, config).await.held.expect("b holds it");
    assert_eq!(&third.worker_id, b.worker());
    assert!(third.since > first.since, "a new holder has a since of its own");
    assert_eq!(third.report, report(WatchMode::Events, 0));
    assert!(!store.hold_watch(config, &a, MINUTE, &renewed).await.unwrap(), "a lost it");
}

/// A lease that ran out is no holder in the states, before anyone takes the watch over.
#[tokio::test]
async fn an_expired_watch_shows_no_holder() {
    let (db, store) = setup().await;
    let config = config(&store, "ann", "/photos/ann").await.id;
    assert!(store.hold_watch(config, &worker("a"), MINUTE, &report(WatchMode::Events, 3)).await.unwrap());
    assert_eq!(holder(&store, config).await.as_deref(), Some("a"));
    let mut raw = AsyncPgConnection::establish(db.url()).await.unwrap();
    raw.batch_execute("UPDATE config_watches SET lease_expires_at = now() - interval '1 second'").await.unwrap();
    assert_eq!(state(&store, config).await, WatchState { config, choice: WatchChoice::Auto, held: None });
}

/// A release frees the watch at once; a release by a Worker that does not hold it changes nothing.
#[tokio::test]
async fn a_release_frees_the_watch_and_only_the_holder_s_counts() {
    let (_db, store) = setup().await;
    let config = config(&store, "ann", "/photos/ann").await.id;
    let (a, b) = (worker("a"), worker("b"));
    assert!(store.hold_watch(config, &a, MINUTE, &report(WatchMode::Events, 0)).await.unwrap());
    store.release_watch(config, &b).await.unwrap();
    assert_eq!(holder(&store, config).await.as_deref(), Some("a"), "b held nothing to release");
    store.release_watch(config, &a).await.unwrap();
    assert_eq!(holder(&store, config).await, None);
    assert!(store.hold_watch(config, &b, MINUTE, &report(WatchMode::Events, 0)).await.unwrap(), "free at once");
    store.release_watch(config, &a).await.unwrap();
    assert_eq!(holder(&store, config).await.as_deref(), Some("b"));
}

/// Two Workers given the same Worker id (two containers with one host name) are two holders: the second is
/// refused while the first holds the watch, cannot give it up, and takes it once it is free.
#[tokio::test]
async fn two_workers_with_one_id_are_two_holders() {
    let (db, store) = setup().await;
    let other = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap();
    let config = config(&store, "ann", "/photos/ann").await.id;
    let (first, second) = (worker("almanac-1"), worker("almanac-1"));
    assert_eq!(first.worker(), second.worker());
    assert!(store.hold_watch(config, &first, MINUTE, &report(WatchMode::Events, 0)).await.unwrap());
    assert!(!other.hold_watch(config, &second, MINUTE, &report(WatchMode::Polling, 0)).await.unwrap());
    assert_eq!(state(&store, config).await.held.unwrap().report.mode, WatchMode::Events, "the first's report");
    other.release_watch(config, &second).await.unwrap();
    assert!(store.hold_watch(config, &first, MINUTE, &report(WatchMode::Events, 0)).await.unwrap(), "still held");
    store.release_watch(config, &first).await.unwrap();
    assert!(other.hold_watch(config, &second, MINUTE, &report(WatchMode::Polling, 0)).await.unwrap());
}

/// The statement a Worker built before migration 000025 takes and renews a watch with: by its Worker id, writing
/// no holder token.
const OLDER_WORKERS_HOLD: &str = "
INSERT INTO config_watches AS w
       (storage_config_id, worker_id, since, lease_expires_at, mode, last_change_at, pending_files, note)
SELECT c.id, $2, now(), now() + interval '60 seconds', 'events', NULL, 0, NULL
  FROM storage_configs c WHERE c.id = $1
    ON CONFLICT (storage_config_id) DO UPDATE
   SET worker_id = EXCLUDED.worker_id,
       since = CASE WHEN w.worker_id = EXCLUDED.worker_id THEN w.since ELSE EXCLUDED.since END,
       lease_expires_at = EXCLUDED.lease_expires_at
 WHERE w.worker_id = EXCLUDED.worker_id OR w.lease_expires_at <= now()";

/// During an upgrade, an older Worker takes a watch whose lease ran out by its id, writing no token: the newer
/// Worker it took it from cannot renew it by its old token, and a watch an older Worker inserts has a token too.
#[tokio::test]
async fn a_watch_an_older_worker_takes_over_is_not_renewed_by_the_holder_it_was_taken_from() {
    let (db, store) = setup().await;
    let config = config(&store, "ann", "/photos/ann").await.id;
    let mut raw = AsyncPgConnection::establish(db.url()).await.unwrap();
    let newer = worker("newer");
    assert!(store.hold_watch(config, &newer, MINUTE, &report(WatchMode::Events, 0)).await.unwrap());
    raw.batch_execute("UPDATE config_watches SET lease_expires_at = now() - interval '1 second'").await.unwrap();
    let taken = sql_query(OLDER_WORKERS_HOLD)
        .bind::<Uuid, _>(config.as_uuid())
        .bind::<Text, _>("older")
        .execute(&mut raw)
        .await
        .unwrap();
    assert_eq!(taken, 1, "the older Worker took the watch");
    assert!(!store.hold_watch(config, &newer, MINUTE, &report(WatchMode::Events, 0)).await.unwrap());
    assert_eq!(holder(&store, config).await.as_deref(), Some("older"));

    let other = config_of(&store, "bob").await;
    sql_query(OLDER_WORKERS_HOLD)
        .bind::<Uuid, _>(other.as_uuid())
        .bind::<Text, _>("older")
        .execute(&mut raw)
        .await
        .unwrap();
    assert!(
        !store.hold_watch(other, &newer, MINUTE, &report(WatchMode::Events, 0)).await.unwrap(),
        "a watch an older Worker inserts has a token of its own"
    );
}

async fn config_of(store: &PgStore, user: &str) -> StorageConfigId {
    config(store, user, &format!("/photos/{user}")).await.id
}

/// The targets are the active configs, with their roots and choices; a per-user Worker's are its user's.
#[tokio::test]
async fn targets_are_the_active_configs_a_worker_serves() {
    let (db, store) = setup().await;
    let ann = store
        .add_storage_config(&NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/p/ann") })
        .await
        .unwrap();
    let bob = config(&store, "bob", "/p/bob").await;
    let off = config(&store, "ann", "/p/ann-old").await;
    store.set_storage_config_active(off.id, false).await.unwrap();
    let mut raw = AsyncPgConnection::establish(db.url()).await.unwrap();
    sql_query("UPDATE storage_configs SET watch = 'polling' WHERE id = $1")
        .bind::<Uuid, _>(bob.id.as_uuid())
        .execute(&mut raw)
        .await
        .unwrap();

    let all = store.watch_targets(ServedConfigs::All).await.unwrap();
    let seen: Vec<_> = all.iter().map(|t| (t.config, t.root.clone(), t.choice)).collect();
    assert_eq!(
        seen,
        [
            (ann.1.id, PathBuf::from("/p/ann"), WatchChoice::Auto),
            (bob.id, PathBuf::from("/p/bob"), WatchChoice::Polling)
        ],
        "the deactivated config is no target"
    );
    let anns = store.watch_targets(ServedConfigs::User(ann.0.id)).await.unwrap();
    assert_eq!(anns.iter().map(|t| t.config).collect::<Vec<_>>(), [ann.1.id]);
    let bobs = store.watch_targets(ServedConfigs::User(bob.user_id)).await.unwrap();
    assert_eq!(bobs.iter().map(|t| t.config).collect::<Vec<_>>(), [bob.id]);
    // Every config has a state, the inactive one too.
    let states: BTreeSet<_> = store.watch_states().await.unwrap().into_iter().map(|s| s.config).collect();
    assert_eq!(states, BTreeSet::from([ann.1.id, bob.id, off.id]));
}

/// Removing a config removes its watch (ON DELETE CASCADE), and a removed config's watch cannot be taken.
#[tokio::test]
async fn a_removed_config_takes_its_watch_with_it() {
    let (db, store) = setup().await;
    let config = config(&store, "ann", "/photos/ann").await.id;
    assert!(store.hold_watch(config, &worker("a"), MINUTE, &report(WatchMode::Polling, 0)).await.unwrap());
    store.set_storage_config_active(config, false).await.unwrap();
    store.remove_storage_config(config).await.unwrap();
    let mut raw = AsyncPgConnection::establish(db.url()).await.unwrap();
    let rows: Count = sql_query("SELECT count(*) AS n FROM config_watches").get_result(&mut raw).await.unwrap();
    assert_eq!(rows.n, 0);
    assert!(!store.hold_watch(config, &worker("a"), MINUTE, &report(WatchMode::Polling, 0)).await.unwrap());
    assert!(store.watch_states().await.unwrap().is_empty());
}

/// The database's lists of choices and modes are the domain's (`WatchChoice::ALL`, `WatchMode::ALL`), and
/// every one of them reads back.
#[tokio::test]
async fn the_database_s_watch_lists_are_the_domain_s() {
    let (db, store) = setup().await;
    let mut raw = AsyncPgConnection::establish(db.url()).await.unwrap();
    let constraints =
        support::constraint_lists(&mut raw, &["ck_config_watches_mode", "ck_storage_configs_watch"]).await;
    assert_eq!(constraints.len(), 2, "{:?}", constraints.iter().map(|c| &c.0).collect::<Vec<_>>());
    assert_eq!(constraints[0].1, WatchMode::ALL.iter().map(|m| m.as_str().to_owned()).collect());
    assert_eq!(constraints[1].1, WatchChoice::ALL.iter().map(|c| c.as_str().to_owned()).collect());

    let config = config(&store, "ann", "/photos/ann").await.id;
    for choice in WatchChoice::ALL {
        sql_query("UPDATE storage_configs SET watch = $1")
            .bind::<Text, _>(choice.as_str())
            .execute(&mut raw)
            .await
            .unwrap();
        assert_eq!(state(&store, config).await.choice, choice);
    }
    let a = worker("a");
    for mode in WatchMode::ALL {
        assert!(store.hold_watch(config, &a, MINUTE, &report(mode, 1)).await.unwrap());
        assert_eq!(state(&store, config).await.held.unwrap().report.mode, mode);
    }
    let refused = sql_query("UPDATE storage_configs SET watch = 'inotify'").execute(&mut raw).await;
    assert!(refused.is_err(), "an unknown choice is refused");
}
