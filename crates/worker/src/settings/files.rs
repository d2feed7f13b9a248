//! Which settings file a command reads, and reading it.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// Where the package puts the settings, and its systemd unit runs the Worker with (`--config-file`, checked by a
/// test against `packaging/almanac-worker.service`).
pub const INSTALLED_FILE: &str = "/etc/almanac/worker.toml";

/// The settings file a command reads when none is named (`--config-file`): `almanac.toml` in the current folder,
/// else the installed one ([`INSTALLED_FILE`]), when present. An operator's `almanac-worker config add …` in a shell
/// on the NAS then reads the service's settings (its database, its proxy root), not the defaults.
pub fn default_file() -> Option<PathBuf> {
    first_file(&[Path::new("almanac.toml"), Path::new(INSTALLED_FILE)])
}

/// The first of `candidates` that is a file, or may be one ([`may_be_a_file`]).
pub(super) fn first_file(candidates: &[&Path]) -> Option<PathBuf> {
    candidates.iter().find(|p| may_be_a_file(p)).map(|p| p.to_path_buf())
}

/// Whether `path` is a file, or may be one: a path this user cannot look at (the package's folder closed to
/// others) may, so that reading it says why, rather than the defaults being read silently.
fn may_be_a_file(path: &Path) -> bool {
    match std::fs::metadata(path) {
        Ok(m) => m.is_file(),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// The text of the settings file at `path`, or why it cannot be read (named, with what to do).
pub(super) fn read(path: &Path) -> Result<String> {
    if !may_be_a_file(path) {
        bail!("the configuration file {} does not exist", path.display());
    }
    std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "the configuration file {} cannot be read by this user ({e}): run the command as the service's user or \
             root (the package's file belongs to root and the group almanac), or name another with --config-file",
            path.display()
        )
    })
}
