//! What the black-box tests share: the `almanac-worker` binary, plain SQL on a connection of its own, a TCP
//! path to the database that can be cut or held, and a headless browser.

pub mod browser;
pub mod procs;

/// The `almanac-worker` binary of this workspace, built (or found up to date) once per test process with the
/// profile the tests were built with. The binary belongs to another package, so Cargo does not build it for
/// these tests by itself (`CARGO_BIN_EXE_*` names only a package's own binaries).
pub fn worker_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        // The test executable is `<target>/<profile>/deps/<test>-<hash>`; the binary goes to `<target>/<profile>`.
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe.parent().and_then(std::path::Path::parent).expect("<target>/<profile>/deps");
        let profile = profile_dir.file_name().and_then(|n| n.to_str()).expect("a profile folder");
        let target = profile_dir.parent().expect("the target folder");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build.args(["build", "--quiet", "-p", "almanac-worker", "--bin", "almanac-worker"]);
        build.arg("--target-dir").arg(target).current_dir(env!("CARGO_MANIFEST_DIR"));
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let status = build.status().expect("running cargo to build almanac-worker");
        assert!(status.success(), "building almanac-worker for the black-box tests failed");
        profile_dir.join("almanac-worker").to_str().expect("a UTF-8 target path").to_owned()
    })
}

/// A command that runs the `almanac-worker` binary with only the settings its test gives: an empty settings file
/// ([`empty_settings`]), not an `almanac.toml` in the current folder nor the package's `/etc/almanac/worker.toml` on a
/// machine where it is installed, and none of the `ALMANAC__*` variables or `DATABASE_URL` of the shell that runs
/// the tests.
pub fn worker() -> std::process::Command {
    let mut command = std::process::Command::new(worker_bin());
    command.arg("--config-file").arg(empty_settings());
    for (variable, _) in std::env::vars_os() {
        if variable.to_str().is_some_and(|v| v.starts_with("ALMANAC__") || v == "DATABASE_URL") {
            command.env_remove(variable);
        }
    }
    command
}

/// An empty settings file beside the binary (the built-in defaults, then what a test sets in the environment).
pub fn empty_settings() -> &'static std::path::Path {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let file = std::path::Path::new(worker_bin()).with_file_name("system-tests-settings.toml");
        std::fs::write(&file, "# Empty: the black-box tests give every setting in the environment.\n")
            .expect("writing the tests' settings file");
        file
    })
}

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A TCP proxy to the cluster's Unix socket that can be cut (bytes swallowed, sockets kept open: a dead path)
/// or held (bytes kept and delivered later, in order: a path that heals).
pub struct Proxy {
    /// Where it listens, on 127.0.0.1.
    pub port: u16,
    /// Set to cut the path: bytes are swallowed both ways, the sockets stay open.
    pub cut: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    directions: Arc<std::sync::Mutex<Vec<Arc<std::sync::Mutex<Direction>>>>>,
}

/// One direction of a proxied connection: bytes held back while the path is held, and where they go.
struct Direction {
    pending: Vec<u8>,
    to: Box<dyn Write + Send>,
    held_bytes: usize,
}

impl Proxy {
    /// Stops delivering without closing anything or dropping a byte: what TCP does on a path that goes silent
    /// and then heals (the peers retransmit).
    pub fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    /// Heals a held path: everything held is delivered, in order, then traffic flows again. Returns how many
    /// bytes had been held.
    pub fn deliver(&self) -> usize {
        self.held.store(false, Ordering::SeqCst);
        let mut total = 0;
        for direction in self.directions.lock().unwrap().iter() {
            let mut d = direction.lock().unwrap();
            total += d.held_bytes;
            let pending = std::mem::take(&mut d.pending);
            let _ = d.to.write_all(&pending);
        }
        total
    }
}

/// A proxy from a fresh TCP port to the Unix socket `socket`, passing bytes until it is cut or held.
pub fn proxy_to(socket: PathBuf) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (cut, held) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let directions: Arc<std::sync::Mutex<Vec<Arc<std::sync::Mutex<Direction>>>>> = Arc::default();
    let (flag, hold, registry) = (cut.clone(), held.clone(), directions.clone());
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = UnixStream::connect(&socket) else { continue };
            let pipe = |mut from: Box<dyn Read + Send>, to: Box<dyn Write + Send>| {
                let direction = Arc::new(std::sync::Mutex::new(Direction { pending: Vec::new(), to, held_bytes: 0 }));
                registry.lock().unwrap().push(direction.clone());
                let (cut, held) = (flag.clone(), hold.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        let Ok(n) = from.read(&mut buf) else { return };
                        if n == 0 {
                            return;
                        }
                        // Once cut, swallow everything and never answer; keep the sockets open.
                        if cut.load(Ordering::SeqCst) {
                            continue;
                        }
                        let mut d = direction.lock().unwrap();
                        if held.load(Ordering::SeqCst) {
                            d.pending.extend_from_slice(&buf[..n]);
                            d.held_bytes += n;
                            continue;
                        }
                        let mut out = std::mem::take(&mut d.pending);
                        out.extend_from_slice(&buf[..n]);
                        if d.to.write_all(&out).is_err() {
                            return;
                        }
                    }
                });
            };
            let client2: TcpStream = client.try_clone().unwrap();
            let server2 = server.try_clone().unwrap();
            pipe(Box::new(client), Box::new(server));
            pipe(Box::new(server2), Box::new(client2));
        }
    });
    Proxy { port, cut, held, directions }
}

/// Runs `sql` (simple protocol, any number of statements) on a connection of its own, from a thread of its own
/// (callers need no runtime), and returns the rows as text.
pub fn query(url: &str, sql: &str) -> Vec<Vec<String>> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            client
                .simple_query(&sql)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).unwrap_or("").to_owned()).collect())
                    }
                    _ => None,
                })
                .collect()
        })
    })
    .join()
    .unwrap()
}

/// Waits until `sql` returns a row, for something that takes up to `idle` on an idle machine (the deadline is
/// the tests' patience for that: `almanac_testdb::patience`).
pub fn wait_for(url: &str, sql: &str, idle: std::time::Duration) -> Vec<Vec<String>> {
    let every = std::time::Duration::from_millis(100);
    almanac_testdb::patience::wait_for(sql, idle, every, || Some(query(url, sql)).filter(|rows| !rows.is_empty()))
}

/// An `almanac-worker run` process whose log (JSON lines) goes to `log`; killed when dropped.
pub struct Worker {
    /// The process.
    pub child: std::process::Child,
    /// Where its log goes.
    pub log: std::path::PathBuf,
}

impl Worker {
    /// `almanac-worker run` on the database at `url` as Worker `name`: its proxies under `dir/proxies`, its log (JSON
    /// lines, level info) in `dir/<name>.log`, its page off. `more` adds settings, or overrides these.
    pub fn start(
        url: &str,
        dir: &std::path::Path,
        name: &str,
        more: impl FnOnce(&mut std::process::Command),
    ) -> Worker {
        let log = dir.join(format!("{name}.log"));
        let mut run = worker();
        run.args(["run", "--log-format", "json"])
            .env("DATABASE_URL", url)
            .env("ALMANAC__WORKER__ID", name)
            .env("ALMANAC__STORAGE__PROXY_ROOT", dir.join("proxies"))
            .env("ALMANAC__HTTP__ENABLED", "false")
            .env("ALMANAC__LOG__LEVEL", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        more(&mut run);
        Worker { child: run.spawn().unwrap(), log }
    }

    /// The lines of its log that are the event `name`.
    pub fn events(&self, name: &str) -> Vec<serde_json::Value> {
        log_lines(&self.log).into_iter().filter(|l| l["fields"]["event"] == name).collect()
    }

    /// Waits until it has logged `event`, for something that takes up to `idle` on an idle machine.
    pub fn wait_for_event(&self, event: &str, idle: std::time::Duration) -> serde_json::Value {
        let every = std::time::Duration::from_millis(50);
        almanac_testdb::patience::wait_for(event, idle, every, || self.events(event).into_iter().next())
    }

    /// SIGTERM, then its exit and its whole log.
    pub fn terminate(mut self) -> (std::process::ExitStatus, Vec<serde_json::Value>) {
        std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        let status = self.child.wait().unwrap();
        (status, log_lines(&self.log))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// The JSON lines of a log file (none while it does not exist yet).
pub fn log_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// A plain HTTP/1.1 GET of `path` on 127.0.0.1:`port`: the whole response, status line first.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
