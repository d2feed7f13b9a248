//! A primary and a synchronous streaming standby, made with the server's own tools, for failover tests.
//!
//! The primary is a [`Cluster`] of its own (`initdb`) listening on 127.0.0.1 at a free port, with
//! `synchronous_commit = on` and the standby named in `synchronous_standby_names`: a commit is acknowledged only
//! once the standby has flushed its WAL. The standby is `pg_basebackup -R -X stream` of it (which writes
//! `standby.signal` and `primary_conninfo`), started on a second free port. [`StandbyPair::create`] returns once
//! the primary reports the standby as `sync` in `pg_stat_replication`. A failover is
//! [`StandbyPair::kill_primary`] (`pg_ctl stop -m immediate`) and [`StandbyPair::promote`] (`pg_ctl promote`).
//! Clients are given [`StandbyPair::url`]: both hosts and `target_session_attrs=read-write`, so a connection
//! goes to whichever one takes writes. Both servers are stopped and their folder removed when the pair is
//! dropped; [`StandbyPair::stop_leftover`] stops the servers of a pair whose process died before that.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cluster::{free_port, postgres_uid, running_as_root};
use crate::{Cluster, ClusterError, Deadline};

/// The standby's name on the primary (`application_name` of its WAL receiver, `synchronous_standby_names`).
pub const STANDBY_NAME: &str = "almanac_standby";

/// How the standby replicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// A commit is acknowledged once the standby has flushed it (`synchronous_standby_names` names it).
    Synchronous,
    /// A commit is acknowledged at once; the standby follows when it can (streaming replication's default).
    Asynchronous,
}

/// A primary and its standby, each on a port of its own on 127.0.0.1.
#[derive(Debug)]
pub struct StandbyPair {
    dir: PathBuf,
    primary: Cluster,
    standby: Cluster,
    ports: [u16; 2],
}

impl StandbyPair {
    /// Creates both servers under `dir` (`dir/primary`, `dir/standby`; whatever was there is removed), starts
    /// them, and waits until the standby replicates synchronously.
    pub fn create(dir: PathBuf) -> Result<Self, ClusterError> {
        Self::create_with(dir, Replication::Synchronous)
    }

    /// As [`StandbyPair::create`], the standby replicating as `replication` says.
    pub fn create_with(dir: PathBuf, replication: Replication) -> Result<Self, ClusterError> {
        Self::stop_leftover(&dir);
        let _ = fs::remove_dir_all(&dir);
        let ports = [free_port()?, free_port()?];
        let mut primary =
            Cluster::at(dir.join("primary"))?.listening_on_tcp(ports[0]).with_setting("synchronous_commit", "on");
        if replication == Replication::Synchronous {
            primary = primary.with_setting("synchronous_standby_names", STANDBY_NAME);
        }
        let standby =
            Cluster::at(dir.join("standby"))?.listening_on_tcp(ports[1]).with_setting("synchronous_commit", "on");
        let pair = Self { dir, primary, standby, ports };
        pair.primary.ensure_running()?;
        pair.base_backup()?;
        pair.standby.ensure_running()?;
        pair.wait_until_streaming(replication)?;
        Ok(pair)
    }

    /// Waits until the standby has replayed everything the primary has written so far.
    pub fn wait_until_caught_up(&self) -> Result<(), ClusterError> {
        let written = first_value(&self.primary_url("postgres"), "SELECT pg_current_wal_lsn()")?.unwrap_or_default();
        let replayed = format!("SELECT 1 WHERE pg_last_wal_replay_lsn() >= '{written}'::pg_lsn");
        self.wait_for(&self.standby_url("postgres"), &replayed, true, "the standby to replay the primary's WAL")
    }

    /// Stops the standby receiving WAL (its `primary_conninfo` emptied and reloaded): what the primary commits
    /// from now on is not on the standby, as when an asynchronous standby lags at the moment of a crash.
    pub fn stop_replicating(&self) -> Result<(), ClusterError> {
        let standby = self.standby_url("postgres");
        first_value(&standby, "ALTER SYSTEM SET primary_conninfo = ''")?;
        first_value(&standby, "SELECT pg_reload_conf()")?;
        self.wait_for(&standby, "SELECT 1 FROM pg_stat_wal_receiver", false, "the standby to stop receiving WAL")
    }

    /// A URL for `database` naming both servers, primary first, with `target_session_attrs=read-write`: a
    /// connection is made to whichever takes writes (before a failover the primary, after it the promoted
    /// standby). A server that is down is skipped within `connect_timeout`.
    pub fn url(&self, database: &str) -> String {
        let [p, s] = self.ports;
        format!(
            "postgres://postgres@127.0.0.1:{p},127.0.0.1:{s}/{database}?target_session_attrs=read-write&connect_timeout=2"
        )
    }

    /// A URL for `database` on the primary alone.
    pub fn primary_url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.ports[0])
    }

    /// A URL for `database` on the standby alone (read-only until it is promoted).
    pub fn standby_url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.ports[1])
    }

    /// Kills the primary the way a crash would (`pg_ctl stop -m immediate`): its sessions end at once, and
    /// nothing is flushed or checkpointed.
    pub fn kill_primary(&self) -> Result<(), ClusterError> {
        self.primary.stop_immediately()
    }

    /// Promotes the standby (`pg_ctl promote -w`: returns once it takes writes).
    pub fn promote(&self) -> Result<(), ClusterError> {
        let data = self.standby.data_dir().display().to_string();
        let wait = crate::cluster::pg_ctl_wait();
        self.standby.run(running_as_root(), "pg_ctl", &["promote", "-w", "-t", &wait, "-D", &data])?;
        Ok(())
    }

    /// The pair's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the servers of a pair made in `dir` whose process ended before it could (a killed test run).
    pub fn stop_leftover(dir: &Path) {
        for node in ["primary", "standby"] {
            if let Ok(cluster) = Cluster::at(dir.join(node)) {
                let _ = cluster.stop();
            }
        }
    }

    /// `pg_basebackup` of the primary into the standby's data folder, with `-R`: the copy starts as a standby
    /// of the primary, named [`STANDBY_NAME`] there.
    fn base_backup(&self) -> Result<(), ClusterError> {
        let folder = self.standby.dir();
        fs::create_dir_all(folder).map_err(|e| ClusterError::Io(format!("creating {}: {e}", folder.display())))?;
        if running_as_root() {
            std::os::unix::fs::chown(folder, Some(postgres_uid()?), None)
                .map_err(|e| ClusterError::Io(format!("handing {} to postgres: {e}", folder.display())))?;
        }
        let conninfo = format!("host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}", self.ports[0]);
        let data = self.standby.data_dir().display().to_string();
        self.primary.run(
            running_as_root(),
            "pg_basebackup",
            &["-D", &data, "-R", "-X", "stream", "-c", "fast", "--no-sync", "-d", &conninfo],
        )?;
        Ok(())
    }

    /// Waits until the primary reports the standby streaming, in the state `replication` asks for
    /// (`pg_stat_replication.sync_state`).
    fn wait_until_streaming(&self, replication: Replication) -> Result<(), ClusterError> {
        let state = if replication == Replication::Synchronous { "sync" } else { "async" };
        let asked = format!(
            "SELECT 1 FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}' AND sync_state = '{state}'"
        );
        self.wait_for(&self.primary_url("postgres"), &asked, true, &format!("the standby to stream ({state})"))
    }

    /// Waits until `sql` on `url` returns a row (`row`) or none (`!row`).
    fn wait_for(&self, url: &str, sql: &str, row: bool, what: &str) -> Result<(), ClusterError> {
        let deadline = Deadline::after(Duration::from_secs(10));
        loop {
            if first_value(url, sql)?.is_some() == row {
                return Ok(());
            }
            if deadline.passed() {
                return Err(ClusterError::Sql(format!(
                    "waited in vain for {what} ({sql}); see {} and {}",
                    self.primary.dir().join("server.log").display(),
                    self.standby.dir().join("server.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for StandbyPair {
    fn drop(&mut self) {
        Self::stop_leftover(&self.dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The first column of the first row `sql` returns on `url` (`None`: no row), asked from a thread of its own
/// (callers may be inside a runtime).
fn first_value(url: &str, sql: &str) -> Result<Option<String>, ClusterError> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Io(format!("starting a runtime: {e}")))?;
        runtime.block_on(async {
            let client = crate::cluster::connect(&url).await?;
            let rows = client.simple_query(&sql).await.map_err(|e| ClusterError::Sql(format!("{sql}: {e}")))?;
            Ok(rows.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or_default().to_owned()),
                _ => None,
            }))
        })
    })
    .join()
    .unwrap_or_else(|_| Err(ClusterError::Sql("asking the primary panicked".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a failover test relies on: a commit acknowledged by the primary is on the standby (synchronous
    /// replication), the pair's URL goes to the primary and, once it is killed and the standby promoted, to
    /// the standby, and the standby refuses writes before it is promoted.
    #[test]
    fn a_commit_acknowledged_before_the_primary_dies_is_on_the_promoted_standby() {
        let dir = std::env::temp_dir().join(format!("almanac-standby-test-{}", std::process::id()));
        let pair = StandbyPair::create(dir).expect("a primary and a synchronous standby");
        let primary_port = pair.ports[0].to_string();
        let ask = |url: &str, sql: &str| -> Result<Vec<String>, String> {
            let (url, sql) = (url.to_owned(), sql.to_owned());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    let client = crate::cluster::connect(&url).await.map_err(|e| e.to_string())?;
                    // An error is told by its SQLSTATE, not by the server's words.
                    let rows = client
                        .simple_query(&sql)
                        .await
                        .map_err(|e| e.code().map_or_else(|| e.to_string(), |c| c.code().to_owned()))?;
                    Ok(rows
                        .iter()
                        .filter_map(|m| match m {
                            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                            _ => None,
                        })
                        .collect())
                })
            })
            .join()
            .unwrap()
        };
        let through_url = "SELECT current_setting('port')";
        assert_eq!(ask(&pair.url("postgres"), through_url).unwrap(), vec![primary_port.clone()]);
        ask(&pair.url("postgres"), "CREATE TABLE acknowledged (n int); INSERT INTO acknowledged VALUES (1)").unwrap();
        let refused = ask(&pair.standby_url("postgres"), "INSERT INTO acknowledged VALUES (2)").unwrap_err();
        assert_eq!(refused, "25006", "the standby refuses a write as a read-only transaction");
        // A Worker starting against the standby (a URL naming it alone, or one endpoint that names it for a
        // while) is told of an outage and waits, as for a server restarting; it does not exit as for a failed
        // migration. (Reading the schema's state creates diesel's own table, which a standby refuses.)
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for state in [
            runtime.block_on(almanac_store_pg::schema_state(&pair.standby_url("postgres"))).map(drop),
            runtime.block_on(almanac_store_pg::migrate(&pair.standby_url("postgres"))).map(drop),
        ] {
            assert!(matches!(state, Err(almanac_store_pg::StoreError::Unavailable(_))), "{state:?}");
        }
        pair.kill_primary().unwrap();
        pair.promote().unwrap();
        assert_eq!(ask(&pair.url("postgres"), through_url).unwrap(), vec![pair.ports[1].to_string()]);
        assert_eq!(ask(&pair.url("postgres"), "SELECT count(*) FROM acknowledged").unwrap(), vec!["1".to_owned()]);
        ask(&pair.url("postgres"), "INSERT INTO acknowledged VALUES (3)").unwrap();
    }

    /// What the asynchronous failover test relies on: the standby streams as `async`; waiting until it has
    /// caught up waits for its replay (held here until the wait has begun, or very nearly); once it stops
    /// replicating its WAL receiver is gone; and a dropped pair leaves no server running and no folder.
    #[test]
    fn an_asynchronous_standby_catches_up_until_it_stops_replicating_and_a_dropped_pair_is_gone() {
        let dir = std::env::temp_dir().join(format!("almanac-standby-async-test-{}", std::process::id()));
        let pair = StandbyPair::create_with(dir.clone(), Replication::Asynchronous).expect("an asynchronous standby");
        let (primary, standby) = (pair.primary_url("postgres"), pair.standby_url("postgres"));
        let state = first_value(&primary, "SELECT sync_state FROM pg_stat_replication").unwrap();
        assert_eq!(state.as_deref(), Some("async"));
        first_value(&primary, "CREATE TABLE followed (n int)").unwrap();
        pair.wait_until_caught_up().unwrap();
        first_value(&standby, "SELECT pg_wal_replay_pause()").unwrap();
        first_value(&primary, "INSERT INTO followed VALUES (1)").unwrap();
        let resume = {
            let standby = standby.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                first_value(&standby, "SELECT pg_wal_replay_resume()").unwrap();
            })
        };
        pair.wait_until_caught_up().unwrap();
        assert_eq!(first_value(&standby, "SELECT count(*) FROM followed").unwrap().as_deref(), Some("1"));
        resume.join().unwrap();
        pair.stop_replicating().unwrap();
        let receivers = first_value(&standby, "SELECT count(*) FROM pg_stat_wal_receiver").unwrap();
        assert_eq!(receivers.as_deref(), Some("0"), "the standby still receives WAL");
        // What `create` waits for: a standby that does not stream is waited for in vain, and said so.
        let never = pair.wait_until_streaming(Replication::Asynchronous).unwrap_err().to_string();
        assert!(never.contains("waited in vain for the standby to stream (async)"), "{never}");
        let ports = pair.ports;
        drop(pair);
        assert!(!dir.exists(), "{} left behind", dir.display());
        for port in ports {
            assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "a server still listens on {port}");
        }
    }
}
