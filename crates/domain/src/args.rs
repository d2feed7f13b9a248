//! Typed arguments of work items, one type per kind, as they travel in `work_items.payload` (JSON).
//!
//! Whoever enqueues work (the scheduler, the CLI, the operator's page, the web backend) builds these types
//! ([`WorkArgs::into_item`], [`NewWorkItem::from_args`]) instead of JSON by hand, and the handlers read them
//! back with [`WorkArgs::from_payload`], so both sides agree on every name. Each kind's arguments also name
//! what a successful run of the kind stores as its result ([`WorkArgs::Output`], in `crate::results`).
//!
//! An unknown field of a kind that takes arguments is refused: a misspelt confirmation must not be quietly
//! ignored. A kind without arguments reads any payload as its defaults.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::results::{BurstReport, CrawlReport, DeletionReport, ProxySweepReport, PurgeReport};
use crate::{AssetId, DomainError, NewWorkItem, ProxyType, Scope, WorkItem, WorkKind};

/// The arguments of one kind of work: the kind is keyed by this type.
pub trait WorkArgs: Serialize + DeserializeOwned {
    /// The kind whose payload this is.
    const KIND: WorkKind;

    /// What a successful run of the kind stores as the item's result.
    type Output: Serialize + DeserializeOwned;

    /// Reads a payload. An empty object (or `null`) is the kind's defaults when it has any.
    fn from_payload(payload: &serde_json::Value) -> Result<Self, DomainError> {
        let reason = |reason: String| DomainError::Payload { kind: Self::KIND, reason };
        let payload = match payload {
            serde_json::Value::Null => &serde_json::Value::Object(Default::default()),
            // Not a list either, which serde would take field by field in order.
            object @ serde_json::Value::Object(_) => object,
            other => return Err(reason(format!("it must be a JSON object, not {other}"))),
        };
        // With the path to the value at fault (`asset_ids[2]: …`): serde's own message does not name it.
        let args: Self = serde_path_to_error::deserialize(payload).map_err(|e| {
            let said = match e.path().to_string().as_str() {
                "." => e.inner().to_string(),
                path => format!("{path}: {}", e.inner()),
            };
            // serde says so in these words only (`de::Error::unknown_field`); its error has no kind for it.
            if e.inner().to_string().starts_with("unknown field") {
                DomainError::UnknownField { kind: Self::KIND, reason: said }
            } else {
                reason(said)
            }
        })?;
        args.check()?;
        Ok(args)
    }

    /// Refuses arguments that read well but break a rule of their kind (a crawl's folders must lie beneath its
    /// root). Checked when a payload is read and when an item is made of arguments, so whoever enqueues and the
    /// handler keep the same rule.
    fn check(&self) -> Result<(), DomainError> {
        Ok(())
    }

    /// The payload these arguments are stored as.
    fn to_payload(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("work arguments serialize to JSON")
    }

    /// Work of this kind on `scope` with these arguments. Fails when the kind does not take that scope.
    fn into_item(self, scope: Scope) -> Result<NewWorkItem, DomainError> {
        NewWorkItem::from_args(&self, scope)
    }

    /// The result a finished item of this kind stored; `None` when the item is of another kind, has no
    /// result, or one of another shape (written by an older Worker).
    fn output_of(item: &WorkItem) -> Option<Self::Output> {
        let result = item.result.as_ref().filter(|_| item.kind == Self::KIND)?;
        Self::Output::deserialize(result).ok()
    }
}

/// A crawl's arguments: both confirmations are off unless an operator gives them; a crawl of the whole root
/// unless `folders` names where a watcher saw changes (ADR 0014).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlArgs {
    /// Soft-delete what vanished although the mass-deletion guard would refuse, or although the root holds no
    /// media while the catalogue has assets for it (the library really was emptied).
    pub allow_mass_deletion: bool,
    /// The root was a mount point at the last crawl and is not one now, and that is expected (the library
    /// moved off its own mount).
    pub root_moved: bool,
    /// Only these folders, each with everything below it: paths relative to the root, `/`-separated, without
    /// `.` or `..` parts (`""` is the root itself). Empty: the whole root. What vanished is soft-deleted only
    /// inside them; the mass-deletion guard still weighs it against the config's whole library.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub folders: Vec<String>,
    /// Files a watcher saw closed after writing, with their size and mtime at that moment: each is read at once
    /// if it still has them, instead of waiting out the settle time. Only files inside `folders` count.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<ClosedFile>,
}

impl CrawlArgs {
    /// Most folders one crawl names: a watcher's window with more becomes a crawl of the whole root, and a crawl
    /// asked for again for the settling files of more folders names those of the crawl that asked.
    pub const MAX_FOLDERS: usize = 256;

    /// A crawl of what a watcher saw change: `folders` (each with its subtree) and the files it saw closed.
    pub fn of_folders(folders: Vec<String>, closed: Vec<ClosedFile>) -> Self {
        Self { folders, closed, ..Self::default() }
    }

    /// Whether this crawl covers the whole root: it names no folder, or the root's own `""` among them.
    pub fn is_whole_root(&self) -> bool {
        self.folders.is_empty() || self.folders.iter().any(String::is_empty)
    }

    /// The folders this crawl covers, in the order it walks them: the byte order of their paths, each taken
    /// with the `/` its files' paths continue with (so `a b` before `a`, whose `a/x.jpg` sorts after
    /// `a b/x.jpg`); none inside another one listed, none twice. Empty: the whole root (also when one of them is
    /// `""`). Refuses a folder, or a closed file's path, that is not relative to the root, `/`-separated, without
    /// empty, `.` or `..` parts and without NUL, naming it and what is wrong with it.
    pub fn checked_folders(&self) -> Result<Vec<String>, DomainError> {
        let refuse = |field: &str, path: &str, wrong: &str| DomainError::Payload {
            kind: WorkKind::Crawl,
            reason: format!(
                "{field}: {path:?} {wrong}; paths are relative to the storage root, `/`-separated, without empty, \
                 `.` or `..` parts"
            ),
        };
        for folder in self.folders.iter().filter(|f| !f.is_empty()) {
            beneath_root(folder).map_err(|wrong| refuse("folders", folder, wrong))?;
        }
        for file in &self.closed {
            beneath_root(&file.path).map_err(|wrong| refuse("closed", &file.path, wrong))?;
        }
        if self.folders.iter().any(String::is_empty) {
            return Ok(Vec::new());
        }
        let mut folders: Vec<&str> = self.folders.iter().map(String::as_str).collect();
        folders.sort_unstable_by(|a, b| a.bytes().chain([b'/']).cmp(b.bytes().chain([b'/'])));
        folders.dedup();
        let mut kept: Vec<String> = Vec::with_capacity(folders.len());
        for folder in folders {
            // In this order, the folders inside one come right after it.
            let inside_last =
                kept.last().is_some_and(|k| folder.strip_prefix(k.as_str()).is_some_and(|rest| rest.starts_with('/')));
            if !inside_last {
                kept.push(folder.to_owned());
            }
        }
        Ok(kept)
    }
}

/// What is wrong with a path that should lie beneath a root, if anything.
fn beneath_root(path: &str) -> Result<(), &'static str> {
    if path.starts_with('/') {
        return Err("is absolute");
    }
    if path.contains('\0') {
        return Err("holds a NUL byte");
    }
    for part in path.split('/') {
        match part {
            "" if path.is_empty() => return Err("is empty"),
            "" => return Err("has an empty part (a doubled or trailing `/`)"),
            "." => return Err("has a `.` part"),
            ".." => return Err("has a `..` part, which would leave the folder it names"),
            _ => {}
        }
    }
    Ok(())
}

/// A file a watcher saw closed after writing (inotify's `IN_CLOSE_WRITE`), as it was then.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClosedFile {
    /// Relative to the root, `/`-separated.
    pub path: String,
    /// Its size in bytes when closed.
    pub size: u64,
    /// Its mtime when closed, in nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

impl ClosedFile {
    /// A time as `stat` gives it (seconds and nanoseconds since the Unix epoch) in the nanoseconds `mtime_ns`
    /// holds: the one rule by which a watcher stamps a file and the crawl compares it (saturating past 2262).
    pub const fn stat_nanos(secs: i64, nsec: i64) -> i64 {
        secs.saturating_mul(1_000_000_000).saturating_add(nsec)
    }
}

impl WorkArgs for CrawlArgs {
    const KIND: WorkKind = WorkKind::Crawl;
    type Output = CrawlReport;

    fn check(&self) -> Result<(), DomainError> {
        self.checked_folders().map(drop)
    }
}

/// A proxy deletion's arguments: the assets whose proxies go (so the next crawl makes them again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyDeletionArgs {
    /// The assets.
    pub asset_ids: Vec<AssetId>,
    /// Only these types of proxy; every type when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_types: Option<Vec<ProxyType>>,
}

impl WorkArgs for ProxyDeletionArgs {
    const KIND: WorkKind = WorkKind::ProxyDeletion;
    type Output = DeletionReport;
}

/// Defines the arguments of kinds that take none yet: an empty object, and the kind's result. Any stored payload
/// reads as it, whatever its shape: these kinds never read their payload, and rows written before they were
/// typed (by an older CLI, which stored any JSON it was given, or by the web backend) must still run.
macro_rules! no_args {
    ($($(#[doc = $doc:literal])* $args:ident => $kind:ident, $output:ty;)*) => {$(
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        #[non_exhaustive]
        pub struct $args {}

        impl WorkArgs for $args {
            const KIND: WorkKind = WorkKind::$kind;
            type Output = $output;

            fn from_payload(_: &serde_json::Value) -> Result<Self, DomainError> {
                Ok(Self::default())
            }
        }
    )*};
}

no_args! {
    /// Burst detection's arguments: none (it looks at every active still of its config).
    BurstDetectionArgs => BurstDetection, BurstReport;
    /// A purge's arguments: none (its retention is the Worker's setting).
    PurgeArgs => Purge, PurgeReport;
    /// A proxy sweep's arguments: none (it sweeps the whole proxy root).
    ProxySweepArgs => ProxySweep, ProxySweepReport;
    /// A token cleanup's arguments: none (its grace is the Worker's setting).
    TokenCleanupArgs => TokenCleanup, DeletionReport;
    /// A work item retention's arguments: none (its retention is the Worker's setting).
    WorkItemRetentionArgs => WorkItemRetention, DeletionReport;
}

#[cfg(test)]
mod tests;
