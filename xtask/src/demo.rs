//! `cargo xtask demo`: a private database, a generated sample library, a real Worker crawling it, and a
//! report of what was found.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

const DEMO_DATABASE: &str = "almanac_demo";

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
    let status =
        Command::new(cargo).args(["build", "--quiet", "-p", "almanac-worker"]).current_dir(workspace).status()?;
    if !status.success() {
        bail!("building almanac-worker failed");
    }
    let worker = workspace.join("target/debug/almanac-worker");

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

    let cli = |args: &[&str]| -> Result<String> {
        let out = Command::new(&worker).args(args).env("DATABASE_URL", &url).output()?;
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
    print!("    crawl {}", cli(&["enqueue", "crawl", "--config", root, "--dedup-key", &format!("crawl:{config_id}")])?);

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    step(&format!("starting a Worker (its page on http://127.0.0.1:{port}/, metrics on /metrics)"));
    let log_path = demo.join("worker.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = Command::new(&worker)
        .arg("run")
        .env("DATABASE_URL", &url)
        .env("ALMANAC__STORAGE__PROXY_ROOT", &proxies)
        .env("ALMANAC__QUEUE__POLL_INTERVAL", "500ms")
        .env("ALMANAC__HTTP__ADDRESS", format!("127.0.0.1:{port}"))
        .env("ALMANAC__WORKER__ID", "demo-worker")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
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

async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn wait_for_crawl_and_bursts(url: &str, child: &mut Child) -> Result<()> {
    let client = connect(url).await?;
    let started = Instant::now();
    let mut last = String::new();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the Worker exited early ({status}); see target/demo/worker.log");
        }
        let rows = client
            .query("SELECT kind, status, progress::text FROM work_items WHERE kind IN ('crawl', 'burst_detection') ORDER BY requested_at", &[])
            .await?;
        let line: Vec<String> = rows
            .iter()
            .map(|r| {
                let progress: Option<String> = r.get(2);
                format!(
                    "{} {}{}",
                    r.get::<_, String>(0),
                    r.get::<_, String>(1),
                    progress.map(|p| format!(" {p}")).unwrap_or_default()
                )
            })
            .collect();
        let line = line.join(" | ");
        if line != last {
            println!("    {line}");
            last = line;
        }
        let done =
            |kind: &str| rows.iter().any(|r| r.get::<_, String>(0) == kind && r.get::<_, String>(1) == "succeeded");
        if done("crawl") && done("burst_detection") {
            return Ok(());
        }
        if rows.iter().any(|r| r.get::<_, String>(1) == "failed") {
            bail!("a demo item failed: see `almanac-worker status` and target/demo/worker.log");
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the crawl did not finish within five minutes; see target/demo/worker.log");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn report(url: &str, proxies: &Path) -> Result<String> {
    let client = connect(url).await?;
    let mut out = String::from("\nWhat the crawl found:\n");
    for row in client
        .query("SELECT media_type, count(*) FROM media_assets WHERE NOT is_soft_deleted GROUP BY 1 ORDER BY 1", &[])
        .await?
    {
        out.push_str(&format!("    {:<6} {}\n", row.get::<_, String>(0), row.get::<_, i64>(1)));
    }
    let bursts = client.query_one("SELECT count(*), coalesce(sum(frame_count), 0)::bigint FROM bursts", &[]).await?;
    out.push_str(&format!("    bursts {} ({} frames)\n", bursts.get::<_, i64>(0), bursts.get::<_, i64>(1)));
    let pairs =
        client.query_one("SELECT count(*) / 2 FROM media_assets WHERE paired_asset_id IS NOT NULL", &[]).await?;
    out.push_str(&format!("    Live Photo pairs {}\n", pairs.get::<_, i64>(0)));
    let result = client
        .query_one("SELECT result::text FROM work_items WHERE kind = 'crawl' AND status = 'succeeded' LIMIT 1", &[])
        .await?;
    out.push_str(&format!("    crawl result {}\n", result.get::<_, Option<String>>(0).unwrap_or_default()));
    out.push_str("\nOn this day (4 July):\n");
    for row in client
        .query("SELECT display_path, captured_at::text FROM media_assets WHERE capture_month = 7 AND capture_day = 4 ORDER BY captured_at", &[])
        .await?
    {
        out.push_str(&format!("    {}  taken {}\n", row.get::<_, String>(0), row.get::<_, String>(1)));
    }
    out.push_str("\nSome proxies:\n");
    for row in client
        .query("SELECT a.display_path, p.proxy_type, p.relative_path FROM proxy_files p JOIN media_assets a ON a.id = p.asset_id WHERE p.relative_path IS NOT NULL ORDER BY a.display_path, p.proxy_type LIMIT 6", &[])
        .await?
    {
        let rel: String = row.get(2);
        out.push_str(&format!("    {} {:<10} {}\n", row.get::<_, String>(0), row.get::<_, String>(1), proxies.join(rel).display()));
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
