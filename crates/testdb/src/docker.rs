//! A throwaway PostgreSQL container, for machines with a Docker engine (feature `docker`,
//! `ALMANAC_TEST_DOCKER=1`). The container is labelled and removed by `docker rm -f` on the next start.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::ClusterError;

const NAME: &str = "almanac-test-postgres";

fn docker(args: &[&str]) -> Result<String, ClusterError> {
    let out = Command::new("docker").args(args).output().map_err(|e| ClusterError::Command {
        command: format!("docker {}", args.join(" ")),
        output: format!("{e}: is the docker CLI installed?"),
    })?;
    if !out.status.success() {
        return Err(ClusterError::Command {
            command: format!("docker {}", args.join(" ")),
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Starts (or restarts) the test container and returns the URL of its maintenance database.
pub(crate) fn start() -> Result<String, ClusterError> {
    let _ = docker(&["rm", "-f", NAME]);
    docker(&[
        "run",
        "-d",
        "--name",
        NAME,
        "-e",
        "POSTGRES_HOST_AUTH_METHOD=trust",
        "-p",
        "127.0.0.1::5432",
        "postgres:15",
        "-c",
        "fsync=off",
        "-c",
        "max_connections=300",
    ])?;
    let port = docker(&["port", NAME, "5432/tcp"])?;
    let port = port.lines().next().and_then(|l| l.rsplit(':').next()).unwrap_or_default().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while docker(&["exec", NAME, "pg_isready", "-U", "postgres"]).is_err() {
        if Instant::now() > deadline {
            return Err(ClusterError::Sql("the PostgreSQL container did not become ready within a minute".into()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}
