//! The heads' upkeep: a store vacuums `queue_heads` after every [`CLAIMS_PER_HEADS_VACUUM`] items it claims
//! (docs/queue.md, "The store vacuums the heads it churns"; why and what it measured: ADR 0008, amendment "a head's
//! refresh reads its config once; a store vacuums the heads it churns").
//!
//! A turn runs in a task of its own, so no claim waits for it, on a connection of the shared pool taken only when
//! one is free (a claim or a catalogue write never waits behind it), outside any transaction (`VACUUM` refuses to
//! run in one), as one simple query (so through a pooler in transaction mode too). `SKIP_LOCKED`: it never waits
//! for a lock another session holds on the table (another store's vacuum, autovacuum, a migration), so it can hold
//! its connection only as long as the vacuum itself. `TRUNCATE false`: it never takes the table's exclusive lock
//! to give empty pages back (claims and refreshes would wait for it, and a standby replaying it would cancel its
//! readers). `PARALLEL 0`: for a table this small, starting workers costs more than the vacuum. A turn waits at
//! least [`TURN_SPACING`] times as long as the one before took, so that while an open transaction elsewhere keeps
//! the dead versions from being removed (each turn then scans the table for nothing) the turns thin out.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::Bool;
use diesel_async::SimpleAsyncConnection;

use crate::PgStore;

/// How many items a store claims between two vacuums of `queue_heads` it runs. docs/queue.md gives it (checked by
/// a test).
pub(crate) const CLAIMS_PER_HEADS_VACUUM: u64 = 4096;

/// A turn starts no sooner than this many times the last turn's length after that turn ended. docs/queue.md gives
/// it (checked by a test).
const TURN_SPACING: u32 = 20;

/// The heads' vacuum, as one simple query.
const VACUUM_HEADS: &str = "VACUUM (SKIP_LOCKED, PARALLEL 0, TRUNCATE false) queue_heads";

/// Whether this session's role may vacuum `queue_heads`: its owner, the database's owner or a superuser
/// (`pg_has_role` answers true for a superuser), or from PostgreSQL 17 a role with the `MAINTAIN` privilege on it.
/// Another role's `VACUUM` would only warn and do nothing.
const MAY_VACUUM: &str = "SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')
        OR CASE WHEN current_setting('server_version_num')::integer >= 170000
                THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END AS allowed
   FROM pg_class AS c, pg_database AS d
  WHERE c.oid = 'queue_heads'::regclass AND d.datname = current_database()";

/// A store's count of items claimed since its last vacuum of the heads, shared by its clones.
#[derive(Debug)]
pub(crate) struct HeadsUpkeep {
    every: u64,
    claimed: AtomicU64,
    /// A turn is running (at most one per store).
    vacuuming: AtomicBool,
    /// The role may not vacuum the table: no more turns.
    refused: AtomicBool,
    /// Whether the role may vacuum the table has been asked (once per store).
    asked: AtomicBool,
    /// A turn failed already: later failures are logged at debug only.
    failed_before: AtomicBool,
    /// No turn starts before then ([`TURN_SPACING`]).
    not_before: Mutex<Option<Instant>>,
}

impl Default for HeadsUpkeep {
    fn default() -> Self {
        Self::every(CLAIMS_PER_HEADS_VACUUM)
    }
}

impl HeadsUpkeep {
    /// A vacuum after every `claims` items claimed.
    pub(crate) fn every(claims: u64) -> Self {
        Self {
            every: claims.max(1),
            claimed: AtomicU64::new(0),
            vacuuming: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            asked: AtomicBool::new(false),
            failed_before: AtomicBool::new(false),
            not_before: Mutex::new(None),
        }
    }

    fn spaced_out(&self) -> bool {
        let not_before = self.not_before.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        not_before.is_none_or(|at| Instant::now() >= at)
    }

    fn turn_took(&self, took: Duration) {
        let mut not_before = self.not_before.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *not_before = Some(Instant::now() + took * TURN_SPACING);
    }
}

#[cfg(test)]
impl HeadsUpkeep {
    fn counted(&self) -> u64 {
        self.claimed.load(Ordering::Relaxed)
    }

    fn in_turn(&self) -> bool {
        self.vacuuming.load(Ordering::Relaxed)
    }

    fn given_up(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    fn may_start(&self) -> bool {
        !self.in_turn() && self.spaced_out()
    }
}

/// Ends a turn however its task ends (a runtime shut down drops it unfinished): the store may start the next.
struct Turn<'a>(&'a HeadsUpkeep);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.vacuuming.store(false, Ordering::Release);
    }
}

#[derive(QueryableByName)]
struct May {
    #[diesel(sql_type = Bool)]
    allowed: bool,
}

impl PgStore {
    /// Counts `items` claimed; at the count's threshold, starts a turn of the heads' vacuum in a task of its own,
    /// unless one of this store's is still running or the last one ended too recently (the count then goes on,
    /// and a later claim starts it).
    pub(crate) fn heads_claimed(&self, items: usize) {
        let upkeep = &self.heads;
        if items == 0 || upkeep.refused.load(Ordering::Relaxed) {
            return;
        }
        let claimed = upkeep.claimed.fetch_add(items as u64, Ordering::Relaxed) + items as u64;
        if claimed < upkeep.every || !upkeep.spaced_out() || upkeep.vacuuming.swap(true, Ordering::AcqRel) {
            return;
        }
        upkeep.claimed.store(0, Ordering::Relaxed);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let store = self.clone();
                runtime.spawn(async move { store.heads_turn().await });
            }
            Err(_) => upkeep.vacuuming.store(false, Ordering::Release),
        }
    }

    /// One turn: asks once whether this role may vacuum the table, then vacuums it when a connection of the
    /// shared pool is free.
    async fn heads_turn(&self) {
        let upkeep = &self.heads;
        let _turn = Turn(upkeep);
        let started = Instant::now();
        let status = self.pool.status();
        if status.available == 0 && status.size >= status.max_size {
            return;
        }
        let vacuumed = async {
            if !upkeep.asked.load(Ordering::Relaxed) {
                let may: May = self
                    .read(async |conn| {
                        use diesel_async::RunQueryDsl;
                        diesel::sql_query(MAY_VACUUM).get_result(conn).await
                    })
                    .await?;
                upkeep.asked.store(true, Ordering::Relaxed);
                if !may.allowed {
                    upkeep.refused.store(true, Ordering::Relaxed);
                    tracing::info!(
                        event = "heads_vacuum_refused",
                        "this Worker's database role may not vacuum queue_heads (it owns neither the table nor the \
                         database), so autovacuum alone keeps it; under many claims a second, make the role the \
                         table's owner for a steady claim"
                    );
                    return Ok(());
                }
            }
            let mut conn = self.conn().await?;
            conn.batch_execute(VACUUM_HEADS).await.map_err(crate::error::from_diesel)
        }
        .await;
        upkeep.turn_took(started.elapsed());
        if let Err(e) = vacuumed {
            if upkeep.failed_before.swap(true, Ordering::Relaxed) {
                tracing::debug!(event = "heads_vacuum_failed", error = %e, "a vacuum of queue_heads failed again");
            } else {
                tracing::info!(
                    event = "heads_vacuum_failed",
                    error = %e,
                    "a vacuum of queue_heads failed; the store tries again after its next claims (later failures \
                     are logged at debug)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use almanac_domain::{
        WorkKind, WorkQueue, WorkerId,
        ports::{ClaimRequest, LeaseDuration, ServedConfigs},
    };
    use almanac_testdb::TestDatabase;
    use diesel::sql_types::BigInt;
    use diesel::{QueryableByName, sql_query};
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

    use crate::PgStore;

    #[derive(QueryableByName)]
    struct Vacuums {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }

    /// The vacuums of `queue_heads` run by sessions (autovacuum's not counted).
    async fn vacuums(conn: &mut AsyncPgConnection) -> i64 {
        sql_query("SELECT vacuum_count AS n FROM pg_stat_user_tables WHERE relname = 'queue_heads'")
            .get_result::<Vacuums>(conn)
            .await
            .unwrap()
            .n
    }

    /// 40 configs with three queued items each, autovacuum off for the heads (so a vacuum counted is one of
    /// ours).
    async fn queue() -> (TestDatabase, AsyncPgConnection) {
        let db = TestDatabase::create().await;
        let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
        conn.batch_execute(
            "ALTER TABLE queue_heads SET (autovacuum_enabled = false);
             INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'ann');
             INSERT INTO storage_configs (id, user_id, root_path)
             SELECT gen_random_uuid(), (SELECT id FROM users), '/lib/' || g FROM generate_series(1, 40) g;
             INSERT INTO work_items (id, kind, storage_config_id, requested_at)
             SELECT gen_random_uuid(), 'burst_detection', c.id, now() - g * interval '1 s'
               FROM generate_series(1, 3) g CROSS JOIN storage_configs c;",
        )
        .await
        .unwrap();
        (db, conn)
    }

    fn request() -> ClaimRequest {
        ClaimRequest {
            worker_id: WorkerId::new("upkeep").unwrap(),
            served: ServedConfigs::All,
            kinds: WorkKind::ALL.to_vec(),
            lease: LeaseDuration::DEFAULT,
        }
    }

    /// Waits until `done` holds, as long as the machine's load asks for (`almanac_testdb::Deadline`).
    async fn until(mut done: impl AsyncFnMut() -> bool, what: &str) {
        let deadline = almanac_testdb::Deadline::after(Duration::from_secs(10));
        while !done().await {
            deadline.check(what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// docs/queue.md gives the threshold and the turns' spacing as they are.
    #[test]
    fn the_docs_give_the_threshold_as_it_is() {
        let n = super::CLAIMS_PER_HEADS_VACUUM;
        let written = if n >= 1000 { format!("{},{:03}", n / 1000, n % 1000) } else { n.to_string() };
        // Its lines wrapped anywhere: words compared one space apart.
        let docs = include_str!("../../../../docs/queue.md").split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            docs.contains(&format!("after every {written} items it claims (`CLAIMS_PER_HEADS_VACUUM`)")),
            "docs/queue.md should say the store vacuums the heads after every {written} items it claims"
        );
        let spacing = format!("no sooner after the last than {} times that turn's length", super::TURN_SPACING);
        assert!(docs.contains(&spacing), "docs/queue.md should say a turn starts {spacing}");
    }

    /// A store vacuums the heads once it has claimed its threshold's worth of items, counting the claims made
    /// alone and those chained after completions, and starts counting again: 8 claimed alone (under a threshold
    /// of 16) start nothing; 8 more after their completion start one vacuum; 16 more start the second.
    #[tokio::test]
    async fn a_store_vacuums_the_heads_after_every_so_many_items_it_claims() {
        let (db, mut conn) = queue().await;
        let store = PgStore::new(db.url(), 2, Duration::from_secs(10)).unwrap().vacuuming_heads_every(16);
        let request = request();
        let before = vacuums(&mut conn).await;

        let first = store.claim_many(&request, 8).await.unwrap();
        assert_eq!(first.len(), 8);
        assert_eq!(store.heads.counted(), 8, "eight claimed, counted");
        assert!(!store.heads.in_turn(), "under the threshold no vacuum starts");

        let done: Vec<_> = first.iter().map(|c| (c.fence, None)).collect();
        let next = store.complete_many_and_claim(&done, &request, 8).await.unwrap().next.unwrap();
        assert_eq!(next.len(), 8, "the claim chained after the completions claims too");
        until(async || vacuums(&mut conn).await == before + 1, "a vacuum of queue_heads after 16 items claimed").await;
        until(async || store.heads.may_start(), "the vacuum's turn ends, and the spacing after it").await;
        assert_eq!(store.heads.counted(), 0, "the count starts again");

        let done: Vec<_> = next.iter().map(|c| (c.fence, None)).collect();
        let more = store.complete_many_and_claim(&done, &request, 8).await.unwrap().next.unwrap();
        let again = store.claim_many(&request, 8).await.unwrap();
        assert_eq!(more.len() + again.len(), 16);
        until(async || vacuums(&mut conn).await == before + 2, "a second vacuum after 16 more items claimed").await;
    }

    /// A store whose role may not vacuum the heads (it owns neither the table nor the database) finds so at its
    /// first turn, stops counting, and claims on; no vacuum of the table runs.
    #[tokio::test]
    async fn a_store_whose_role_may_not_vacuum_the_heads_gives_up_vacuuming_and_claims_on() {
        let (db, mut conn) = queue().await;
        let role = format!("{}_claimer", db.name());
        conn.batch_execute(&format!(
            "CREATE ROLE {role} NOLOGIN;
             GRANT {role} TO CURRENT_USER;
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
        let url = db.url_acting_as(&role);
        let store = PgStore::new(&url, 2, Duration::from_secs(10)).unwrap().vacuuming_heads_every(8);
        let request = request();
        let before = vacuums(&mut conn).await;

        assert_eq!(store.claim_many(&request, 8).await.unwrap().len(), 8);
        until(async || store.heads.given_up(), "the store finds it may not vacuum the heads").await;
        until(async || !store.heads.in_turn(), "its turn ends").await;
        assert_eq!(store.claim_many(&request, 8).await.unwrap().len(), 8, "it claims on");
        assert!(!store.heads.in_turn(), "and starts no other turn");
        assert_eq!(vacuums(&mut conn).await, before, "no vacuum of queue_heads ran");
        conn.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}")).await.unwrap();
    }
}
