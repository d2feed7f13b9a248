//! The project's tool belt: `cargo xtask <verb>`. Run `cargo xtask help`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod demo;
mod mutants;
mod system;

use almanac_testdb::Cluster;
use anyhow::{Context, Result, bail};

const USAGE: &str = "\
cargo xtask <verb>

  mutants-changed [--base REV]  cargo-mutants on the code changed against main (must catch 100%, ADR 0005)
  mutants --package P     cargo-mutants on a whole crate
  deps                    install the system packages the build and tests need (Debian, as root)
  demo                    run a Worker on a generated sample library with a private database, and show the result
  db start | stop | url   the private PostgreSQL cluster (dev, demo and tests); url prints the dev database URL
  migrate                 apply migrations to DATABASE_URL, or to the private cluster's dev database
  schema [--check]        write docs/schema.sql from a freshly migrated database; --check fails when it is stale
  test [ARGS…]            start the private cluster and run the whole test suite (nextest when installed)
  chaos [--trials N]      the fault suite: N trials (default 20) of each fault against real Workers, with a table
  bench queue|crawl       benchmarks (release build), JSON on stdout and in docs/benchmarks/<name>.json
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["db", "start"] => {
            let cluster = started_cluster()?;
            println!("{}", cluster.url(DEV_DATABASE));
        }
        ["db", "stop"] => Cluster::private()?.stop()?,
        ["db", "url"] => println!("{}", Cluster::private()?.url(DEV_DATABASE)),
        ["migrate"] => {
            let url = dev_database_url()?;
            let applied = runtime()?.block_on(almanac_store_pg::migrate(&url))?;
            println!("applied {} migration(s): {}", applied.len(), applied.join(", "));
        }
        ["schema"] => {
            let schema = current_schema()?;
            std::fs::write(schema_path(), schema).context("writing docs/schema.sql")?;
            println!("wrote docs/schema.sql");
        }
        ["schema", "--check"] => {
            let schema = current_schema()?;
            let committed = std::fs::read_to_string(schema_path()).unwrap_or_default();
            if schema != committed {
                bail!("docs/schema.sql is stale: run `cargo xtask schema` and commit the result");
            }
            println!("docs/schema.sql is current");
        }
        ["test", rest @ ..] => return test(rest),
        ["chaos"] => return chaos("20"),
        ["chaos", "--trials", n] => return chaos(n),
        ["bench", which @ ("queue" | "crawl")] => {
            system::ensure(if *which == "crawl" { &["libvips-tools"] } else { &[] })?;
            let (package, example) = match *which {
                "queue" => ("almanac-store-pg", "queue_bench"),
                _ => ("almanac-handlers", "crawl_bench"),
            };
            let cluster = started_cluster()?;
            let output = Command::new(cargo())
                .args(["run", "--release", "--quiet", "-p", package, "--example", example])
                .env("TEST_DATABASE_URL", cluster.url("postgres"))
                .current_dir(workspace())
                .stderr(std::process::Stdio::inherit())
                .output()?;
            let report = String::from_utf8_lossy(&output.stdout);
            print!("{report}");
            if output.status.success() {
                let path = workspace().join(format!("docs/benchmarks/{which}.json"));
                std::fs::create_dir_all(path.parent().expect("docs/benchmarks"))?;
                std::fs::write(&path, report.as_bytes())?;
                eprintln!("recorded in {}", path.display());
            }
            return Ok(exit(output.status.success()));
        }
        ["deps"] => system::ensure(&[])?,
        ["demo"] => {
            system::ensure(&[])?;
            demo::run(&workspace(), &cargo())?
        }
        ["mutants-changed", rest @ ..] => {
            let base = match rest {
                [] => None,
                ["--base", rev] => Some(*rev),
                _ => bail!("usage: cargo xtask mutants-changed [--base REV]"),
            };
            let cluster = started_cluster()?;
            let ok = mutants::changed(&workspace(), &cargo(), &cluster.url("postgres"), base)?;
            return Ok(exit(ok));
        }
        ["mutants", "--package", package] => {
            let cluster = started_cluster()?;
            let ok = mutants::package(&workspace(), &cargo(), &cluster.url("postgres"), package)?;
            return Ok(exit(ok));
        }
        ["help"] | ["--help"] | [] => print!("{USAGE}"),
        _ => bail!("unknown verb {:?}\n\n{USAGE}", args.join(" ")),
    }
    Ok(ExitCode::SUCCESS)
}

const DEV_DATABASE: &str = "almanac";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn schema_path() -> PathBuf {
    workspace().join("docs/schema.sql")
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn exit(success: bool) -> ExitCode {
    if success { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn started_cluster() -> Result<Cluster> {
    let cluster = Cluster::private()?;
    cluster.ensure_running().context("starting the private PostgreSQL cluster")?;
    runtime()?.block_on(cluster.ensure_database(DEV_DATABASE))?;
    Ok(cluster)
}

/// `DATABASE_URL` when set, else the private cluster's dev database (started if needed).
fn dev_database_url() -> Result<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) => Ok(url),
        Err(_) => Ok(started_cluster()?.url(DEV_DATABASE)),
    }
}

fn current_schema() -> Result<String> {
    let cluster = started_cluster()?;
    let rt = runtime()?;
    let db = rt.block_on(almanac_testdb::TestDatabase::try_create())?;
    let schema = cluster.dump_schema(db.url())?;
    drop(db);
    Ok(schema)
}

/// The fault suite's long form (`crates/worker/tests/chaos.rs`): its own cluster, real Worker processes, a
/// table of what each fault broke (nothing, or it fails).
fn chaos(trials: &str) -> Result<ExitCode> {
    let n: usize = trials.parse().with_context(|| format!("--trials {trials}: a number of trials, e.g. 20"))?;
    system::ensure(&[])?;
    let status = Command::new(cargo())
        .args(["test", "-p", "almanac-worker", "--test", "chaos", "--", "--ignored", "--exact", "chaos_suite"])
        .arg("--nocapture")
        .env("ALMANAC_CHAOS_TRIALS", n.to_string())
        .current_dir(workspace())
        .status()?;
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn test(extra: &[&str]) -> Result<ExitCode> {
    system::ensure(&[])?;
    let cluster = started_cluster()?;
    let nextest = Command::new(cargo()).args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    let mut command = Command::new(cargo());
    if nextest {
        command.args(["nextest", "run", "--workspace", "--no-fail-fast"]);
    } else {
        command.args(["test", "--workspace", "--no-fail-fast"]);
    }
    command.args(extra).current_dir(workspace()).env("TEST_DATABASE_URL", cluster.url("postgres"));
    let status = command.status().context("running the tests")?;
    Ok(exit(status.success()))
}
