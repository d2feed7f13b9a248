//! Whether a scratch folder just made and opened is this process's alone ([`ours_alone`]): judged by the owner its
//! volume gives what this process makes, and, where it shows a mode that lets others write, by what it holds.

use std::path::Path;

use almanac_domain::ProxyType;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::Held;
use crate::MediaError;

/// Refuses the scratch folder `dir` unless it is this process's alone ([`owned_alone`]). It was just made, but another
/// user who may write the proxy folder could have put their own in its place before it was opened. Its owner must be
/// the one its volume gives what this process makes, found by a file made in it ([`OWNERS_OF_WHAT_WE_MAKE`]).
pub(super) fn ours_alone(dir: &Held) -> Result<(), MediaError> {
    let folder = rustix::fs::fstat(&dir.fd).map_err(|e| MediaError::write(&dir.path, e.into()))?;
    OWNERS_OF_WHAT_WE_MAKE.judge(
        folder.st_dev,
        folder.st_uid,
        || owner_of_a_file_made_in(dir),
        |why| MediaError::ProxyScratchRefused {
            path: dir.path.clone(),
            reason: format!("{why}; storage.proxy_root must be the Worker's alone"),
        },
    )?;
    let mode = folder.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        shown_writable_by_others(dir, mode)?;
    }
    Ok(())
}

/// The scratch folder shows a mode that lets others write it, where the one made was 0700: either its volume keeps no
/// modes of its own, or it is another folder of the Worker's own (one a group may write, made where the Worker's umask
/// allows it) that someone who may write the proxy folder put in its place, and perhaps placed links in. It must be
/// empty, as the one made is; it is then made 0700, so nobody else may make anything in it from now on. Where the
/// mode shown does not change, the volume keeps none: the proxies are still made, and the Worker says so once.
fn shown_writable_by_others(dir: &Held, mode: u32) -> Result<(), MediaError> {
    if !dir.is_empty().map_err(|e| MediaError::write(&dir.path, e.into()))? {
        return Err(MediaError::ProxyScratchRefused {
            path: dir.path.clone(),
            reason: format!(
                "it is not the folder the Worker made: it shows mode {mode:o} and holds files, where the one made \
                 is empty and for the Worker alone; someone who may write the proxy folder put another in its place"
            ),
        });
    }
    // A volume that refuses the change (FAT without `quiet`) keeps no modes either: what it shows next says so.
    let _ = rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(0o700));
    let now = rustix::fs::fstat(&dir.fd).map_err(|e| MediaError::write(&dir.path, e.into()))?.st_mode & 0o7777;
    if now & 0o022 != 0 {
        keeps_no_modes(&dir.path, now);
    }
    Ok(())
}

/// What [`OwnersOfWhatWeMake`] knows, for the Worker's life.
static OWNERS_OF_WHAT_WE_MAKE: OwnersOfWhatWeMake = OwnersOfWhatWeMake(std::sync::Mutex::new(Vec::new()));

/// The owner each volume (by device) gave the last file this process made to judge a scratch folder: a folder showing
/// that owner is its own without another file made (on a NAS, four round trips for each photo). Any other owner is
/// judged by a new file, so a volume whose mapping of users changed (remounted squashing) is learnt again, never
/// refused for it. Not compared with this process's user: the owners a squashing or remapping volume shows (NFS,
/// CIFS with Unix extensions) are its server's, and a folder of the server's user of that number is not ours.
#[derive(Debug, Default)]
pub(super) struct OwnersOfWhatWeMake(std::sync::Mutex<Vec<(u64, u32)>>);

impl OwnersOfWhatWeMake {
    /// Whether a folder on `device` owned by `owner` is ours: by the owner known for the device, or else by the
    /// owner of a file `made` now (then known); refused with `refuse` and why otherwise.
    pub(super) fn judge(
        &self,
        device: u64,
        owner: u32,
        made: impl FnOnce() -> Result<u32, MediaError>,
        refuse: impl FnOnce(String) -> MediaError,
    ) -> Result<(), MediaError> {
        let known = |owners: &Vec<(u64, u32)>| owners.iter().find(|(d, _)| *d == device).map(|(_, o)| *o);
        if known(&self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())) == Some(owner) {
            return Ok(());
        }
        let made_by_us = made()?;
        let mut owners = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        owners.retain(|(d, _)| *d != device);
        owners.push((device, made_by_us));
        drop(owners);
        owned_alone(owner, made_by_us).map_err(refuse)
    }
}

/// The owner the volume gives a file this process makes in `dir`: one is made, looked at, closed and removed.
fn owner_of_a_file_made_in(dir: &Held) -> Result<u32, MediaError> {
    let probe = ProxyType::Preview.temporary_file_name().expect("a file proxy");
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let failed = |e: Errno| MediaError::write(dir.join(probe), e.into());
    let made = rustix::fs::openat(&dir.fd, probe, flags, Mode::from_raw_mode(0o600)).map_err(failed)?;
    let file = rustix::fs::fstat(&made).map_err(failed)?;
    drop(made);
    rustix::fs::unlinkat(&dir.fd, probe, AtFlags::empty()).map_err(failed)?;
    Ok(file.st_uid)
}

/// Says once, for the Worker's life, that the proxy volume shows a folder the Worker made for itself alone as one
/// others may write: it keeps no modes of its own (NTFS, a CIFS mount with `dir_mode=0777` or `noperm`, FAT with
/// `umask=000`, modes derived from a NAS's ACLs), and its kernel or server lets others write where the mode says so.
/// The proxies are still made: refusing would fail every file of such a volume, which worked before.
fn keeps_no_modes(path: &Path, mode: u32) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            event = "proxy_volume_keeps_no_modes",
            folder = %path.display(),
            mode = format!("{mode:o}"),
            "the proxy volume shows a folder the Worker made for itself alone (mode 0700) as one others may write: \
             anyone who may write the volume could place a link where the Worker's tools write. Mount it so that \
             folders are not writable by others (CIFS: uid= the Worker's user and dir_mode=0755; FAT or exFAT: \
             umask=022; NTFS: a permissions option, or another file system for proxies)"
        );
    });
}

/// Whether a folder owned by `owner` is this process's, judged by `made_by_us`, the owner of a file this process has
/// just made in it: owned by whoever the volume says owns what this process makes (itself; the user an NFS export
/// squashes it to; the `uid=` of a CIFS or FAT mount, which keep no owners). Why not, otherwise.
pub(super) fn owned_alone(owner: u32, made_by_us: u32) -> Result<(), String> {
    if owner != made_by_us {
        return Err(format!(
            "it is not the folder the Worker made (owner {owner}, where what the Worker makes is owned by \
             {made_by_us}): someone else who may write the proxy folder put theirs in its place"
        ));
    }
    Ok(())
}
