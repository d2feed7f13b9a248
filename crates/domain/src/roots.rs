//! The file-system rules that keep roots apart and tell our files from everyone else's (ADR 0009): config roots
//! are canonical and never overlap; the proxy root never overlaps a config root; the proxy sweep deletes only
//! paths in the exact proxy layout.

use std::path::{Component, Path};

use crate::catalogue::{ContentHash, ProxyType};
use crate::ids::StorageConfigId;
use crate::work::DomainError;

/// Checks that a root path is canonical: absolute, not `/`, no trailing slash, no empty, `.` or `..`
/// component. (Links are resolved by whoever has the file system: `config add` canonicalises first.)
pub fn check_canonical_root(root: &str) -> Result<(), DomainError> {
    let refuse =
        |why: &'static str| DomainError::OutOfRange { what: "a storage root", accepted: why, got: format!("{root:?}") };
    if !root.starts_with('/') {
        return Err(refuse("an absolute path"));
    }
    if root == "/" {
        return Err(refuse("a folder below / (the whole file system cannot be a library)"));
    }
    if root.ends_with('/') || root[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(refuse("canonical: no trailing slash, no empty, \".\" or \"..\" component, links resolved"));
    }
    Ok(())
}

/// Whether two folders are one tree or one lies inside the other, compared component by component (so
/// `/p/ann` and `/p/anne` do not overlap, and `/p/ann/` equals `/p/ann`). Both paths should be canonical.
pub fn roots_overlap(a: &Path, b: &Path) -> bool {
    fn parts(p: &Path) -> Vec<Component<'_>> {
        p.components().filter(|c| *c != Component::CurDir).collect()
    }
    let (a, b) = (parts(a), parts(b));
    let shorter = a.len().min(b.len());
    a[..shorter] == b[..shorter]
}

/// A path under the proxy root that has the exact proxy layout `<config id>/<hash[0..2]>/<hash>/<name>`, where
/// `name` is a proxy's file name or one of the temporary names we write beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPath {
    /// The config whose folder it is in.
    pub config: StorageConfigId,
    /// The content it is a proxy of.
    pub hash: ContentHash,
}

/// The names written in a proxy folder other than the proxies themselves: each proxy's temporary name while
/// it is written, and the HEIC decoder's scratch output (with the auxiliary images it may add).
pub const HEIC_SCRATCH_PREFIX: &str = ".heic-decode";

/// The folder in a file's proxy folder where the Worker and its tools write each proxy under its temporary name
/// before it is renamed into place, and where the HEIC decoder writes. Made by the Worker for itself alone (mode
/// 0700, judged on the volume by a file made in it), so that, where the volume keeps modes, nobody else may put
/// anything in it (a link where a tool writes); removed once the file's proxies are made. What a killed Worker left
/// in it is a temporary file of the layout ([`ProxyPath::parse`]).
pub const PROXY_SCRATCH_FOLDER: &str = ".almanac-scratch";

impl ProxyType {
    /// The temporary name this proxy is written under before it is renamed into place (hidden, with the
    /// extension the writing tool needs to pick the format).
    pub const fn temporary_file_name(self) -> Option<&'static str> {
        match self {
            ProxyType::Thumbnail => Some(".thumbnail.jpg.tmp"),
            ProxyType::Preview => Some(".preview.jpg.tmp"),
            ProxyType::Blurhash => None,
            ProxyType::Poster => Some(".poster.tmp.jpg"),
            ProxyType::WebVideo => Some(".web.tmp.mp4"),
        }
    }
}

/// Whether `name` is a file we write in a proxy folder.
pub fn is_proxy_file_name(name: &str) -> bool {
    ProxyType::ALL.iter().any(|t| t.file_name() == Some(name)) || is_temporary_file_name(name)
}

/// Whether `name` is one of the temporary names we write in a proxy folder, never a finished proxy: a proxy's
/// while it is written, or the HEIC decoder's scratch output.
pub fn is_temporary_file_name(name: &str) -> bool {
    ProxyType::ALL.iter().any(|t| t.temporary_file_name() == Some(name))
        || (name.starts_with(HEIC_SCRATCH_PREFIX) && name.ends_with(".jpg") && !name.contains('/'))
}

impl ProxyPath {
    /// Parses a path relative to the proxy root; `None` unless it has the exact layout (which
    /// [`ContentHash::proxy_dir`] makes) and a name of ours: `<config>/<prefix>/<hash>/<name>`, or a temporary name
    /// in the folder's scratch folder, `<config>/<prefix>/<hash>/`[`PROXY_SCRATCH_FOLDER`]`/<name>`.
    pub fn parse(relative: &str) -> Option<Self> {
        let mut parts = relative.split('/');
        let (config, prefix, hash, name) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let ours = match parts.next() {
            None => is_proxy_file_name(name),
            Some(scratched) => name == PROXY_SCRATCH_FOLDER && is_temporary_file_name(scratched),
        };
        if parts.next().is_some() || !ours {
            return None;
        }
        let (config_text, hash_text) = (config, hash);
        let config: StorageConfigId = config_text.parse().ok()?;
        let hash = ContentHash::from_hex(hash_text).ok()?;
        // Lower-case only, as we write it, and the prefix folder must be the hash's own.
        let exact = config.to_string() == config_text && hash.as_hex() == hash_text && prefix == &hash_text[..2];
        exact.then_some(ProxyPath { config, hash })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_roots_are_absolute_below_slash_and_plain() {
        for good in ["/p/ann", "/volume1/photos/ann", "/a", "/p/ann..x", "/p/.hidden"] {
            assert!(check_canonical_root(good).is_ok(), "{good}");
        }
        for bad in ["/", "p/ann", "", "/p/ann/", "/p//ann", "/p/./ann", "/p/ann/..", "/p/ann/../bob", "/p/."] {
            let err = check_canonical_root(bad).unwrap_err().to_string();
            assert!(err.contains("a storage root"), "{bad}: {err}");
        }
    }

    #[test]
    fn roots_overlap_when_equal_or_nested_by_whole_components() {
        let o = |a: &str, b: &str| roots_overlap(Path::new(a), Path::new(b));
        assert!(o("/p/ann", "/p/ann"));
        assert!(o("/p/ann/", "/p/ann"));
        assert!(o("/p", "/p/bob"));
        assert!(o("/p/bob/2019", "/p/bob"));
        assert!(o("/", "/p/bob"));
        assert!(!o("/p/ann", "/p/anne"));
        assert!(!o("/p/ann", "/p/bob"));
        assert!(!o("/volume1/proxies", "/volume1/photos"));
    }

    #[test]
    fn only_the_exact_proxy_layout_parses() {
        let config = StorageConfigId::new();
        let hash = ContentHash::from_bytes([0xab; 32]);
        let dir = hash.proxy_dir(config).display().to_string();
        for name in ["thumbnail.jpg", "preview.jpg", "poster.jpg", "web.mp4", ".preview.jpg.tmp", ".web.tmp.mp4"] {
            let parsed = ProxyPath::parse(&format!("{dir}/{name}"));
            assert_eq!(parsed, Some(ProxyPath { config, hash: hash.clone() }), "{name}");
        }
        assert!(ProxyPath::parse(&format!("{dir}/.heic-decode.jpg")).is_some());
        assert!(ProxyPath::parse(&format!("{dir}/.heic-decode-depth-1.jpg")).is_some());
        // What a killed Worker left in the scratch folder: temporary names only.
        for temporary in [".web.tmp.mp4", ".preview.jpg.tmp", ".heic-decode-2.jpg"] {
            let parsed = ProxyPath::parse(&format!("{dir}/{PROXY_SCRATCH_FOLDER}/{temporary}"));
            assert_eq!(parsed, Some(ProxyPath { config, hash: hash.clone() }), "{temporary}");
        }
        for temporary in
            [".preview.jpg.tmp", ".thumbnail.jpg.tmp", ".poster.tmp.jpg", ".web.tmp.mp4", ".heic-decode.jpg"]
        {
            assert!(is_temporary_file_name(temporary), "{temporary}");
        }
        for finished in ["preview.jpg", "thumbnail.jpg", "poster.jpg", "web.mp4", ".heic-decode.png", "a.tmp", ""] {
            assert!(!is_temporary_file_name(finished), "{finished}");
        }
        let upper = format!("{config}/AB/{}/thumbnail.jpg", "AB".repeat(32));
        let hex = hash.as_hex();
        for bad in [
            format!("{dir}/IMG_0001.jpg"),
            format!("{dir}/thumbnail.jpg/x"),
            format!("{dir}/{PROXY_SCRATCH_FOLDER}/web.mp4"),
            format!("{dir}/{PROXY_SCRATCH_FOLDER}"),
            format!("{dir}/.other/.web.tmp.mp4"),
            format!("{dir}/{PROXY_SCRATCH_FOLDER}/{PROXY_SCRATCH_FOLDER}/.web.tmp.mp4"),
            dir.clone(),
            format!("{config}/cd/{hex}/thumbnail.jpg"),
            format!("not-a-uuid/ab/{hex}/thumbnail.jpg"),
            format!("{config}/ab/{}/thumbnail.jpg", &hex[..63]),
            format!("photos/ann/{dir}/thumbnail.jpg"),
            format!("{dir}/.heic-decode.png"),
            upper,
            "thumbnail.jpg".to_string(),
            String::new(),
        ] {
            assert_eq!(ProxyPath::parse(&bad), None, "{bad}");
        }
    }
}
