//! `cargo xtask dist`: the Debian package, built by cargo-deb from `[package.metadata.deb]` in
//! `crates/worker/Cargo.toml` (the binary, the systemd unit, `/etc/almanac/worker.toml`, the docs, a postinst
//! that makes the `almanac` user). With `--check-install` it is installed on this machine, looked at and
//! purged again: what CI can verify of a package without a Debian machine of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const PACKAGE: &str = "almanac-worker";

/// The cargo-deb this is tested with (later versions refuse `--profile dev`, which the CI check uses to reuse the
/// test build instead of a release build of its own).
const CARGO_DEB: &str = "3.8.0";

/// Builds the package with `profile` and returns its path.
pub fn build(workspace: &Path, cargo: &str, profile: &str) -> Result<PathBuf> {
    ensure_cargo_deb(cargo)?;
    let out_dir = workspace.join("target/debian");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)?;
    let status = Command::new(cargo)
        .args(["deb", "-p", PACKAGE, "--profile", profile, "--output"])
        .arg(&out_dir)
        .current_dir(workspace)
        .status()
        .context("running cargo deb")?;
    if !status.success() {
        bail!("cargo deb failed");
    }
    let deb = std::fs::read_dir(&out_dir)?
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("cargo deb wrote no .deb")?;
    println!("built {}", deb.display());
    Ok(deb)
}

fn ensure_cargo_deb(cargo: &str) -> Result<()> {
    let installed = Command::new(cargo).args(["deb", "--version"]).output();
    if installed.is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains(CARGO_DEB)) {
        return Ok(());
    }
    println!("==> installing cargo-deb (about a minute)");
    // gzip instead of the default lzma: no C library to build; dpkg reads either.
    let status = Command::new(cargo)
        .args([
            "install",
            "cargo-deb",
            "--version",
            CARGO_DEB,
            "--locked",
            "--no-default-features",
            "--features",
            "gzip",
        ])
        .status()
        .context("running cargo install cargo-deb")?;
    if !status.success() {
        bail!("could not install cargo-deb");
    }
    Ok(())
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program).args(args).output().with_context(|| format!("running {program}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("`{program} {}` failed: {text}", args.join(" "));
    }
    Ok(text)
}

/// Installs `deb` here (as root, on Debian), checks what it installed, and purges it again.
pub fn check_install(deb: &Path) -> Result<()> {
    if run("dpkg", &["-s", PACKAGE]).is_ok() {
        bail!("{PACKAGE} is already installed on this machine; the check would replace it. Remove it first");
    }
    let deb = deb.to_str().context("a UTF-8 path")?;
    let result = installed_checks(deb);
    let purged = run("dpkg", &["--purge", PACKAGE]);
    result?;
    purged?;
    if Path::new("/usr/bin/almanac-worker").exists() || Path::new("/etc/almanac/worker.toml").exists() {
        bail!("dpkg --purge left the binary or the settings behind");
    }
    println!("the package installs, runs, and purges cleanly");
    Ok(())
}

fn installed_checks(deb: &str) -> Result<()> {
    run("dpkg", &["-i", deb]).context("installing the package (its dependencies come from `cargo xtask deps`)")?;
    let version = run("/usr/bin/almanac-worker", &["--version"])?;
    let expected = format!("{PACKAGE} {}", worker_version()?);
    if version.trim() != expected {
        bail!("almanac-worker --version said {version:?}, expected {expected:?}");
    }
    println!("installed: {}", version.trim());
    let unit = "/lib/systemd/system/almanac-worker.service";
    if !Path::new(unit).exists() && !Path::new("/usr/lib/systemd/system/almanac-worker.service").exists() {
        bail!("the package has no systemd unit at {unit}");
    }
    run("getent", &["passwd", "almanac"]).context("the postinst makes the almanac user")?;
    let settings = run("stat", &["-c", "%a %U %G", "/etc/almanac/worker.toml"])?;
    if settings.trim() != "640 root almanac" {
        bail!("/etc/almanac/worker.toml is {}, expected 640 root almanac (it may hold a password)", settings.trim());
    }
    let state = run("stat", &["-c", "%U", "/var/lib/almanac/proxies"])?;
    if state.trim() != "almanac" {
        bail!("/var/lib/almanac/proxies belongs to {}, not almanac", state.trim());
    }
    if Command::new("systemd-analyze").arg("--version").output().is_ok() {
        let path = if Path::new(unit).exists() { unit } else { "/usr/lib/systemd/system/almanac-worker.service" };
        let said = run("systemd-analyze", &["verify", path])?;
        if !said.trim().is_empty() {
            bail!("systemd-analyze verify complains about the installed unit: {said}");
        }
    }
    Ok(())
}

/// The Worker's version, as its manifest gives it.
fn worker_version() -> Result<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/worker/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = ").map(|v| v.trim_matches('"').to_owned()))
        .context("crates/worker/Cargo.toml names no version")
}
