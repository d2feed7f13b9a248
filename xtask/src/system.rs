//! The machine packages the project needs, in one list: `cargo xtask deps` installs what is missing (Debian,
//! as root), and `test`, `demo` and `bench` check them first. xtask itself needs none of them to build.

use std::process::Command;

use anyhow::{Result, bail};

/// (what is checked, how, the Debian package that provides it)
const NEEDS: [(&str, &[&str], &str); 15] = [
    (
        "PostgreSQL server binaries",
        &["sh", "-c", "ls /usr/lib/postgresql/*/bin/initdb || command -v initdb"],
        "postgresql",
    ),
    ("runuser", &["sh", "-c", "command -v runuser"], "util-linux"),
    // Debian puts it in /usr/sbin, outside a plain user's PATH; the tests run /usr/sbin/pgbouncer.
    ("PgBouncer (the tests through a pooler)", &["sh", "-c", "test -x /usr/sbin/pgbouncer"], "pgbouncer"),
    ("pkg-config", &["sh", "-c", "command -v pkg-config"], "pkg-config"),
    ("libjpeg-turbo headers", &["sh", "-c", "pkg-config --exists libturbojpeg"], "libturbojpeg0-dev"),
    ("ffmpeg", &["sh", "-c", "command -v ffmpeg && command -v ffprobe"], "ffmpeg"),
    ("heif-convert and heif-enc", &["sh", "-c", "command -v heif-convert && command -v heif-enc"], "libheif-examples"),
    ("pgrep and kill", &["sh", "-c", "command -v pgrep && command -v kill"], "procps"),
    // The Worker reads the household's zone (`TZ`, else /etc/localtime) for quiet hours and phone videos' days.
    ("the time zone database", &["sh", "-c", "test -e /usr/share/zoneinfo/Europe/Berlin"], "tzdata"),
    // The tests of a disk with a damaged inode make an ext4 image and damage it (Debian puts both in /usr/sbin).
    (
        "mkfs.ext4 and debugfs (a disk with a damaged inode)",
        &[
            "sh",
            "-c",
            "test -x /usr/sbin/mkfs.ext4 -a -x /usr/sbin/debugfs || (command -v mkfs.ext4 && command -v debugfs)",
        ],
        "e2fsprogs",
    ),
    ("promtool (checks /metrics)", &["sh", "-c", "command -v promtool"], "prometheus"),
    ("chromium (the operator's page test)", &["sh", "-c", "command -v chromium"], "chromium"),
    // Debian puts it in /usr/sbin; the page test serves the page under a path of another site's through it.
    ("nginx (the page behind a reverse proxy)", &["sh", "-c", "test -x /usr/sbin/nginx"], "nginx"),
    // A FUSE file system that answers nothing beneath its root: a library share whose server stopped answering.
    (
        "Python's llfuse (a share that stops answering)",
        &["sh", "-c", "/usr/bin/python3 -c 'import llfuse'"],
        "python3-llfuse",
    ),
    // The package brings the definitions; the locale itself is made by `make_locales` (Debian makes none).
    ("the de_DE.UTF-8 locale (tests of a German-speaking server)", &["sh", "-c", GERMAN_LOCALE_PRESENT], "locales"),
];

/// Whether the German locale exists: a server whose `lc_messages` is German must be understood alike.
const GERMAN_LOCALE_PRESENT: &str = "locale -a | grep -qix 'de_DE.utf-\\?8'";

/// Makes the German locale from the `locales` package's definitions, when it is missing and we are root.
fn make_locales() {
    if !present(&["sh", "-c", GERMAN_LOCALE_PRESENT]) && is_root() && present(&["sh", "-c", "command -v localedef"]) {
        println!("==> making the de_DE.UTF-8 locale");
        let _ = Command::new("localedef").args(["-i", "de_DE", "-f", "UTF-8", "de_DE.UTF-8"]).status();
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn present(check: &[&str]) -> bool {
    Command::new(check[0]).args(&check[1..]).output().is_ok_and(|o| o.status.success())
}

/// The Debian packages of what is missing.
pub fn missing() -> Vec<&'static str> {
    NEEDS.iter().filter(|(_, check, _)| !present(check)).map(|(_, _, package)| *package).collect()
}

/// Installs what is missing with apt-get when running as root; otherwise says what to install.
pub fn ensure(also: &[&'static str]) -> Result<()> {
    make_locales();
    let mut packages = missing();
    packages.extend(also.iter().filter(|p| !present(&["sh", "-c", &format!("dpkg -s {p} >/dev/null 2>&1")])));
    if packages.is_empty() {
        return Ok(());
    }
    let root = is_root();
    let apt = present(&["sh", "-c", "command -v apt-get"]);
    if !(root && apt) {
        bail!("missing system packages; install them with: sudo apt-get install -y {}", packages.join(" "));
    }
    println!("==> installing {}", packages.join(" "));
    install(&packages)?;
    make_locales();
    let still = missing();
    if !still.is_empty() {
        bail!("still missing after installing: {}", still.join(" "));
    }
    Ok(())
}

/// How many times the update and the install are tried before `deps` gives up: a fresh machine's mirror may fail a
/// download for a moment, and its own first `apt-get` (a boot-time upgrade) may hold dpkg's lock for minutes.
const APT_TRIES: u32 = 3;

/// apt-get's own patience: it waits for dpkg's lock instead of failing at once, and retries a failed download.
const APT_OPTIONS: [&str; 4] = ["-o", "DPkg::Lock::Timeout=600", "-o", "Acquire::Retries=5"];

/// `apt-get update` then `install` of the packages, tried again after a pause when either fails.
fn install(packages: &[&str]) -> Result<()> {
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(APT_OPTIONS)
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    for attempt in 1..=APT_TRIES {
        let done = apt(&["update", "-qq"])
            && apt(&[&["install", "-y", "-qq", "--no-install-recommends"][..], packages].concat());
        if done {
            return Ok(());
        }
        if attempt < APT_TRIES {
            eprintln!("==> apt-get failed (attempt {attempt} of {APT_TRIES}); trying again in 20 s");
            std::thread::sleep(std::time::Duration::from_secs(20));
        }
    }
    bail!(
        "apt-get could not install {} after {APT_TRIES} attempts (its messages are above): check the machine's \
         network, its Debian mirror and its free disk space, then run `cargo xtask deps` again",
        packages.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Packages a release build of the Worker needs (the image's build stage installs these).
    const BUILD_PACKAGES: [&str; 2] = ["pkg-config", "libturbojpeg0-dev"];
    /// Packages the Worker needs to run (the image's runtime stage installs these).
    const RUNTIME_PACKAGES: [&str; 4] = ["ffmpeg", "libheif-examples", "libturbojpeg0", "tzdata"];

    fn packaging(file: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging").join(file)
    }

    /// The packages each `apt-get install` line of the Dockerfile names, in order of the lines.
    fn dockerfile_installs() -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(packaging("Dockerfile")).unwrap();
        text.lines()
            .filter_map(|line| line.split_once("--no-install-recommends").map(|(_, rest)| rest))
            .map(|rest| {
                rest.split_whitespace()
                    .take_while(|w| !w.starts_with('\\') && !w.starts_with("&&"))
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_image_installs_the_same_packages_as_cargo_xtask_deps() {
        let installs = dockerfile_installs();
        assert_eq!(installs.len(), 2, "a build stage and a runtime stage: {installs:?}");
        let sorted = |v: &[&str]| {
            let mut v: Vec<String> = v.iter().map(|s| (*s).to_owned()).collect();
            v.sort();
            v
        };
        let mut build = installs[0].clone();
        let mut runtime = installs[1].clone();
        build.sort();
        runtime.sort();
        assert_eq!(build, sorted(&BUILD_PACKAGES));
        assert_eq!(runtime, sorted(&RUNTIME_PACKAGES));
        // What the build and the Worker need is what `cargo xtask deps` installs here (the runtime library comes
        // with its -dev package).
        let deps: Vec<&str> = NEEDS.iter().map(|(_, _, package)| *package).collect();
        for package in BUILD_PACKAGES.iter().chain(RUNTIME_PACKAGES.iter().filter(|p| **p != "libturbojpeg0")) {
            assert!(deps.contains(package), "{package} is in the image but not in cargo xtask deps");
        }
    }

    /// systemd accepts the unit (no unknown key, no bad value) and rates its sandbox as OK or better.
    #[test]
    fn systemd_accepts_the_unit_and_its_sandbox() {
        let unit = std::fs::read_to_string(packaging("almanac-worker.service")).unwrap();
        // `verify` wants the program to exist: the binary is not installed here.
        let dir = std::env::temp_dir().join(format!("almanac-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("almanac-worker.service");
        std::fs::write(&copy, unit.replace("ExecStart=/usr/bin/almanac-worker", "ExecStart=/bin/true")).unwrap();
        let verify =
            Command::new("systemd-analyze").arg("verify").arg(&copy).output().expect("systemd-analyze (systemd)");
        let complaints = String::from_utf8_lossy(&verify.stderr).into_owned();
        assert!(verify.status.success() && complaints.trim().is_empty(), "{complaints}");
        let security =
            Command::new("systemd-analyze").args(["security", "--offline=true"]).arg(&copy).output().unwrap();
        let report = String::from_utf8_lossy(&security.stdout).into_owned();
        let level = report.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_default().to_owned();
        let score: f64 = level.split_whitespace().find_map(|w| w.parse().ok()).unwrap_or(10.0);
        assert!(score <= 4.0, "exposure {score}: {level}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
