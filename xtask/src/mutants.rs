//! `cargo xtask mutants-changed [--base REV]` and `cargo xtask mutants --package P` (ADR 0005), and the check
//! that every `#[mutants::skip]` has its row in ADR 0005 and every row names a skipped function.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The cargo-mutants version the project is tested with.
const CARGO_MUTANTS_VERSION: &str = "27.1.0";

fn ensure_cargo_mutants(cargo: &str) -> Result<()> {
    let installed = Command::new(cargo).args(["mutants", "--version"]).output();
    if installed
        .as_ref()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains(CARGO_MUTANTS_VERSION))
    {
        return Ok(());
    }
    println!("==> installing cargo-mutants {CARGO_MUTANTS_VERSION}");
    let status = Command::new(cargo)
        .args(["install", "cargo-mutants", "--locked", "--version", CARGO_MUTANTS_VERSION])
        .status()?;
    if !status.success() {
        bail!("installing cargo-mutants failed");
    }
    Ok(())
}

/// The revision to diff against: `--base`, else the merge-base with main, or the previous commit on main.
fn base_revision(workspace: &Path, base: Option<&str>) -> Result<String> {
    if let Some(b) = base {
        return Ok(b.to_owned());
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).current_dir(workspace).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "HEAD"]).context("not a git checkout")?;
    let main = git(&["rev-parse", "main"]).or_else(|| git(&["rev-parse", "origin/main"]));
    match main {
        Some(main) if main != head => git(&["merge-base", "HEAD", &main]).context("no merge-base with main"),
        _ => Ok("HEAD~1".to_owned()),
    }
}

/// Runs cargo-mutants with the project's settings (`.cargo/mutants.toml`) against the private cluster.
fn run_mutants(workspace: &Path, cargo: &str, database_url: &str, args: &[String]) -> Result<bool> {
    ensure_cargo_mutants(cargo)?;
    let status = Command::new(cargo)
        .arg("mutants")
        .args(args)
        .current_dir(workspace)
        .env("TEST_DATABASE_URL", database_url)
        .status()?;
    let outcome = workspace.join("mutants.out/outcomes.json");
    if let Ok(text) = std::fs::read_to_string(&outcome) {
        for line in text.lines().filter(|l| l.contains("\"MissedMutant\"") || l.contains("\"Timeout\"")) {
            println!("{line}");
        }
    }
    for name in ["missed.txt", "timeout.txt"] {
        let list = std::fs::read_to_string(workspace.join("mutants.out").join(name)).unwrap_or_default();
        if !list.trim().is_empty() {
            println!("{name}:\n{list}");
        }
    }
    Ok(status.success())
}

pub fn changed(workspace: &Path, cargo: &str, database_url: &str, base: Option<&str>) -> Result<bool> {
    check_skips_documented(workspace)?;
    let base = base_revision(workspace, base)?;
    let diff = Command::new("git").args(["diff", &base, "--", "crates"]).current_dir(workspace).output()?;
    if !diff.status.success() {
        bail!("git diff {base} failed: {}", String::from_utf8_lossy(&diff.stderr));
    }
    if diff.stdout.is_empty() {
        println!("no change under crates/ since {base}: nothing to mutate");
        return Ok(true);
    }
    let diff_path = workspace.join("target/mutants-changed.diff");
    std::fs::create_dir_all(diff_path.parent().expect("target"))?;
    std::fs::write(&diff_path, &diff.stdout)?;
    println!("==> mutating the code changed since {base}");
    let in_diff = ["--in-diff".into(), diff_path.display().to_string(), "--in-place".into()];
    let libraries = run_mutants(
        workspace,
        cargo,
        database_url,
        &[&in_diff[..], &["--exclude".into(), BINARY_FILES.into()]].concat(),
    )?;
    let binary = binary_passes(workspace, cargo, database_url, &in_diff)?;
    Ok(libraries && binary)
}

pub fn package(workspace: &Path, cargo: &str, database_url: &str, package: &str) -> Result<bool> {
    check_skips_documented(workspace)?;
    let args = ["--package".into(), package.to_owned(), "--in-place".into()];
    if package == BINARY_PACKAGE {
        return binary_passes(workspace, cargo, database_url, &args);
    }
    run_mutants(workspace, cargo, database_url, &args)
}

/// The binary's mutants in two stages: against its own tests first (seconds a mutant), then only those the
/// first stage did not catch against both packages' tests (minutes a mutant; `--iterate` leaves out what the
/// first stage caught or could not build). The answer is the second stage's.
fn binary_passes(workspace: &Path, cargo: &str, database_url: &str, args: &[String]) -> Result<bool> {
    println!("==> the binary's changed code, against its own tests");
    let own = [args, &["--file".into(), BINARY_FILES.into()]].concat();
    if run_mutants(workspace, cargo, database_url, &own)? {
        return Ok(true);
    }
    println!("==> what its own tests did not catch, against the black-box tests as well");
    run_mutants(workspace, cargo, database_url, &[args, &["--iterate".into()], &binary_pass()].concat())
}

/// The binary's crate: most of what it does (start, run, the CLI's verbs) is tested by running it as a
/// process from the black-box package (`tests/`), which cargo-mutants would not run for a mutant in the
/// binary's crate by itself (it tests only the mutated package). So its mutants get a pass of their own with
/// both packages' tests. Its timeout is set, not derived: cargo-mutants times the baseline on the mutated
/// package's tests alone (a second), and the black-box tests take minutes.
const BINARY_PACKAGE: &str = "almanac-worker";
const BINARY_FILES: &str = "crates/worker/**";

fn binary_pass() -> Vec<String> {
    [
        "--file",
        BINARY_FILES,
        "--test-package",
        BINARY_PACKAGE,
        "--test-package",
        "almanac-system-tests",
        "--timeout",
        "900",
    ]
    .map(String::from)
    .to_vec()
}

/// Functions marked `#[mutants::skip]` under `crates/`.
pub fn skipped_functions(workspace: &Path) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut stack = vec![workspace.join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)?;
                let mut lines = text.lines();
                while let Some(line) = lines.next() {
                    if line.trim() == "#[mutants::skip]" {
                        let signature = lines.by_ref().find(|l| l.contains("fn ")).unwrap_or_default();
                        let name = signature.split("fn ").nth(1).unwrap_or_default();
                        let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        names.insert(name);
                    }
                }
            }
        }
    }
    Ok(names)
}

/// Function names in the first column of ADR 0005's table (the last `::` segment of each backticked name).
pub fn documented_functions(adr: &str) -> BTreeSet<String> {
    adr.lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let first = l.split('|').nth(1).unwrap_or_default();
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|name| name.rsplit("::").next().unwrap_or(name).to_owned())
                .filter(|name| {
                    name.chars().all(|c| c.is_alphanumeric() || c == '_') && name.contains(|c: char| c.is_lowercase())
                })
                .collect::<Vec<_>>()
        })
        .filter(|n| n != "store-pg")
        .collect()
}

pub fn check_skips_documented(workspace: &Path) -> Result<()> {
    let skipped = skipped_functions(workspace)?;
    let adr = std::fs::read_to_string(workspace.join("docs/adr/0005-mutation-testing.md"))?;
    let documented = documented_functions(&adr);
    let undocumented: Vec<_> = skipped.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&skipped).collect();
    if !undocumented.is_empty() || !stale.is_empty() {
        bail!(
            "ADR 0005 and #[mutants::skip] disagree.\n  skipped without a row: {undocumented:?}\n  rows naming no skipped function: {stale:?}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_skip_has_an_adr_row_and_every_row_a_skip() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        check_skips_documented(workspace).unwrap();
        assert!(skipped_functions(workspace).unwrap().contains("claim_with"));
    }

    #[test]
    fn adr_rows_are_read_by_their_first_column() {
        let adr = "| item | why | covered by |\n|---|---|---|\n| `PgStore::claim`, `claim_with` | x | `a_test` |\n| `store-pg` `get` | y | `b` |\n";
        let names: Vec<String> = documented_functions(adr).into_iter().collect();
        assert_eq!(names, ["claim", "claim_with", "get"]);
    }
}
