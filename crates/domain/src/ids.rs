use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A new, time-ordered (UUID v7) id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Wraps an existing UUID, e.g. one read from the database.
            pub const fn from_uuid(id: Uuid) -> Self {
                Self(id)
            }

            /// The UUID inside.
            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// Identifies a work item.
    WorkItemId
);
uuid_id!(
    /// Identifies a storage config: one folder tree of originals.
    StorageConfigId
);
uuid_id!(
    /// Identifies a user.
    UserId
);
uuid_id!(
    /// Identifies a media asset.
    AssetId
);
uuid_id!(
    /// Identifies a burst of rapid-fire shots.
    BurstId
);
uuid_id!(
    /// Identifies a Worker process as the holder of config watches (ADR 0014, amendment 1): drawn as it starts,
    /// so that two Workers given one Worker id are two holders.
    HolderId
);
