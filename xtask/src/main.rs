//! The project's tool belt: `cargo xtask <verb>`. Run `cargo xtask help`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod demo;
mod dist;
mod docs;
mod load;
mod mutants;
mod system;

/// The table of log events and metrics, as the Worker has it (std only, so it can be included here).
#[path = "../../crates/worker/src/observe/table.rs"]
#[allow(dead_code, reason = "xtask reads only what the docs show")]
mod observe_table;

use almanac_testdb::Cluster;
use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

/// The project's tool belt.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// cargo-mutants on the code changed against main (must catch 100%, ADR 0005).
    MutantsChanged {
        /// Compare against this revision instead of main.
        #[arg(long)]
        base: Option<String>,
    },
    /// cargo-mutants on a whole crate.
    Mutants {
        #[arg(long)]
        package: String,
    },
    /// Install the system packages the build and tests need (Debian, as root).
    Deps,
    /// Run a Worker on a generated sample library with a private database, and show the result.
    Demo,
    /// The private PostgreSQL cluster (dev, demo and tests).
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
    /// Apply migrations to DATABASE_URL, or to the private cluster's dev database.
    Migrate,
    /// Write docs/schema.sql from a freshly migrated database.
    Schema {
        /// Fail when docs/schema.sql is stale instead of writing it.
        #[arg(long)]
        check: bool,
    },
    /// Write the generated parts of the docs (operations.md's events and metrics) from the tables in the code.
    Docs {
        /// Fail when they are stale instead of writing them.
        #[arg(long)]
        check: bool,
    },
    /// Start the private cluster and run the whole test suite (nextest when installed); ARGS go to the runner.
    /// `--under-load [N]` first runs N CPU-bound processes beside the suite (4 when N is left out), ending with
    /// it: the suite must pass on a busy machine too.
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A CPU-bound busy loop beside the suite (`test --under-load`), ending as soon as PARENT is no longer its
    /// parent: it cannot outlive the xtask that started it.
    #[command(hide = true)]
    Burn { parent: u32 },
    /// The fault suite against real Workers, with a table.
    Chaos {
        /// Trials of each fault.
        #[arg(long, default_value_t = 20)]
        trials: usize,
    },
    /// Build the Debian package into target/debian/ (cargo-deb, installed when missing).
    Dist {
        /// Cargo profile: release for a package to ship, dev to check the packaging quickly.
        #[arg(long, default_value = "release")]
        profile: String,
        /// Then install it on this machine (root, Debian), check what it installed, and purge it again.
        #[arg(long)]
        check_install: bool,
    },
    /// Benchmarks (release build): JSON on stdout and in docs/benchmarks/<name>.json.
    Bench {
        #[arg(value_enum)]
        which: Bench,
        /// The crawl benchmark's unchanged library for the re-crawl (100,000 when left out; above that, 100,000
        /// is measured too, as the baseline for memory and open files).
        #[arg(long)]
        files: Option<usize>,
    },
}

#[derive(Subcommand)]
enum DbAction {
    /// Start it (if needed) and print the dev database URL.
    Start,
    /// Stop it.
    Stop,
    /// Print the dev database URL.
    Url,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bench {
    Queue,
    Crawl,
    /// The claim at 10,000 configs and 1,000,000 queued items, beside the textbook claim without the per-config rule.
    Claim,
    /// 1, 2, 4, 8 and 16 Worker processes on one database.
    Workers,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.verb) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(verb: Verb) -> Result<ExitCode> {
    match verb {
        Verb::Db { action: DbAction::Start } => {
            let cluster = started_cluster()?;
            println!("{}", cluster.url(DEV_DATABASE));
        }
        Verb::Db { action: DbAction::Stop } => Cluster::private()?.stop()?,
        Verb::Db { action: DbAction::Url } => println!("{}", Cluster::private()?.url(DEV_DATABASE)),
        Verb::Migrate => {
            let url = dev_database_url()?;
            let applied = runtime()?.block_on(almanac_store_pg::migrate(&url))?;
            println!("applied {} migration(s): {}", applied.len(), applied.join(", "));
        }
        Verb::Schema { check: false } => {
            let schema = current_schema()?;
            std::fs::write(schema_path(), schema).context("writing docs/schema.sql")?;
            println!("wrote docs/schema.sql");
        }
        Verb::Schema { check: true } => {
            let schema = current_schema()?;
            let committed = std::fs::read_to_string(schema_path()).unwrap_or_default();
            if schema != committed {
                bail!("docs/schema.sql is stale: run `cargo xtask schema` and commit the result");
            }
            println!("docs/schema.sql is current");
        }
        Verb::Docs { check } => docs::run(&workspace(), check)?,
        Verb::Test { args } => {
            let (load, args) = under_load(&args);
            return test(&args.iter().map(String::as_str).collect::<Vec<_>>(), load);
        }
        Verb::Burn { parent } => load::burn(parent),
        Verb::Chaos { trials } => return chaos(trials),
        Verb::Bench { which, files } => {
            let (name, package, example) = match which {
                Bench::Queue => ("queue", "almanac-store-pg", "queue_bench"),
                Bench::Crawl => ("crawl", "almanac-handlers", "crawl_bench"),
                Bench::Claim => ("claim", "almanac-store-pg", "claim_bench"),
                Bench::Workers => ("workers", "almanac-store-pg", "workers_bench"),
            };
            system::ensure(if which == Bench::Crawl { &["libvips-tools"] } else { &[] })?;
            let cluster = started_cluster()?;
            let mut command = Command::new(cargo());
            if let Some(files) = files {
                command.env("ALMANAC_BENCH_FILES", files.to_string());
            }
            let output = command
                .args(["run", "--release", "--quiet", "-p", package, "--example", example])
                .env("TEST_DATABASE_URL", cluster.url("postgres"))
                .current_dir(workspace())
                .stderr(std::process::Stdio::inherit())
                .output()?;
            let report = String::from_utf8_lossy(&output.stdout);
            print!("{report}");
            if output.status.success() {
                let path = workspace().join(format!("docs/benchmarks/{name}.json"));
                std::fs::create_dir_all(path.parent().expect("docs/benchmarks"))?;
                std::fs::write(&path, report.as_bytes())?;
                eprintln!("recorded in {}", path.display());
            }
            return Ok(exit(output.status.success()));
        }
        Verb::Dist { profile, check_install } => {
            let deb = dist::build(&workspace(), &cargo(), &profile)?;
            if check_install {
                dist::check_install(&deb)?;
            }
        }
        Verb::Deps => system::ensure(&[])?,
        Verb::Demo => {
            system::ensure(&[])?;
            demo::run(&workspace(), &cargo())?
        }
        Verb::MutantsChanged { base } => {
            let cluster = started_cluster()?;
            let ok = mutants::changed(&workspace(), &cargo(), &cluster.url("postgres"), base.as_deref())?;
            return Ok(exit(ok));
        }
        Verb::Mutants { package } => {
            let cluster = started_cluster()?;
            let ok = mutants::package(&workspace(), &cargo(), &cluster.url("postgres"), &package)?;
            return Ok(exit(ok));
        }
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

/// The fault suite's long form (`tests/chaos.rs`): its own cluster, real Worker processes, a
/// table of what each fault broke (nothing, or it fails).
fn chaos(n: usize) -> Result<ExitCode> {
    system::ensure(&[])?;
    let status = Command::new(cargo())
        .args(["test", "-p", "almanac-system-tests", "--test", "chaos", "--", "--ignored", "--exact", "chaos_suite"])
        .arg("--nocapture")
        .env("ALMANAC_CHAOS_TRIALS", n.to_string())
        .current_dir(workspace())
        .status()?;
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// How many CPU-bound processes `test` runs beside the suite, and the runner's arguments: `--under-load [N]`
/// (N = [`load::DEFAULT`] when no number follows) when the arguments begin with it, else none.
fn under_load(args: &[String]) -> (usize, &[String]) {
    match args {
        [flag, n, rest @ ..] if flag == "--under-load" && n.parse::<usize>().is_ok() => {
            (n.parse().expect("checked"), rest)
        }
        [flag, rest @ ..] if flag == "--under-load" => (load::DEFAULT, rest),
        _ => (0, args),
    }
}

fn test(extra: &[&str], load: usize) -> Result<ExitCode> {
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
    // The load ends when this value is dropped: after the suite, whatever its outcome (and on an error).
    let burners = load::Load::start(load)?;
    let started = std::time::Instant::now();
    let status = command.status().context("running the tests");
    let took = started.elapsed();
    drop(burners);
    let status = status?;
    if load > 0 {
        println!(
            "==> the suite {} in {:.0?} beside {load} CPU-bound processes ({} cores)",
            if status.success() { "passed" } else { "failed" },
            took,
            std::thread::available_parallelism().map_or(0, usize::from)
        );
    }
    Ok(exit(status.success()))
}

#[cfg(test)]
mod cli_tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn verbs_parse_as_documented_and_test_passes_its_arguments_on() {
        let parse = |args: &[&str]| Cli::try_parse_from(std::iter::once("cargo xtask").chain(args.iter().copied()));
        let test = |args: &[&str]| match parse(args).unwrap().verb {
            Verb::Test { args } => {
                let (load, args) = under_load(&args);
                (load, args.to_vec())
            }
            _ => panic!("test"),
        };
        assert_eq!(
            test(&["test", "-p", "almanac-domain", "--no-capture"]),
            (0, strings(&["-p", "almanac-domain", "--no-capture"]))
        );
        assert_eq!(test(&["test"]), (0, vec![]));
        // Beside a load: four processes unless told, the runner's arguments still passed on after it.
        assert_eq!(test(&["test", "--under-load"]), (4, vec![]));
        assert_eq!(test(&["test", "--under-load", "2"]), (2, vec![]));
        assert_eq!(test(&["test", "--under-load", "-p", "almanac-domain"]), (4, strings(&["-p", "almanac-domain"])));
        assert_eq!(
            test(&["test", "--under-load", "6", "-p", "almanac-system-tests", "--test", "browser"]),
            (6, strings(&["-p", "almanac-system-tests", "--test", "browser"]))
        );
        // A word that is not a number after it is the runner's (a test filter).
        assert_eq!(test(&["test", "--under-load", "e2e"]), (4, strings(&["e2e"])));
        // After the runner's arguments begin, everything is theirs.
        assert_eq!(test(&["test", "-p", "x", "--under-load"]), (0, strings(&["-p", "x", "--under-load"])));
        assert!(matches!(parse(&["burn", "1"]).unwrap().verb, Verb::Burn { parent: 1 }));
        assert!(matches!(parse(&["chaos", "--trials", "3"]).unwrap().verb, Verb::Chaos { trials: 3 }));
        assert!(matches!(parse(&["schema", "--check"]).unwrap().verb, Verb::Schema { check: true }));
        assert!(matches!(parse(&["docs", "--check"]).unwrap().verb, Verb::Docs { check: true }));
        assert!(matches!(parse(&["bench", "crawl"]).unwrap().verb, Verb::Bench { which: Bench::Crawl, files: None }));
        assert!(matches!(
            parse(&["bench", "crawl", "--files", "1000000"]).unwrap().verb,
            Verb::Bench { which: Bench::Crawl, files: Some(1_000_000) }
        ));
        match parse(&["mutants-changed", "--base", "HEAD~1"]).unwrap().verb {
            Verb::MutantsChanged { base } => assert_eq!(base.as_deref(), Some("HEAD~1")),
            _ => panic!("mutants-changed"),
        }
        let help = parse(&["mutants-changed", "--help"]).err().expect("help stops the parse");
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp, "help is not an error (exit 0)");
        match parse(&["dist", "--profile", "dev", "--check-install"]).unwrap().verb {
            Verb::Dist { profile, check_install } => assert!(profile == "dev" && check_install),
            _ => panic!("dist"),
        }
        assert!(
            matches!(parse(&["dist"]).unwrap().verb, Verb::Dist { profile, check_install: false } if profile == "release")
        );
        assert!(matches!(parse(&["bench", "claim"]).unwrap().verb, Verb::Bench { which: Bench::Claim, files: None }));
        assert!(matches!(parse(&["bench", "workers"]).unwrap().verb, Verb::Bench { which: Bench::Workers, .. }));
        assert!(parse(&["bench", "disk"]).is_err());
        assert!(parse(&["chaos", "--trials", "many"]).is_err());
    }
}
