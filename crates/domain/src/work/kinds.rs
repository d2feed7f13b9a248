//! The work kinds, from one table: each kind's name (as stored, as serialized, as typed on the command line), the
//! scope it takes and its typed arguments. Everything else about the kinds (the list, parsing, the scope rule,
//! reading a payload as the kind's arguments, the database's CHECK constraints, which a contract test compares
//! against this table) is read from it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{DomainError, NewWorkItem};
use crate::args::{
    BurstDetectionArgs, CrawlArgs, ProxyDeletionArgs, ProxySweepArgs, PurgeArgs, TokenCleanupArgs, WorkArgs,
    WorkItemRetentionArgs,
};
use crate::ids::StorageConfigId;

/// Defines [`WorkKind`] from the table below: the enum, [`WorkKind::ALL`], [`WorkKind::as_str`],
/// [`WorkKind::scope_rule`] and the reading of a payload as the kind's arguments, so a kind is added in one line
/// (and a line whose arguments belong to another kind does not compile).
macro_rules! work_kinds {
    ($($(#[doc = $doc:literal])* $kind:ident = $name:literal, $scope:ident, $args:ty;)*) => {
        /// What a work item does. Stored as text (`crawl`, `burst_detection`, …).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum WorkKind {
            $($(#[doc = $doc])* #[serde(rename = $name)] $kind,)*
        }

        impl WorkKind {
            /// Every kind, in a stable order.
            pub const ALL: [WorkKind; [$($name),*].len()] = [$(WorkKind::$kind),*];

            /// The kind's name as stored in the database.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(WorkKind::$kind => $name,)*
                }
            }

            /// The scope this kind takes.
            pub const fn scope_rule(self) -> ScopeRule {
                match self {
                    $(WorkKind::$kind => ScopeRule::$scope,)*
                }
            }

            /// A payload read as this kind's arguments, then enqueued as its item.
            pub(super) fn typed_item(self, payload: &serde_json::Value, scope: Scope) -> Result<NewWorkItem, DomainError> {
                match self {
                    $(WorkKind::$kind => NewWorkItem::from_args(&<$args>::from_payload(payload)?, scope),)*
                }
            }
        }

        // Each line's arguments are that kind's.
        $(const _: () = assert!(<$args as WorkArgs>::KIND as usize == WorkKind::$kind as usize);)*
    };
}

work_kinds! {
    /// Walk a config's folder, ingest new or changed media, soft-delete what vanished.
    Crawl = "crawl", Config, CrawlArgs;
    /// Group a config's rapid-fire shots into bursts.
    BurstDetection = "burst_detection", Config, BurstDetectionArgs;
    /// Remove a config's soft-deleted assets past retention: proxy files first, then rows.
    Purge = "purge", Config, PurgeArgs;
    /// Delete the proxies of given assets, so they are regenerated.
    ProxyDeletion = "proxy_deletion", Either, ProxyDeletionArgs;
    /// Delete orphan proxy files older than an hour.
    ProxySweep = "proxy_sweep", Unscoped, ProxySweepArgs;
    /// Delete expired refresh tokens.
    TokenCleanup = "token_cleanup", Unscoped, TokenCleanupArgs;
    /// Delete finished work items past retention.
    WorkItemRetention = "work_item_retention", Unscoped, WorkItemRetentionArgs;
}

/// Which scope a kind takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScopeRule {
    /// Always scoped to a storage config.
    Config,
    /// Never scoped.
    Unscoped,
    /// Either.
    Either,
}

impl ScopeRule {
    /// Whether a kind of this rule may work on `scope`; when not, what the rule requires, in words.
    pub const fn check(self, scope: Scope) -> Result<(), &'static str> {
        match (self, scope) {
            (ScopeRule::Config, Scope::Unscoped) => Err("needs a storage config"),
            (ScopeRule::Unscoped, Scope::Config(_)) => Err("takes no storage config"),
            _ => Ok(()),
        }
    }
}

impl WorkKind {
    /// Whether this kind may work on `scope` (a crawl needs a config, a token cleanup takes none).
    pub fn check_scope(self, scope: Scope) -> Result<(), DomainError> {
        self.scope_rule().check(scope).map_err(|rule| DomainError::ScopeMismatch { kind: self, rule })
    }

    /// The names of every kind, comma-separated, for messages.
    pub(crate) fn names() -> String {
        Self::ALL.map(WorkKind::as_str).join(", ")
    }
}

impl fmt::Display for WorkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkKind {
    type Err = DomainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| DomainError::UnknownKind(s.to_owned()))
    }
}

/// Where a work item works: one storage config (serialised with the config's other items), or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Scoped to one storage config: at most one such item runs at a time.
    Config(StorageConfigId),
    /// Not serialised against anything.
    Unscoped,
}

impl Scope {
    /// The storage config, when scoped.
    pub const fn storage_config(self) -> Option<StorageConfigId> {
        match self {
            Scope::Config(id) => Some(id),
            Scope::Unscoped => None,
        }
    }
}

impl From<Option<StorageConfigId>> for Scope {
    fn from(id: Option<StorageConfigId>) -> Self {
        id.map_or(Scope::Unscoped, Scope::Config)
    }
}
