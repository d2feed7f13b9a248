//! The machine packages the project needs, in one list: `cargo xtask deps` installs what is missing (Debian,
//! as root), and `test`, `demo` and `bench` check them first. xtask itself needs none of them to build.

use std::process::Command;

use anyhow::{Result, bail};

/// (what is checked, how, the Debian package that provides it)
const NEEDS: [(&str, &[&str], &str); 7] = [
    (
        "PostgreSQL server binaries",
        &["sh", "-c", "ls /usr/lib/postgresql/*/bin/initdb || command -v initdb"],
        "postgresql",
    ),
    ("runuser", &["sh", "-c", "command -v runuser"], "util-linux"),
    ("pkg-config", &["sh", "-c", "command -v pkg-config"], "pkg-config"),
    ("libjpeg-turbo headers", &["sh", "-c", "pkg-config --exists libturbojpeg"], "libturbojpeg0-dev"),
    ("ffmpeg", &["sh", "-c", "command -v ffmpeg && command -v ffprobe"], "ffmpeg"),
    ("heif-convert and heif-enc", &["sh", "-c", "command -v heif-convert && command -v heif-enc"], "libheif-examples"),
    ("pgrep and kill", &["sh", "-c", "command -v pgrep && command -v kill"], "procps"),
];

fn present(check: &[&str]) -> bool {
    Command::new(check[0]).args(&check[1..]).output().is_ok_and(|o| o.status.success())
}

/// The Debian packages of what is missing.
pub fn missing() -> Vec<&'static str> {
    NEEDS.iter().filter(|(_, check, _)| !present(check)).map(|(_, _, package)| *package).collect()
}

/// Installs what is missing with apt-get when running as root; otherwise says what to install.
pub fn ensure(also: &[&'static str]) -> Result<()> {
    let mut packages = missing();
    packages.extend(also.iter().filter(|p| !present(&["sh", "-c", &format!("dpkg -s {p} >/dev/null 2>&1")])));
    if packages.is_empty() {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = present(&["sh", "-c", "command -v apt-get"]);
    if !(root && apt) {
        bail!("missing system packages; install them with: sudo apt-get install -y {}", packages.join(" "));
    }
    println!("==> installing {}", packages.join(" "));
    let update = Command::new("apt-get").args(["update", "-qq"]).status()?;
    let install = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?;
    if !update.success() || !install.success() {
        bail!("apt-get could not install {}", packages.join(" "));
    }
    let still = missing();
    if !still.is_empty() {
        bail!("still missing after installing: {}", still.join(" "));
    }
    Ok(())
}
