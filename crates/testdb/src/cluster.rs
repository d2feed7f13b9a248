use std::fs::{self, File};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tokio_postgres::{Client, NoTls};

/// Why the private cluster or a test database could not be had. Each message says what to do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    /// The PostgreSQL server binaries are missing.
    #[error(
        "PostgreSQL server binaries not found ({0}). Install them (Debian: `apt-get install -y postgresql`) or set ALMANAC_PG_BINDIR to the folder holding initdb and pg_ctl"
    )]
    NoBinaries(String),
    /// A server command failed.
    #[error("`{command}` failed: {output}")]
    Command {
        /// The command.
        command: String,
        /// What it printed.
        output: String,
    },
    /// A file-system step failed.
    #[error("{0}")]
    Io(String),
    /// A SQL step failed.
    #[error("{0}")]
    Sql(String),
}

/// A private PostgreSQL cluster: a data directory, a socket directory, a port number naming the socket.
#[derive(Debug, Clone)]
pub struct Cluster {
    dir: PathBuf,
    bindir: PathBuf,
    port: u16,
    /// Also listen on 127.0.0.1 (at `port`).
    tcp: bool,
    /// Server settings beyond ours (`name`, `value` as postgresql.conf writes it).
    settings: Vec<(String, String)>,
}

impl Cluster {
    /// The private cluster of this checkout: `ALMANAC_PG_DIR`, else `<temp>/almanac-pg-<hash of the checkout
    /// path>`, so two checkouts on one machine do not share one.
    pub fn private() -> Result<Self, ClusterError> {
        let dir = match std::env::var_os("ALMANAC_PG_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => {
                let mut hasher = DefaultHasher::new();
                env!("CARGO_MANIFEST_DIR").hash(&mut hasher);
                std::env::temp_dir().join(format!("almanac-pg-{:08x}", hasher.finish() as u32))
            }
        };
        Ok(Self { dir, bindir: bindir()?, port: 5432, tcp: false, settings: Vec::new() })
    }

    /// A cluster of its own in `dir` (created by [`Cluster::ensure_running`]), for tests that stop and start
    /// their server (the fault suite) without disturbing the cluster every other test shares.
    pub fn at(dir: PathBuf) -> Result<Self, ClusterError> {
        Ok(Self { dir, bindir: bindir()?, port: 5432, tcp: false, settings: Vec::new() })
    }

    /// This cluster also listens on 127.0.0.1 at `port` (which names its socket too): for tests of what only
    /// TCP has (TLS). Set before [`Cluster::ensure_running`].
    pub fn listening_on_tcp(mut self, port: u16) -> Self {
        self.port = port;
        self.tcp = true;
        self
    }

    /// A server setting for [`Cluster::ensure_running`] to start with (`ssl`, `on`; a value is quoted here).
    pub fn with_setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Writes `contents` to `name` in the cluster's folder with `mode`, owned by the server's OS user when
    /// running as root (a TLS key must belong to the server and be readable by it alone), and returns its path.
    pub fn install_file(&self, name: &str, contents: &[u8], mode: u32) -> Result<PathBuf, ClusterError> {
        use std::os::unix::fs::PermissionsExt;
        fs::create_dir_all(&self.dir).map_err(|e| io_error("creating", &self.dir, e))?;
        let path = self.dir.join(name);
        fs::write(&path, contents).map_err(|e| io_error("writing", &path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(|e| io_error("setting mode", &path, e))?;
        if running_as_root() {
            let uid = postgres_uid()?;
            std::os::unix::fs::chown(&path, Some(uid), None).map_err(|e| io_error("handing to postgres", &path, e))?;
        }
        Ok(path)
    }

    /// The cluster's folder (data, socket, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.join("socket")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A URL for `database` on this cluster, over its Unix socket, as the `postgres` superuser.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@localhost/{database}?host={}&port={}", self.socket_dir().display(), self.port)
    }

    /// Creates the cluster if it does not exist and starts it if it is not running. Safe to call from several
    /// processes at once: a file lock makes them take turns.
    pub fn ensure_running(&self) -> Result<(), ClusterError> {
        fs::create_dir_all(&self.dir).map_err(|e| io_error("creating", &self.dir, e))?;
        let lock_path = self.dir.join("setup.lock");
        let lock = File::create(&lock_path).map_err(|e| io_error("creating", &lock_path, e))?;
        lock.lock().map_err(|e| io_error("locking", &lock_path, e))?;
        let as_postgres = running_as_root();
        if as_postgres {
            let uid = postgres_uid()?;
            for dir in [&self.dir, &self.socket_dir()] {
                fs::create_dir_all(dir).map_err(|e| io_error("creating", dir, e))?;
                std::os::unix::fs::chown(dir, Some(uid), None).map_err(|e| io_error("handing to postgres", dir, e))?;
            }
        } else {
            fs::create_dir_all(self.socket_dir()).map_err(|e| io_error("creating", &self.socket_dir(), e))?;
        }
        if !self.data_dir().join("PG_VERSION").exists() {
            let _ = fs::remove_dir_all(self.data_dir());
            self.run(
                as_postgres,
                "initdb",
                &[
                    "-D",
                    &self.data_dir().display().to_string(),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
            )?;
        }
        if !self.is_running(as_postgres) {
            let mut options = format!(
                "-c listen_addresses='{}' -c unix_socket_directories='{}' -c port={} -c max_connections=300 \
                 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=128MB",
                if self.tcp { "127.0.0.1" } else { "" },
                self.socket_dir().display(),
                self.port
            );
            for (name, value) in &self.settings {
                options.push_str(&format!(" -c {name}='{}'", value.replace('\'', "''")));
            }
            self.run(
                as_postgres,
                "pg_ctl",
                &[
                    "start",
                    "-w",
                    "-t",
                    &pg_ctl_wait(),
                    "-D",
                    &self.data_dir().display().to_string(),
                    "-l",
                    &self.log_file().display().to_string(),
                    "-o",
                    &options,
                ],
            )?;
        }
        Ok(())
    }

    /// Creates `database` on this cluster when it does not exist yet.
    pub async fn ensure_database(&self, database: &str) -> Result<(), ClusterError> {
        let client = connect(&self.url("postgres")).await?;
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&database])
            .await
            .map_err(|e| ClusterError::Sql(format!("looking up database {database}: {e}")))?
            .is_some();
        if !exists {
            client
                .batch_execute(&format!("CREATE DATABASE \"{database}\""))
                .await
                .map_err(|e| ClusterError::Sql(format!("creating database {database}: {e}")))?;
        }
        Ok(())
    }

    /// Stops the cluster if it runs.
    pub fn stop(&self) -> Result<(), ClusterError> {
        let as_postgres = running_as_root();
        if self.is_running(as_postgres) {
            self.run(
                as_postgres,
                "pg_ctl",
                &["stop", "-m", "fast", "-w", "-t", &pg_ctl_wait(), "-D", &self.data_dir().display().to_string()],
            )?;
        }
        Ok(())
    }

    /// Stops the cluster the way a crash would (`pg_ctl stop -m immediate`: no checkpoint, crash recovery at
    /// the next start); [`Cluster::ensure_running`] starts it again.
    pub fn stop_immediately(&self) -> Result<(), ClusterError> {
        let as_postgres = running_as_root();
        self.run(
            as_postgres,
            "pg_ctl",
            &["stop", "-m", "immediate", "-w", "-t", &pg_ctl_wait(), "-D", &self.data_dir().display().to_string()],
        )?;
        Ok(())
    }

    /// Dumps the schema of `database` (no data, no owners, no privileges, no migration bookkeeping) in a stable
    /// form: a fixed `\restrict` key and no version lines, so the output only changes when the schema does.
    pub fn dump_schema(&self, url: &str) -> Result<String, ClusterError> {
        let output = Command::new(self.bindir.join("pg_dump"))
            .args([
                "--schema-only",
                "--no-owner",
                "--no-privileges",
                "--restrict-key=almanacschema",
                "--exclude-table=__diesel_schema_migrations",
                "--dbname",
                url,
            ])
            .output()
            .map_err(|e| ClusterError::Io(format!("running pg_dump: {e}")))?;
        let text = checked("pg_dump", output)?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with("-- Dumped from") && !l.starts_with("-- Dumped by"))
            .map(|l| format!("{l}\n"))
            .collect())
    }

    fn is_running(&self, as_postgres: bool) -> bool {
        self.data_dir().join("postmaster.pid").exists()
            && self.run(as_postgres, "pg_ctl", &["status", "-D", &self.data_dir().display().to_string()]).is_ok()
    }

    pub(crate) fn run(&self, as_postgres: bool, program: &str, args: &[&str]) -> Result<String, ClusterError> {
        let path = self.bindir.join(program);
        let mut command = if as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        command.args(args).current_dir(&self.dir);
        inherit_no_descriptors(&mut command);
        let output = command.output().map_err(|e| ClusterError::Command {
            command: format!("{} {}", path.display(), args.join(" ")),
            output: e.to_string(),
        })?;
        checked(&format!("{program} {}", args.join(" ")), output).map_err(|e| match e {
            ClusterError::Command { command, output } if program == "pg_ctl" && args[0] == "start" => {
                let log = fs::read_to_string(self.log_file()).unwrap_or_default();
                ClusterError::Command { command, output: format!("{output}\nserver log:\n{log}") }
            }
            other => other,
        })
    }
}

/// Marks every descriptor above standard error close-on-exec in the child, so the server (which outlives the
/// tests) keeps none of what the test process inherited: a `flock` around `cargo test` hands its lock down, and a
/// server holding it would keep the lock for as long as it runs.
pub(crate) fn inherit_no_descriptors(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the child between fork and exec. It makes one system call (close_range with
    // CLOSE_RANGE_CLOEXEC: marks, closes nothing, so the spawn's own error pipe still works), allocates nothing,
    // takes no lock and captures nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            // Best effort: a kernel without close_range (before 5.11) leaves them as they were.
            let _ = libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
}

fn checked(command: &str, output: Output) -> Result<String, ClusterError> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(ClusterError::Command {
            command: command.to_owned(),
            output: format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
        })
    }
}

/// How many seconds `pg_ctl` waits for the server to start or stop: what an idle machine needs, with the tests'
/// patience (pg_ctl's own default is a minute).
pub(crate) fn pg_ctl_wait() -> String {
    crate::patience(std::time::Duration::from_secs(10)).as_secs().to_string()
}

fn io_error(what: &str, path: &Path, e: io::Error) -> ClusterError {
    ClusterError::Io(format!("{what} {}: {e}", path.display()))
}

fn bindir() -> Result<PathBuf, ClusterError> {
    if let Some(dir) = std::env::var_os("ALMANAC_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let mut candidates: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").exists())
        .collect();
    candidates.sort();
    candidates
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| ClusterError::NoBinaries("no initdb via pg_config or under /usr/lib/postgresql".into()))
}

pub(crate) fn running_as_root() -> bool {
    fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

pub(crate) fn postgres_uid() -> Result<u32, ClusterError> {
    let out = Command::new("id").args(["-u", "postgres"]).output().map_err(|e| ClusterError::Io(e.to_string()))?;
    String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| {
        ClusterError::NoBinaries("running as root, but there is no `postgres` OS user to run the server as".into())
    })
}

pub(crate) fn postgres_gid() -> Result<u32, ClusterError> {
    let out = Command::new("id").args(["-g", "postgres"]).output().map_err(|e| ClusterError::Io(e.to_string()))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| ClusterError::NoBinaries("running as root, but there is no `postgres` OS group".into()))
}

/// A TCP port on 127.0.0.1 that nothing listens on now (the system's pick of a free one).
pub(crate) fn free_port() -> Result<u16, ClusterError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| ClusterError::Io(format!("finding a free port: {e}")))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| ClusterError::Io(format!("finding a free port: {e}")))
}

pub(crate) async fn connect(url: &str) -> Result<Client, ClusterError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| ClusterError::Sql(format!("connecting to {url}: {e}")))?;
    tokio::spawn(connection);
    Ok(client)
}

/// `url` with its database replaced by `database`.
pub(crate) fn with_database(url: &str, database: &str) -> String {
    let (before_query, query) = url.split_once('?').map_or((url, None), |(a, b)| (a, Some(b)));
    let base = match before_query.rfind('/') {
        Some(i) if i > before_query.find("://").map_or(0, |p| p + 2) => &before_query[..i],
        _ => before_query,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

/// The name of the template this binary migrates: the digest of the migrations it carries, as its build embedded
/// them (`almanac_store_pg::migrations_digest`). Named after the files on disk instead, a test binary built
/// before a migration was edited (a long test run while one is being written) migrated a template with the old
/// text under the new files' name, and every build after used it. A binary built before a migration was added or
/// removed is refused: it would test a schema short of the folder's.
fn migrations_fingerprint(dir: &Path, built: &[String]) -> Result<String, ClusterError> {
    let mut listed: Vec<String> = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error("reading", dir, e))? {
        let path = entry.map_err(|e| io_error("reading", dir, e))?.path();
        if let Some(name) = path.file_name() {
            listed.push(name.to_string_lossy().into_owned());
        }
    }
    listed.sort();
    if listed != built {
        return Err(ClusterError::Io(format!(
            "this test binary was built with the migrations {built:?}, but {} holds {listed:?}: it is older than \
             the migrations; build it again (cargo test and cargo xtask test rebuild it)",
            dir.display()
        )));
    }
    Ok(almanac_store_pg::migrations_digest().to_owned())
}

/// Makes sure a template database migrated with the current migrations exists and returns its name.
pub(crate) async fn ensure_template(server_url: &str, migrations: &Path) -> Result<String, ClusterError> {
    let fingerprint = migrations_fingerprint(migrations, &almanac_store_pg::migration_names())?;
    let name = format!("almanac_template_{fingerprint}");
    let client = connect(server_url).await?;
    let sql = |e: tokio_postgres::Error| ClusterError::Sql(format!("preparing the template database: {e}"));
    client.batch_execute("SELECT pg_advisory_lock(727300)").await.map_err(sql)?;
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate", &[&name])
        .await
        .map_err(sql)?
        .is_some();
    if !exists {
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).await.map_err(sql)?;
        client.batch_execute(&format!("CREATE DATABASE {name}")).await.map_err(sql)?;
        almanac_store_pg::migrate(&with_database(server_url, &name))
            .await
            .map_err(|e| ClusterError::Sql(format!("migrating the template database: {e}")))?;
        client.batch_execute(&format!("ALTER DATABASE {name} WITH IS_TEMPLATE true")).await.map_err(sql)?;
    }
    client.batch_execute("SELECT pg_advisory_unlock(727300)").await.map_err(sql)?;
    Ok(name)
}

#[cfg(test)]
mod tests;
