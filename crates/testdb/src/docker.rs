//! PostgreSQL in a container, for machines with a Docker engine and no local server binaries (feature
//! `docker`, `ALMANAC_TEST_DOCKER=1`), through testcontainers' PostgreSQL module.
//!
//! One container, `almanac-test-postgres`, serves every test process of a run (nextest runs each test in a
//! process of its own) and the runs after it: it is reused, never removed by the tests. Its first start is
//! made under a file lock, so test processes starting together do not race to create it. Remove it with
//! `docker rm -f almanac-test-postgres`.

use std::sync::OnceLock;

use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::testcontainers::runners::SyncRunner;
use testcontainers_modules::testcontainers::{Container, ImageExt, ReuseDirective};

use crate::ClusterError;

const NAME: &str = "almanac-test-postgres";

fn failed(what: &str, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Command {
        command: format!("{what} (testcontainers, container {NAME})"),
        output: format!("{e}. Is a Docker engine running, and may this user reach it?"),
    }
}

/// Starts the test container, or finds the one already running, and returns the URL of its maintenance
/// database.
pub(crate) fn start() -> Result<String, ClusterError> {
    // Held for the whole process: the container is reused, so dropping it would not remove it anyway.
    static CONTAINER: OnceLock<Container<Postgres>> = OnceLock::new();
    let lock_path = std::env::temp_dir().join(format!("{NAME}.lock"));
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| failed(&format!("creating {}", lock_path.display()), e))?;
    lock.lock().map_err(|e| failed(&format!("locking {}", lock_path.display()), e))?;
    let container = match CONTAINER.get() {
        Some(container) => container,
        None => {
            let started = Postgres::default()
                .with_host_auth()
                .with_tag("15")
                .with_cmd(["-c", "fsync=off", "-c", "max_connections=300"])
                .with_container_name(NAME)
                .with_reuse(ReuseDirective::Always)
                .start()
                .map_err(|e| failed("starting postgres:15", e))?;
            CONTAINER.get_or_init(|| started)
        }
    };
    let port = container.get_host_port_ipv4(5432).map_err(|e| failed("reading the mapped port", e))?;
    let host = container.get_host().map_err(|e| failed("reading the host", e))?;
    drop(lock);
    Ok(format!("postgres://postgres@{host}:{port}/postgres"))
}
