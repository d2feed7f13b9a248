//! Roots never overlap (ADR 0009, docs/safety.md invariant 4): the Worker's one home for the rule. Config roots are
//! canonical and never nest in one another; the proxy root never equals, contains or lies inside a config root.
//! Checked when the Worker starts, when a config is added or activated, and shown by `status`. Paths are
//! compared by [`almanac_domain::roots_overlap`] and, where they exist, by file-system identity
//! ([`almanac_media::trees_overlap`]).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use almanac_domain::StorageConfig;
use almanac_store_pg::PgStore;

use super::OpError;

/// A path as the file system would resolve it (links followed) without creating anything: its longest
/// existing ancestor canonicalised, and the rest appended. So a proxy root that does not exist yet compares
/// with the canonical config roots, and is checked before it is created.
pub fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(canonical, |p, name| p.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

pub use almanac_media::ROOT_ANSWERS_WITHIN;

/// The answers of `looks`, each run on a thread of its own, those that came within `limit` of the first's start
/// (`None` for the others, whose threads are left behind: a call into a share that stopped answering returns only
/// when it answers again).
pub fn answered_within<T: Send + 'static>(
    limit: Duration,
    looks: Vec<Box<dyn FnOnce() -> T + Send>>,
) -> Vec<Option<T>> {
    let (answer, answers) = mpsc::channel();
    let count = looks.len();
    for (i, look) in looks.into_iter().enumerate() {
        let answer = answer.clone();
        std::thread::spawn(move || answer.send((i, look())));
    }
    let deadline = Instant::now() + limit;
    let mut found: Vec<Option<T>> = (0..count).map(|_| None).collect();
    for _ in 0..count {
        match answers.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, answered)) => found[i] = Some(answered),
            Err(_) => break,
        }
    }
    found
}

/// The answer of `look`, run on a thread of its own, if it came within `limit` ([`answered_within`]).
pub fn answered_in_time<T: Send + 'static>(limit: Duration, look: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    answered_within(limit, vec![Box::new(look)]).pop().flatten()
}

/// Checks the proxy root against every config's root, then creates it. Returns it resolved, and what to say of the
/// roots that did not answer ([`check_proxy_root`]). A proxy root that does not answer within
/// [`ROOT_ANSWERS_WITHIN`] is refused as such ([`Refusal::NoAnswer`]): without it no crawl can write.
pub fn prepare_proxy_root(proxy_root: &Path, configs: &[StorageConfig]) -> Result<(PathBuf, Vec<String>), Refusal> {
    let resolved = resolved_in_time(proxy_root)?;
    let unanswered = check_proxy_root(&resolved, configs).map_err(Refusal::Rule)?;
    let made = resolved.clone();
    answered_in_time(ROOT_ANSWERS_WITHIN, move || std::fs::create_dir_all(made))
        .ok_or_else(|| proxy_root_no_answer(proxy_root))?
        .map_err(|e| Refusal::Rule(format!("storage.proxy_root: cannot create {}: {e}", resolved.display())))?;
    Ok((resolved, unanswered))
}

/// The proxy root resolved ([`resolved`]), if the file system answered within [`ROOT_ANSWERS_WITHIN`].
pub fn resolved_in_time(proxy_root: &Path) -> Result<PathBuf, Refusal> {
    let given = proxy_root.to_owned();
    answered_in_time(ROOT_ANSWERS_WITHIN, move || resolved(&given)).ok_or_else(|| proxy_root_no_answer(proxy_root))
}

/// What is said of a root being registered (`--root`) that did not answer within [`ROOT_ANSWERS_WITHIN`].
pub fn new_root_no_answer(root: &Path) -> Refusal {
    Refusal::NoAnswer(did_not_answer("--root", root))
}

/// What is said of a proxy root that did not answer within [`ROOT_ANSWERS_WITHIN`].
pub fn proxy_root_no_answer(proxy_root: &Path) -> Refusal {
    Refusal::NoAnswer(did_not_answer("storage.proxy_root", proxy_root))
}

/// Why a look at the roots refused what was asked: a rule (change what was asked), or a root that did not answer
/// within [`ROOT_ANSWERS_WITHIN`] (ask again once it answers).
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// The roots rule, or a root that is not what it must be.
    Rule(String),
    /// A root, or the proxy root, did not answer in time.
    NoAnswer(String),
}

impl Refusal {
    /// What is said, with `then` (what became of the action) after it.
    pub fn then(self, then: &str) -> OpError {
        match self {
            Refusal::Rule(why) => OpError::Forbidden(format!("{why}; {then}")),
            Refusal::NoAnswer(why) => OpError::Refused(format!("{why}; {then}. Try again once it answers")),
        }
    }

    /// The words alone.
    pub fn said(&self) -> &str {
        match self {
            Refusal::Rule(why) | Refusal::NoAnswer(why) => why,
        }
    }
}

/// Refuses a proxy root that is `/`, or that equals, contains or lies inside a config's root (any config,
/// active or not, any user), by path or by file-system identity. The message names both paths and what to do. A
/// root that does not answer within [`ROOT_ANSWERS_WITHIN`] is not waited for: what to say of it is answered (its
/// crawls check it again before reading anything, and refuse it then).
pub fn check_proxy_root(proxy_root: &Path, configs: &[StorageConfig]) -> Result<Vec<String>, String> {
    if proxy_root.parent().is_none() {
        return Err("storage.proxy_root: / cannot be the proxy root: it would contain every library".into());
    }
    let looks = configs.iter().map(|c| overlap_look(proxy_root, &c.root_path)).collect();
    let mut unanswered = Vec::new();
    for (c, overlap) in configs.iter().zip(answered_within(ROOT_ANSWERS_WITHIN, looks)) {
        match overlap {
            Some(true) => return Err(overlap_message(proxy_root, &c.root_path)),
            Some(false) => {}
            None => unanswered.push(no_answer(&c.root_path)),
        }
    }
    Ok(unanswered)
}

/// Refuses a config root that overlaps the proxy root (`proxy_root` resolved), or that does not answer.
pub fn check_against_proxy_root(proxy_root: &Path, root: &Path) -> Result<(), Refusal> {
    match answered_in_time(ROOT_ANSWERS_WITHIN, overlap_look(proxy_root, root)) {
        Some(true) => Err(Refusal::Rule(overlap_message(proxy_root, root))),
        Some(false) => Ok(()),
        None => Err(Refusal::NoAnswer(no_answer(root))),
    }
}

/// Whether `root` and the proxy root overlap, looked at on the file system.
fn overlap_look(proxy_root: &Path, root: &Path) -> Box<dyn FnOnce() -> bool + Send> {
    let (proxy_root, root) = (proxy_root.to_owned(), root.to_owned());
    Box::new(move || almanac_media::trees_overlap(&proxy_root, &root))
}

/// What is said of a root that did not answer within [`ROOT_ANSWERS_WITHIN`].
fn no_answer(root: &Path) -> String {
    format!("{}, so whether it overlaps storage.proxy_root could not be seen", did_not_answer("the storage root", root))
}

/// `what` (`path`) did not answer within [`ROOT_ANSWERS_WITHIN`].
fn did_not_answer(what: &str, path: &Path) -> String {
    format!(
        "{what} {} did not answer within {}s (a share whose server stopped answering?)",
        path.display(),
        ROOT_ANSWERS_WITHIN.as_secs()
    )
}

/// Refuses a new root that is one tree with a registered config's root only as the file system sees it (a bind
/// mount, another spelling of one folder): the store, which compares paths, refuses the rest. The registered roots
/// are looked at all at once, each within [`ROOT_ANSWERS_WITHIN`]: one that does not answer refuses the new root
/// (whether they are one tree cannot be seen), unless another is found to be its tree.
pub fn check_hidden_overlap(root: &Path, configs: &[StorageConfig]) -> Result<(), Refusal> {
    let looks = configs
        .iter()
        .map(|c| {
            let (registered, new) = (c.root_path.clone(), root.to_owned());
            Box::new(move || almanac_media::overlap_hidden_from_paths(&registered, &new))
                as Box<dyn FnOnce() -> bool + Send>
        })
        .collect();
    let answers = answered_within(ROOT_ANSWERS_WITHIN, looks);
    if let Some((other, _)) = configs.iter().zip(&answers).find(|(_, hidden)| **hidden == Some(true)) {
        return Err(Refusal::Rule(format!(
            "the root {} is the same tree as storage config {} at {}, or nests with it (a bind mount, or another \
             spelling of one folder): two configs may never cover one tree",
            root.display(),
            other.id,
            other.root_path.display()
        )));
    }
    match configs.iter().zip(&answers).find(|(_, hidden)| hidden.is_none()) {
        Some((other, _)) => Err(Refusal::NoAnswer(format!(
            "{}, so whether {} is the same tree could not be seen",
            did_not_answer(&format!("the root of storage config {}", other.id), &other.root_path),
            root.display()
        ))),
        None => Ok(()),
    }
}

/// Refuses to serve `config` again while its root overlaps an active config's (of those `overlapping` it, as
/// the catalogue found them) or the proxy root (`proxy_root` resolved).
pub fn check_activation(
    proxy_root: &Path,
    config: &StorageConfig,
    overlapping: &[StorageConfig],
) -> Result<(), OpError> {
    if let Some(other) = overlapping.iter().find(|o| o.is_active) {
        return Err(OpError::Forbidden(format!(
            "storage config {} ({}) overlaps active storage config {} ({}): two configs on one tree would be \
             crawled at once. Deactivate that one first (almanac-worker config deactivate {})",
            config.id,
            config.root_path.display(),
            other.id,
            other.root_path.display(),
            other.id
        )));
    }
    check_against_proxy_root(proxy_root, &config.root_path)
        .map_err(|refusal| refusal.then(&format!("storage config {} stays deactivated", config.id)))
}

/// The refusal for a proxy root and a storage root that overlap.
pub fn overlap_message(proxy_root: &Path, root: &Path) -> String {
    let relation = if proxy_root == root || almanac_media::same_folder(proxy_root, root) {
        "is the same folder as"
    } else if proxy_root.starts_with(root) || almanac_media::lies_within(proxy_root, root) {
        "lies inside"
    } else {
        "contains"
    };
    overlap_said(proxy_root, relation, root)
}

/// [`overlap_message`] for roots whose paths overlap, said from their paths alone (one of them does not answer).
fn overlap_by_path(proxy_root: &Path, root: &Path) -> String {
    let relation = match (proxy_root == root, proxy_root.starts_with(root)) {
        (true, _) => "is the same folder as",
        (false, true) => "lies inside",
        (false, false) => "contains",
    };
    overlap_said(proxy_root, relation, root)
}

/// The refusal: the proxy root is in `relation` to the storage root.
fn overlap_said(proxy_root: &Path, relation: &str, root: &Path) -> String {
    format!(
        "storage.proxy_root {} {relation} the storage root {}: the proxy sweep could delete originals and the \
         crawl could take proxies for photos. Set storage.proxy_root to a folder outside every library (for \
         example /var/lib/almanac/proxies)",
        proxy_root.display(),
        root.display()
    )
}

/// A root as `config add` registers it: it must exist and be a folder; links, `.` and `..` are resolved and
/// the trailing slash dropped. Refused as [`Refusal::NoAnswer`] when the file system does not answer within
/// [`ROOT_ANSWERS_WITHIN`] (a share whose server stopped answering).
pub fn canonical_config_root(root: &Path) -> Result<PathBuf, Refusal> {
    let absolute = std::path::absolute(root).map_err(|e| Refusal::Rule(format!("--root {}: {e}", root.display())))?;
    let looked = absolute.clone();
    let look = move || std::fs::canonicalize(&looked).map(|canonical| (canonical.is_dir(), canonical));
    match answered_in_time(ROOT_ANSWERS_WITHIN, look) {
        None => Err(new_root_no_answer(&absolute)),
        Some(Err(e)) => Err(Refusal::Rule(format!(
            "--root {}: {e}. Register a folder that exists (mount the share first); nothing was registered",
            absolute.display()
        ))),
        Some(Ok((false, canonical))) => {
            Err(Refusal::Rule(format!("--root {}: not a folder; nothing was registered", canonical.display())))
        }
        Some(Ok((true, canonical))) => Ok(canonical),
    }
}

/// Roots that overlap in the catalogue (an older one may hold some), on disk, or with this Worker's proxy root
/// (`proxy_root` as configured), and roots that are not canonical: what `status` lists.
pub async fn root_problems(store: &PgStore, proxy_root: &Path) -> Result<Vec<String>, OpError> {
    let mut problems: Vec<String> = store
        .root_overlaps()
        .await?
        .into_iter()
        .map(|o| {
            format!(
                "storage config {} ({}, user {}) and {} ({}, user {}) cover one tree: their crawls refuse to run \
             until one is deactivated (almanac-worker config deactivate ID)",
                o.first.0,
                o.first.1.display(),
                o.first.2,
                o.second.0,
                o.second.1.display(),
                o.second.2
            )
        })
        .collect();
    let configs = store.list_storage_configs().await?;
    let proxy_root = proxy_root.to_owned();
    let on_disk = tokio::task::spawn_blocking(move || on_disk_problems(&proxy_root, &configs))
        .await
        .map_err(|e| OpError::Failed(format!("looking at the roots ended abnormally: {e}").into()))?;
    problems.extend(on_disk);
    Ok(problems)
}

/// The roots' problems only the file system shows. Every root and the proxy root are looked at all at once, within
/// [`ROOT_ANSWERS_WITHIN`]: one that does not answer is listed as such (a share whose server stopped answering
/// would otherwise hold `status` for ever); those that answered are then compared, within as long again.
fn on_disk_problems(proxy_root: &Path, configs: &[StorageConfig]) -> Vec<String> {
    type Look = Box<dyn FnOnce() -> Option<PathBuf> + Send>;
    let mut looks: Vec<Look> = configs
        .iter()
        .map(|c| {
            let root = c.root_path.clone();
            Box::new(move || std::fs::canonicalize(root).ok()) as Look
        })
        .collect();
    let given = proxy_root.to_owned();
    looks.push(Box::new(move || Some(resolved(&given))));
    let mut answers = answered_within(ROOT_ANSWERS_WITHIN, looks);
    let resolved_proxy_root = answers.pop().flatten().flatten();
    let (mut problems, mut answered) = (Vec::new(), Vec::new());
    for (c, answer) in configs.iter().zip(answers) {
        match answer {
            Some(real) => {
                problems.extend(root_not_canonical(c, real.as_deref()));
                answered.push(c.clone());
            }
            None => {
                problems.push(format!(
                    "{}: its crawls cannot read it, and whether it overlaps another root could not be seen",
                    did_not_answer(&format!("the root of storage config {}", c.id), &c.root_path)
                ));
                // Its path is compared all the same (no look at the file system).
                let proxies = resolved_proxy_root.as_deref().unwrap_or(proxy_root);
                if almanac_domain::roots_overlap(proxies, &c.root_path) {
                    problems.push(overlap_by_path(proxies, &c.root_path));
                }
            }
        }
    }
    if resolved_proxy_root.is_none() {
        problems.push(format!("{}: no crawl can write proxies", did_not_answer("storage.proxy_root", proxy_root)));
    }
    let given = proxy_root.to_owned();
    let compared = answered_in_time(ROOT_ANSWERS_WITHIN, move || {
        let mut found = hidden_overlaps(&answered);
        if let Some(proxy_root) = resolved_proxy_root {
            let overlapping = answered.iter().filter(|c| almanac_media::trees_overlap(&proxy_root, &c.root_path));
            found.extend(overlapping.map(|c| overlap_message(&proxy_root, &c.root_path)));
        } else {
            // A proxy root that did not answer is compared by its path as given.
            let overlapping = answered.iter().filter(|c| almanac_domain::roots_overlap(&given, &c.root_path));
            found.extend(overlapping.map(|c| overlap_by_path(&given, &c.root_path)));
        }
        found
    });
    problems.extend(compared.unwrap_or_else(|| {
        vec![format!(
            "the roots that answered could not all be compared with one another and with storage.proxy_root within \
             {}s (a share stopped answering while they were): run status again",
            ROOT_ANSWERS_WITHIN.as_secs()
        )]
    }));
    problems
}

/// Overlaps the catalogue cannot see: one tree under two paths (a bind mount, another spelling).
fn hidden_overlaps(configs: &[StorageConfig]) -> Vec<String> {
    let (mut problems, mut rest) = (Vec::new(), configs);
    while let Some((a, others)) = rest.split_first() {
        rest = others;
        for b in others.iter().filter(|b| almanac_media::overlap_hidden_from_paths(&a.root_path, &b.root_path)) {
            problems.push(format!(
                "storage configs {} ({}) and {} ({}) are one tree on disk (a bind mount or another spelling): \
                 deactivate one (almanac-worker config deactivate ID)",
                a.id,
                a.root_path.display(),
                b.id,
                b.root_path.display()
            ));
        }
    }
    problems
}

/// Why a registered root is not canonical (reached through a link, or spelled with `.`, `..` or doubled
/// slashes): its crawls refuse to run.
fn root_not_canonical(c: &StorageConfig, real: Option<&Path>) -> Option<String> {
    let canonical = c.root_path.to_str().is_some_and(|r| almanac_domain::check_canonical_root(r).is_ok());
    if !canonical {
        return Some(format!(
            "storage config {} has the root {}, which is not a canonical path (`.`, `..`, a doubled or trailing \
             slash): its crawls refuse to run. Deactivate it and register the real path",
            c.id,
            c.root_path.display()
        ));
    }
    let real = real.filter(|real| *real != c.root_path)?;
    Some(format!(
        "storage config {} has the root {}, which is reached through a link (the real folder is {}): its crawls \
         refuse to run. Deactivate it and register the real path",
        c.id,
        c.root_path.display(),
        real.display()
    ))
}

#[cfg(test)]
mod tests;
