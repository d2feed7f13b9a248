//! The Worker's wiring against what the guide says of it.

use super::*;

/// The guide's "Sizing" section: its table of pools (name, connections) and the line that adds them up.
fn sizing() -> (Vec<(String, String)>, String) {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"))
        .expect("docs/operations.md");
    let section: Vec<&str> = guide.lines().skip_while(|l| !l.starts_with("### Sizing")).skip(1).collect();
    let rows = section
        .iter()
        .skip_while(|l| !l.starts_with("| pool |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].to_owned(), cells[2].to_owned())
        })
        .collect();
    let total = section.iter().find(|l| l.starts_with("so at most")).expect("the sum of the pools").to_string();
    (rows, total)
}

/// The guide says how soon a running Worker notices a schema a newer one migrated: the period it reads it at.
#[test]
fn the_guide_states_how_often_a_running_worker_reads_the_schema() {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"))
        .expect("docs/operations.md");
    let said = format!("notices within {} seconds", SCHEMA_CHECK_EVERY.as_secs());
    assert!(guide.contains(&said), "docs/operations.md, \"Upgrading\", should say {said:?}");
}

/// The number after the last `+ ` of a cell, or the whole cell as a number.
fn added(cell: &str) -> usize {
    let tail = cell.rsplit("+ ").next().unwrap_or(cell);
    tail.trim().parse().unwrap_or_else(|_| panic!("no number in {cell:?}"))
}

#[test]
fn the_guide_states_the_connections_a_worker_opens() {
    let (rows, total) = sizing();
    let row = |name: &str| {
        rows.iter().find(|(pool, _)| pool == name).map(|(_, c)| c.as_str()).unwrap_or_else(|| panic!("no row {name}"))
    };
    let defaults = Settings::default();
    assert_eq!(row("shared"), format!("`database.max_connections` ({})", defaults.database.max_connections));
    let spare = added(row("reserved"));
    assert!(row("reserved").starts_with("`worker.slots` + "), "{}", row("reserved"));
    for slots in [1, 2, 8, 256] {
        assert_eq!(ExecutorConfig::reserved_connections(slots), slots + spare, "reserved for {slots} slots");
    }
    for (pool, connections) in FIXED_POOLS {
        assert_eq!(added(row(pool)), connections, "{pool}");
    }
    assert_eq!(rows.len(), 5, "every pool is in the table and the sum: {rows:?}");

    // "so at most `database.max_connections + worker.slots + N` a Worker: M with the defaults."
    let (formula, rest) = total.split_once("` a Worker: ").expect("the sum's formula");
    let beyond_slots = added(formula);
    let with_defaults: usize = rest.split_whitespace().next().unwrap().parse().expect("the defaults' sum");
    for slots in [1, 4, 256] {
        let mut s = Settings::default();
        s.worker.slots = slots;
        assert_eq!(most_connections(&s), s.database.max_connections + slots + beyond_slots, "{total}");
    }
    assert_eq!(most_connections(&defaults), with_defaults, "{total}");
}

const URL: &str = "postgres://ann:hunter2@db.example/almanac";
/// A database URL nothing answers at (port 1).
const NOBODY: &str = "postgres://nobody@127.0.0.1:1/none";

/// [`patiently`] over a read that answers `error` `failures` times, then its attempt's number; and when (on the
/// paused clock) each attempt was made.
async fn tries(failures: u32, error: fn() -> StoreError) -> (Result<u32, Failure>, Vec<Duration>) {
    let (start, at) = (tokio::time::Instant::now(), std::cell::RefCell::new(Vec::new()));
    let answer = patiently(URL, || {
        at.borrow_mut().push(start.elapsed());
        let attempt = at.borrow().len() as u32;
        async move { if attempt <= failures { Err(error()) } else { Ok(attempt) } }
    })
    .await;
    (answer, at.into_inner())
}

fn starting() -> StoreError {
    StoreError::Unavailable(almanac_domain::Cause::new("the database system is starting up"))
}

#[tokio::test(start_paused = true)]
async fn a_database_still_starting_is_asked_again_with_backoff_and_given_up_after_the_last_attempt() {
    let seconds = |s: &[f64]| s.iter().map(|s| Duration::from_secs_f64(*s)).collect::<Vec<_>>();
    let (answer, at) = tries(0, starting).await;
    assert_eq!((answer.unwrap(), at), (1, seconds(&[0.0])));
    let (answer, at) = tries(CONNECT_ATTEMPTS - 1, starting).await;
    assert_eq!((answer.unwrap(), at), (CONNECT_ATTEMPTS, seconds(&[0.0, 0.5, 1.5, 3.5, 7.5])));
    let (answer, at) = tries(CONNECT_ATTEMPTS, starting).await;
    let failure = answer.unwrap_err();
    assert_eq!(at, seconds(&[0.0, 0.5, 1.5, 3.5, 7.5]), "no attempt after the last");
    assert_eq!(failure.exit(), Exit::Unavailable);
    let said = failure.to_string();
    assert!(said.contains("after 5 attempt(s)") && said.contains("starting up") && !said.contains("hunter2"), "{said}");
}

#[tokio::test(start_paused = true)]
async fn a_setting_to_fix_is_said_at_once() {
    let (answer, at) = tries(1, || StoreError::Config("sslmode=sometimes is not a mode".into())).await;
    let said = answer.unwrap_err().to_string();
    assert_eq!(at, [Duration::ZERO]);
    assert!(said.starts_with("database.url (") && said.contains("sslmode=sometimes") && !said.contains("hunter2"));
}

#[tokio::test]
async fn the_worker_is_woken_when_work_is_enqueued_unless_only_a_transaction_pooler_is_there_to_listen_on() {
    use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue};
    let db = almanac_testdb::TestDatabase::create().await;
    let store = PgStore::connect(db.url()).unwrap();
    let mut through_pooler = Settings::default();
    through_pooler.database.pooler_mode = "transaction".into();
    let mut with_direct_url = through_pooler.clone();
    with_direct_url.database.listen_url = Some(db.url().to_owned());
    for settings in [Settings::default(), with_direct_url] {
        let (wake, stop) = (Arc::new(tokio::sync::Notify::new()), CancellationToken::new());
        // The pooler's URL is not one a LISTEN can use: only a direct URL wakes it.
        let url = if settings.database.listen_url.is_some() { NOBODY } else { db.url() };
        let listener = wake_ups(&settings, url, wake.clone(), &stop).expect("a listener");
        // It wakes the executor once as its LISTEN is in place (work may have come meanwhile), then at each enqueue.
        tokio::time::timeout(Duration::from_secs(60), wake.notified()).await.expect("listening");
        store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), wake.notified()).await.expect("woken by the enqueue");
        stop.cancel();
        listener.await.unwrap();
    }
    let (wake, stop) = (Arc::new(tokio::sync::Notify::new()), CancellationToken::new());
    assert!(wake_ups(&through_pooler, db.url(), wake, &stop).is_none(), "polls only");
}

#[tokio::test]
async fn the_tls_in_use_is_said_in_words() {
    let db = almanac_testdb::TestDatabase::create().await;
    assert_eq!(tls(&PgStore::connect(db.url()).unwrap()).await, "none");
    let nobody = PgStore::connect(NOBODY).unwrap();
    assert!(tls(&nobody).await.starts_with("unknown ("));
}

#[tokio::test]
async fn a_new_database_is_migrated_only_when_asked_and_an_unmigrated_one_is_refused_naming_the_way_out() {
    let db = almanac_testdb::TestDatabase::create_empty().await;
    let refused = prepare_schema(db.url(), false).await.unwrap_err();
    assert_eq!(refused.exit(), Exit::Usage);
    assert!(refused.to_string().contains("run `almanac-worker migrate`, or start with --migrate"), "{refused}");
    assert!(!almanac_store_pg::schema_state(db.url()).await.unwrap().pending.is_empty(), "nothing was applied");
    prepare_schema(db.url(), true).await.unwrap();
    assert_eq!(almanac_store_pg::schema_state(db.url()).await.unwrap().pending, Vec::<String>::new());
    prepare_schema(db.url(), false).await.unwrap();
}

#[tokio::test]
async fn a_database_not_in_utf8_is_refused_at_start_with_or_without_migrating() {
    let db = almanac_testdb::TestDatabase::create_empty_in("WIN1252").await;
    for migrate in [false, true] {
        let refused = prepare_schema(db.url(), migrate).await.unwrap_err();
        assert_eq!(refused.exit(), Exit::Usage, "a setting to fix, not an outage to wait out: {refused}");
        assert!(refused.to_string().contains("stores text in WIN1252"), "{refused}");
        assert!(refused.to_string().contains("database.url"), "{refused}");
    }
}
