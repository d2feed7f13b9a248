//! `cargo xtask demo`: a private database, a generated sample library, a real Worker crawling it, and a
//! report of what was found.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use almanac_domain::{CrawlReport, DedupKey, Scope, Status, StorageConfigId, WorkKind, ports::MaintenanceStore};
use almanac_store_pg::{ItemFilter, PgStore};
use anyhow::{Context, Result, bail};

const DEMO_DATABASE: &str = "almanac_demo";

/// Builds the Worker and answers the path of its binary as cargo reports it, wherever the target folder is
/// (`CARGO_TARGET_DIR`, a configured `build.target-dir`, or the workspace's `target`).
fn build_worker(workspace: &Path, cargo: &str) -> Result<PathBuf> {
    let output = Command::new(cargo)
        .args(["build", "--quiet", "-p", "almanac-worker", "--message-format=json-render-diagnostics"])
        .current_dir(workspace)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        bail!("building almanac-worker failed");
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "almanac-worker")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo built almanac-worker but named no binary of it")
}

/// The demo Worker's settings file: its database, proxy root and page, and what makes a demo quick.
fn demo_settings(url: &str, proxies: &Path, port: u16) -> String {
    let proxies = proxies.to_string_lossy();
    format!(
        "# The settings of `cargo xtask demo`: almanac-worker --config-file <this file> status\n\
         [database]\nurl = {}\n\n[queue]\npoll_interval = \"500ms\"\n\n[worker]\nid = \"demo-worker\"\n\n\
         [storage]\nproxy_root = {}\n\
         # Its photos were made moments ago and nothing writes them: none is left to settle.\n\
         settle_time = \"0s\"\n\n[http]\naddress = \"127.0.0.1:{port}\"\n",
        toml_string(url),
        toml_string(&proxies),
    )
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

pub fn run(workspace: &Path, cargo: &str) -> Result<()> {
    let cluster = almanac_testdb::Cluster::private()?;
    cluster.ensure_running().context("starting the private PostgreSQL cluster")?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let admin = connect(&cluster.url("postgres")).await?;
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DEMO_DATABASE} WITH (FORCE)")).await?;
        admin.batch_execute(&format!("CREATE DATABASE {DEMO_DATABASE}")).await?;
        anyhow::Ok(())
    })?;
    let url = cluster.url(DEMO_DATABASE);

    step("building almanac-worker");
    let worker = build_worker(workspace, cargo)?;

    let demo = workspace.join("target/demo");
    let library = demo.join("library");
    let proxies = demo.join("proxies");
    let _ = std::fs::remove_dir_all(&demo);
    step("generating a sample library");
    let out = Command::new(cargo)
        .args(["run", "--quiet", "-p", "almanac-media", "--features", "fixtures", "--example", "sample_library", "--"])
        .arg(&library)
        .current_dir(workspace)
        .output()?;
    if !out.status.success() {
        bail!("generating the sample library failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    print!("    {}", String::from_utf8_lossy(&out.stdout));

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let settings = demo.join("almanac.toml");
    std::fs::write(&settings, demo_settings(&url, &proxies, port))?;
    // The demo's settings only: not an `almanac.toml` here or an installed `/etc/almanac/worker.toml`, and none of
    // the shell's `ALMANAC__*` or `DATABASE_URL`.
    let worker_command = || {
        let mut command = Command::new(&worker);
        command.arg("--config-file").arg(&settings);
        for (variable, _) in std::env::vars_os() {
            if variable.to_str().is_some_and(|v| v.starts_with("ALMANAC__") || v == "DATABASE_URL") {
                command.env_remove(variable);
            }
        }
        command
    };
    let cli = |args: &[&str]| -> Result<String> {
        let out = worker_command().args(args).output()?;
        if !out.status.success() {
            bail!("almanac-worker {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    step("migrating the demo database");
    print!("    {}", cli(&["migrate"])?);
    step("registering the library");
    let root = library.to_str().context("the workspace path must be UTF-8")?;
    let added = cli(&["config", "add", "--user", "demo", "--root", root])?;
    print!("    {added}");
    let config_id = added.split_whitespace().next().context("config add prints the new id")?;
    // The same dedup key the scheduler uses, so its periodic crawl does not queue a second one.
    let config: StorageConfigId = config_id.parse().context("config add prints the new id first")?;
    let key = DedupKey::for_work(WorkKind::Crawl, Scope::Config(config));
    print!("    crawl {}", cli(&["enqueue", "crawl", "--config", root, "--dedup-key", key.as_str()])?);

    step(&format!("starting a Worker (its page on http://127.0.0.1:{port}/, metrics on /metrics)"));
    println!("    its settings: {}", settings.display());
    let log_path = demo.join("worker.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = worker_command().arg("run").stdout(Stdio::null()).stderr(log).spawn()?;
    let outcome = rt.block_on(wait_for_crawl_and_bursts(&url, &mut child));
    let report = rt.block_on(report(&url, &proxies));
    let metrics = fetch(port, "/metrics").unwrap_or_default();
    step("stopping the Worker (SIGTERM)");
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let exit = child.wait()?;
    println!("    exited with {exit}; its log is {}", log_path.display());
    outcome?;
    print!("{}", report?);
    println!("\nQueue:\n{}", cli(&["status"])?);
    let interesting: Vec<&str> = metrics.lines().filter(|l| l.starts_with("almanac_events_total")).collect();
    println!("Metrics (events):\n    {}", interesting.join("\n    "));
    println!("\nProxies are under {}", proxies.display());
    println!("Run it again with: cargo xtask demo   (the demo database is {url})");
    Ok(())
}

fn step(what: &str) {
    println!("==> {what}");
    let _ = std::io::stdout().flush();
}

/// A connection for the cluster's administration (the demo database made afresh).
async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// The demo reads what it shows through `PgStore`, as the web backend would: the product's own queries.
fn store(url: &str) -> Result<PgStore> {
    Ok(PgStore::new(url, 2, Duration::from_secs(10))?)
}

async fn wait_for_crawl_and_bursts(url: &str, child: &mut Child) -> Result<()> {
    let store = store(url)?;
    let started = Instant::now();
    let mut last = String::new();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the Worker exited early ({status}); see target/demo/worker.log");
        }
        let mut items = Vec::new();
        for kind in [WorkKind::Crawl, WorkKind::BurstDetection] {
            let filter = ItemFilter { kind: Some(kind), ..ItemFilter::default() };
            items.extend(store.find_items(&filter, 10).await?);
        }
        items.sort_by_key(|i| i.requested_at);
        let line: Vec<String> = items
            .iter()
            .map(|i| {
                let progress = i.progress.as_ref().map(|p| format!(" {p}")).unwrap_or_default();
                format!("{} {}{progress}", i.kind, i.status)
            })
            .collect();
        let line = line.join(" | ");
        if line != last {
            println!("    {line}");
            last = line;
        }
        let done = |kind: WorkKind| items.iter().any(|i| i.kind == kind && i.status == Status::Succeeded);
        if done(WorkKind::Crawl) && done(WorkKind::BurstDetection) {
            return Ok(());
        }
        if items.iter().any(|i| i.status == Status::Failed) {
            bail!("a demo item failed: see `almanac-worker status` and target/demo/worker.log");
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the crawl did not finish within five minutes; see target/demo/worker.log");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The result of the first succeeded item of `kind` (the crawl that found the library; the scheduler's later
/// one finds it unchanged).
async fn first_result(store: &PgStore, kind: WorkKind) -> Result<serde_json::Value> {
    let filter = ItemFilter { kind: Some(kind), status: Some(Status::Succeeded), ..ItemFilter::default() };
    let item = store.find_items(&filter, 100).await?.pop().with_context(|| format!("no {kind} succeeded"))?;
    Ok(item.result.unwrap_or_default())
}

async fn report(url: &str, proxies: &Path) -> Result<String> {
    let store = store(url)?;
    let crawl: CrawlReport = serde_json::from_value(first_result(&store, WorkKind::Crawl).await?)
        .context("the crawl's result is a crawl report")?;
    let c = &crawl.counts;
    let mut out = String::from("\nWhat the crawl found:\n");
    out.push_str(&format!(
        "    {} files: {} ingested, {} copies, {} skipped, {} failed; {} bytes hashed\n",
        c.found, c.ingested, c.copies, c.skipped, c.failed, c.bytes_hashed
    ));
    out.push_str(&format!("    Live Photo pairs {}\n", crawl.live_photos_paired));
    for failure in &crawl.failures {
        out.push_str(&format!("    failed: {} ({})\n", failure.path, failure.reason));
    }
    let bursts = first_result(&store, WorkKind::BurstDetection).await?;
    out.push_str(&format!("    bursts {} ({} frames)\n", bursts["bursts"], bursts["frames_in_bursts"]));

    // What the product shows a user: one memory per burst and per Live Photo (`PgStore::on_this_day`).
    out.push_str("\nOn this day (4 July):\n");
    let user = store.user_by_name("demo").await?.context("the demo user")?;
    let memories = store.on_this_day(user.id, 7, 4, 50).await?;
    for m in &memories {
        let what = if m.is_video {
            "video"
        } else if m.burst_id.is_some() {
            "burst"
        } else {
            "photo"
        };
        out.push_str(&format!("    {}  taken {}  ({what})\n", m.display_path, m.captured_at));
    }
    out.push_str("\nTheir proxies:\n");
    let ids: Vec<_> = memories.iter().map(|m| m.asset_id).collect();
    for p in store.proxies_of(&ids, None).await?.iter().take(8) {
        let Some(rel) = &p.relative_path else { continue };
        let name = memories.iter().find(|m| m.asset_id == p.asset_id).map_or("", |m| m.display_path.as_str());
        out.push_str(&format!("    {name} {:<10} {}\n", p.proxy_type.as_str(), proxies.join(rel).display()));
    }
    Ok(out)
}

fn fetch(port: u16, path: &str) -> Result<String> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's settings file reads back as written, whatever its paths hold (quotes, backslashes, controls).
    #[test]
    fn the_demo_settings_file_reads_back_whatever_its_paths_hold() {
        let proxies = Path::new("/tmp/a \"quoted\" \\ folder\u{7}/proxies");
        let text = demo_settings("postgres://u@%2Ftmp/db", proxies, 8080);
        let source = config::File::from_str(&text, config::FileFormat::Toml);
        let read = config::Config::builder().add_source(source).build().unwrap();
        assert_eq!(read.get_string("storage.proxy_root").unwrap(), proxies.to_str().unwrap());
        assert_eq!(read.get_string("database.url").unwrap(), "postgres://u@%2Ftmp/db");
        assert_eq!(read.get_string("http.address").unwrap(), "127.0.0.1:8080");
        assert_eq!(read.get_string("storage.settle_time").unwrap(), "0s");
    }
}
