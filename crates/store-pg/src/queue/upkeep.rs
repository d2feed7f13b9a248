//! The heads' upkeep (ADR 0008, amendment "a store vacuums the heads it churns"): a store vacuums `queue_heads`
//! after every [`CLAIMS_PER_HEADS_VACUUM`] items it claims.
//!
//! Every claim and every completion writes a new version of each head it touches (the claim marks it running,
//! the completion's refresh gives it its next oldest item), and the old version's entry stays in the heads'
//! indexes until a vacuum removes it. The claim walks `ix_queue_heads_claimable` from its oldest entries, which
//! are exactly those left dead by the claims before it: PostgreSQL skips an entry it has marked dead without
//! reading its row, but still reads every page of them, and only a vacuum takes the pages out. Autovacuum visits a
//! database once a minute at most (`autovacuum_naptime`), and its workers may be busy with `work_items` for
//! longer: with 8 claimers back to back the claim's walk grew from some 70 buffers to 1,553 in 50 s, and the
//! claims per second fell by half. The table holds one row per config, so its vacuum is short (15 ms with 10,000
//! configs after half a second of claims back to back, run beside them), and it is run in a task of its own, on a
//! connection of the shared pool, so no claim waits for it.
//!
//! Each store counts its own claims, so several Workers vacuum as often in all as one Worker claiming as much.
//! A store skips its turn while another session vacuums the table (`pg_stat_progress_vacuum`), and gives up for
//! good, once, when its role may not vacuum it (not the owner of the table or of the database): autovacuum then
//! keeps it alone (event `heads_vacuum_refused`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use diesel::QueryableByName;
use diesel::sql_types::Bool;
use diesel_async::SimpleAsyncConnection;

use crate::PgStore;

/// How many items a store claims between two vacuums of `queue_heads` it runs: about two vacuums a second in all
/// with 8 claimers back to back on two cores, some 3% of one core. docs/queue.md gives it (checked by a test).
pub(crate) const CLAIMS_PER_HEADS_VACUUM: u64 = 4096;

/// Whether this session may vacuum `queue_heads`, and whether a vacuum of it is running now. PostgreSQL 15 lets
/// the table's owner, the database's owner and a superuser vacuum a table (`pg_has_role` answers true for a
/// superuser); another role's `VACUUM` would only warn and do nothing.
const MAY_VACUUM: &str = "SELECT (pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')) AS allowed,
        EXISTS (SELECT 1 FROM pg_stat_progress_vacuum AS p WHERE p.relid = c.oid) AS in_progress
   FROM pg_class AS c, pg_database AS d
  WHERE c.oid = 'queue_heads'::regclass AND d.datname = current_database()";

/// A store's count of items claimed since its last vacuum of the heads, shared by its clones.
#[derive(Debug)]
pub(crate) struct HeadsUpkeep {
    every: u64,
    claimed: AtomicU64,
    vacuuming: AtomicBool,
    refused: AtomicBool,
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
        }
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
}

#[derive(QueryableByName)]
struct May {
    #[diesel(sql_type = Bool)]
    allowed: bool,
    #[diesel(sql_type = Bool)]
    in_progress: bool,
}

/// How a turn of the upkeep ended.
enum Turn {
    Vacuumed,
    /// Another session was vacuuming the table.
    Skipped,
    /// This store's role may not vacuum it.
    Refused,
}

impl PgStore {
    /// Counts `items` claimed; at the count's threshold, starts a vacuum of `queue_heads` in a task of its own,
    /// unless one of this store's is still running (the count then goes on, and the next claim starts it).
    pub(crate) fn heads_claimed(&self, items: usize) {
        let upkeep = &self.heads;
        if items == 0 || upkeep.refused.load(Ordering::Relaxed) {
            return;
        }
        let claimed = upkeep.claimed.fetch_add(items as u64, Ordering::Relaxed) + items as u64;
        if claimed < upkeep.every || upkeep.vacuuming.swap(true, Ordering::AcqRel) {
            return;
        }
        upkeep.claimed.store(0, Ordering::Relaxed);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let store = self.clone();
                runtime.spawn(async move {
                    let turn = store.vacuum_heads().await;
                    store.heads_vacuum_ended(turn);
                });
            }
            Err(_) => upkeep.vacuuming.store(false, Ordering::Release),
        }
    }

    /// One turn: `VACUUM queue_heads` on a connection of the shared pool, outside any transaction (as `VACUUM`
    /// must run, through a pooler too), unless another session is vacuuming it or this role may not. Without
    /// parallel workers: for a table this small, starting them cost more than the vacuum (40 ms a turn with two
    /// against 15 ms without, 10,000 configs), and the claim's walk read five times the buffers while they ran.
    async fn vacuum_heads(&self) -> Result<Turn, crate::StoreError> {
        // Here only: its `load` would otherwise shadow the atomics' own.
        use diesel_async::RunQueryDsl;
        let mut conn = self.conn().await?;
        let may: May = diesel::sql_query(MAY_VACUUM).get_result(&mut *conn).await.map_err(crate::error::from_diesel)?;
        if !may.allowed {
            return Ok(Turn::Refused);
        }
        if may.in_progress {
            return Ok(Turn::Skipped);
        }
        conn.batch_execute("VACUUM (PARALLEL 0) queue_heads").await.map_err(crate::error::from_diesel)?;
        Ok(Turn::Vacuumed)
    }

    fn heads_vacuum_ended(&self, turn: Result<Turn, crate::StoreError>) {
        let upkeep = &self.heads;
        match turn {
            Ok(Turn::Vacuumed | Turn::Skipped) => {}
            Ok(Turn::Refused) => {
                if !upkeep.refused.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        event = "heads_vacuum_refused",
                        "this Worker's database role may not vacuum queue_heads (it owns neither the table nor the \
                         database), so autovacuum alone keeps it; under many claims a second, grant the role \
                         ownership of the table for a steady claim"
                    );
                }
            }
            Err(e) => tracing::debug!(
                event = "heads_vacuum_failed",
                error = %e,
                "a vacuum of queue_heads failed; the next turn tries again"
            ),
        }
        upkeep.vacuuming.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;
    use std::time::{Duration, Instant};

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

    /// Waits (at most a minute: the machine may be busy) until `done` holds.
    async fn until(mut done: impl AsyncFnMut() -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done().await {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// docs/queue.md gives the threshold as it is.
    #[test]
    fn the_docs_give_the_threshold_as_it_is() {
        let n = super::CLAIMS_PER_HEADS_VACUUM;
        let written = if n >= 1000 { format!("{},{:03}", n / 1000, n % 1000) } else { n.to_string() };
        let docs = include_str!("../../../../docs/queue.md");
        assert!(
            docs.contains(&format!("after every {written} items it claims (`CLAIMS_PER_HEADS_VACUUM`)")),
            "docs/queue.md should say the store vacuums the heads after every {written} items it claims"
        );
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
        until(async || !store.heads.in_turn(), "the vacuum's turn ends").await;
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
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
        let config = tokio_postgres::Config::from_str(db.url()).unwrap();
        let url = db.url().replacen(&format!("{}@", config.get_user().unwrap_or("postgres")), &format!("{role}@"), 1);
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
