//! The page's HTML (maud: escaped by default). Plain, readable at phone width, usable without JavaScript.

use almanac_domain::ports::WatchChoice;
use almanac_domain::{ProgressEstimate, Status, WorkItem, WorkKind};
use axum::http::StatusCode;
use maud::{DOCTYPE, Markup, html};

use super::read::Snapshot;
use super::{Page, Root, charts};
use crate::ops::FailedFiles;

/// Who is looking.
pub struct Viewer {
    /// Whether this Worker allows actions at all (a token is set).
    pub actions_enabled: bool,
    /// The CSRF field, when signed in.
    pub csrf: Option<String>,
    /// The way back to the page's root from the path asked for: every link goes through it.
    pub root: Root,
}

fn layout(title: &str, root: &Root, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href=(root.link(super::STYLESHEET));
            }
            body { (body) }
        }
    }
}

/// A button that posts to `action` with the CSRF field; shown only when signed in.
fn button(viewer: &Viewer, action: &str, label: &str) -> Markup {
    html! {
        @if let Some(csrf) = &viewer.csrf {
            form.inline method="post" action=(viewer.root.link(action)) {
                input type="hidden" name="csrf" value=(csrf);
                button type="submit" { (label) }
            }
        }
    }
}

fn when(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

/// Failed files listed per item on the main page.
const FILES_SHOWN: usize = 10;

/// The link to an item's own page (the route `/items/{id}`, `read::routes`).
fn item_link(root: &Root, item: &WorkItem) -> String {
    root.link(&format!("/items/{}", item.id))
}

fn files(item: &WorkItem, all: bool, root: &Root) -> Markup {
    let FailedFiles { total, listed: failed } = crate::ops::failed_files(item);
    let shown = if all { failed.len() } else { FILES_SHOWN };
    html! {
        @if !failed.is_empty() {
            details open[all || failed.len() <= 5] {
                summary {
                    (total) " failed file(s)"
                    @if total > failed.len() as u64 { ", the first " (failed.len()) " listed by the crawl" }
                }
                ul.files {
                    @for (path, reason) in failed.iter().take(shown) { li { code { (path) } ": " (reason) } }
                    @if failed.len() > shown { li { "and " (failed.len() - shown) " more (on the item's page: "
                        a href=(item_link(root, item)) { "all of them" } ")" } }
                }
            }
        }
    }
}

/// The page.
pub fn index(page: &Page, s: &Snapshot, viewer: &Viewer, done: Option<&str>) -> Markup {
    layout(
        "Almanac Worker",
        &viewer.root,
        html! {
            header {
                h1 { "Almanac Worker" }
                span.note { "this page is served by " code { (page.worker_id) } " · " (s.now.format("%H:%M:%S UTC")) }
                (sign_in(viewer))
            }
            @if let Some(done) = done { p.flash role="status" { (done) } }
            noscript { p.note { "Without JavaScript the page does not follow progress: reload it to see more." } }

            h2 #queue-heading { "Queue" }
            (queue(s, viewer))

            h2 { "Running" }
            section #running aria-live="polite" { (running(page, &s.running, viewer)) }

            h2 { "Items per hour" }
            (charts::outcomes(&s.hours, s.now, 24))

            h2 #configs-heading { "Storage configs" }
            (configs(s, viewer))

            h2 { "Recent failures" }
            (failures(s, viewer))
            (crawls_with_failures(s, &viewer.root))

            h2 { "This Worker's outage events" }
            (outages(page))
            script src=(viewer.root.link(super::SCRIPT)) {}
        },
    )
}

/// Where an item runs: its config's root (or id), or `-`.
fn config_root(s: &Snapshot, item: &WorkItem) -> String {
    item.scope
        .storage_config()
        .map_or("-".to_owned(), |id| s.configs.iter().find(|c| c.id == id).map_or(id.to_string(), |c| c.root.clone()))
}

/// Items per kind and status, each kind with its pause button.
fn queue(s: &Snapshot, viewer: &Viewer) -> Markup {
    let count = |kind: WorkKind, status: Status| {
        s.summary.iter().find(|r| r.kind == kind && r.status == status).map_or(0, |r| r.count)
    };
    html! {
        div.scroll {
            table aria-labelledby="queue-heading" {
                thead { tr { th { "kind" } @for st in Status::ALL { th.n { (st.as_str()) } } th { "" } } }
                tbody {
                    @for kind in WorkKind::ALL {
                        @let paused = s.paused_kinds.contains(&kind);
                        tr {
                            th scope="row" { (kind.as_str()) @if paused { " " span.tag.paused { "paused" } } }
                            @for st in Status::ALL { td.n { (count(kind, st)) } }
                            td {
                                @if paused { (button(viewer, &format!("/kinds/{}/resume", kind.as_str()), "resume")) }
                                @else { (button(viewer, &format!("/kinds/{}/pause", kind.as_str()), "pause")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The storage configs with their state and buttons.
fn configs(s: &Snapshot, viewer: &Viewer) -> Markup {
    html! {
        @if s.configs.is_empty() { p.note { "None yet: almanac-worker config add --user NAME --root /path" } }
        @else {
            div.scroll {
                table aria-labelledby="configs-heading" {
                    thead { tr { th { "user" } th { "root" } th.n { "assets" } th { "last crawl" } th { "watch" } th { "state" } th { "" } } }
                    tbody {
                        @for c in &s.configs {
                            tr {
                                td { (c.username) }
                                td { code { (c.root) } }
                                td.n { (c.assets) }
                                td {
                                    @match c.last_crawl {
                                        Some((at, st)) => { (at.format("%Y-%m-%d %H:%M UTC")) " " span.tag.failed[st == Status::Failed] { (st.as_str()) } }
                                        None => { "never" }
                                    }
                                }
                                td { (watch(s, c.id, viewer)) }
                                td {
                                    @if !c.is_active { span.tag.inactive { "deactivated" } }
                                    @else if c.paused { span.tag.paused { "paused" } }
                                    @else { "active" }
                                }
                                td {
                                    @if c.is_active { (button(viewer, &format!("/configs/{}/crawl", c.id), "crawl now")) " " }
                                    @if c.paused { (button(viewer, &format!("/configs/{}/resume", c.id), "resume")) }
                                    @else { (button(viewer, &format!("/configs/{}/pause", c.id), "pause")) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A config's watch (ADR 0014): the mode its watcher reports (or off, when none does), the choice when it is not
/// `auto`, who watches, the last change seen, the pending files and the note; signed in, the other choices.
fn watch(s: &Snapshot, config: almanac_domain::StorageConfigId, viewer: &Viewer) -> Markup {
    let Some(state) = s.watches.iter().find(|w| w.config == config) else { return html! { "-" } };
    let chosen = state.choice != WatchChoice::Auto;
    html! {
        @match &state.held {
            Some(h) => {
                span.tag { (h.report.mode.as_str()) }
                @if chosen { " (chosen " (state.choice.as_str()) ")" }
                br;
                span.note {
                    "by " code { (h.worker_id.as_str()) } ", last change " (when(h.report.last_change_at)) ", "
                    (h.report.pending_files) " pending file(s)"
                }
                @if let Some(note) = &h.report.note { br; span.error { (note) } }
            }
            None => {
                span.tag { "off" }
                @if chosen { " (chosen " (state.choice.as_str()) ")" }
                br;
                span.note { "no Worker watches it" }
            }
        }
        @if let Some(csrf) = &viewer.csrf {
            br;
            form.inline method="post" action=(viewer.root.link(&format!("/configs/{config}/watch/{}", state.choice))) {
                input type="hidden" name="csrf" value=(csrf);
                "watch by "
                @for choice in WatchChoice::ALL.into_iter().filter(|c| *c != state.choice) {
                    button type="submit" formaction=(viewer.root.link(&format!("/configs/{config}/watch/{choice}"))) { (choice.as_str()) } " "
                }
            }
        }
    }
}

/// The recent failed items, each with its retry button and failed files.
fn failures(s: &Snapshot, viewer: &Viewer) -> Markup {
    html! {
        @if s.failed.is_empty() { p.note { "No failed items." } }
        @else {
            ul {
                @for i in &s.failed {
                    li {
                        a href=(item_link(&viewer.root, i)) { (i.kind.as_str()) } " of " code { (config_root(s, i)) }
                        ", failed " (when(i.finished_at)) " after " (i.failures) " failure(s): "
                        span.error { (i.last_error.as_deref().unwrap_or("(no error recorded)")) }
                        " " (button(viewer, &format!("/items/{}/retry", i.id), "retry"))
                        (files(i, false, &viewer.root))
                    }
                }
            }
        }
    }
}

/// Recent crawls that succeeded with files they could not read.
fn crawls_with_failures(s: &Snapshot, root: &Root) -> Markup {
    html! {
        @if !s.crawls_with_failures.is_empty() {
            h2 { "Crawls with files that failed" }
            ul {
                @for i in &s.crawls_with_failures {
                    li { a href=(item_link(root, i)) { "crawl" } " of " code { (config_root(s, i)) } " finished " (when(i.finished_at)) (files(i, false, root)) }
                }
            }
        }
    }
}

/// This Worker's outage events, newest first.
fn outages(page: &Page) -> Markup {
    let outages = page.recent.newest_first();
    html! {
        @if outages.is_empty() { p.note { "None since it started." } }
        @else {
            ul {
                @for e in outages.iter().take(15) {
                    li { (e.at.format("%Y-%m-%d %H:%M:%S UTC")) " " code { (e.event) } " " (e.message) }
                }
            }
        }
    }
}

fn sign_in(viewer: &Viewer) -> Markup {
    html! {
        @if viewer.csrf.is_some() {
            form.inline method="post" action=(viewer.root.link("/logout")) { span.note { "signed in for actions " } button type="submit" { "sign out" } }
        } @else if viewer.actions_enabled {
            form.inline method="post" action=(viewer.root.link("/login")) {
                label for="token" { "Token for actions " }
                input #token type="password" name="token" autocomplete="current-password" required;
                " " button type="submit" { "sign in" }
            }
        } @else {
            span.note { "read-only (no http.token set)" }
        }
    }
}

/// The running items' section (also sent live).
pub fn running(page: &Page, running: &[WorkItem], viewer: &Viewer) -> Markup {
    html! {
        @if running.is_empty() { p.note { "Nothing runs right now." } }
        @for i in running {
            @let estimate = i.progress.as_ref().and_then(ProgressEstimate::from_progress);
            article.item {
                p {
                    strong { a href=(item_link(&viewer.root, i)) { (i.kind.as_str()) } }
                    " · Worker " code { (i.worker_id.as_deref().unwrap_or("-")) }
                    " · attempt " (i.attempt) " · since " (when(i.started_at))
                    " " (button(viewer, &format!("/items/{}/cancel", i.id), "cancel"))
                }
                @if let Some(e) = &estimate {
                    p.progress {
                        @if let (Some(total), Some(percent)) = (e.total, e.percent) {
                            progress value=(e.done.min(total)) max=(total) aria-label="progress" { (format!("{percent:.0}%")) }
                            " "
                        }
                        span.done { (crate::ops::progress_text(i)) }
                    }
                    @if i.kind == WorkKind::Crawl { (charts::rate(&page.samples.series(i.id))) }
                } @else {
                    p.note { "no progress reported yet" }
                }
            }
        }
    }
}

pub fn unavailable(why: &str) -> Markup {
    html! { p.error { "The database does not answer: " (why) } }
}

pub fn item(page: &Page, i: &WorkItem, viewer: &Viewer) -> Markup {
    let _ = page;
    layout(
        &format!("{} {}", i.kind.as_str(), i.id),
        &viewer.root,
        html! {
            header { h1 { (i.kind.as_str()) " " code { (i.id) } } a href=(viewer.root.link("/")) { "← the queue" } }
            div.scroll {
                table {
                    tbody {
                        tr { th { "status" } td { (i.status.as_str()) } }
                        tr { th { "config" } td { (i.scope.storage_config().map_or("- (unscoped)".into(), |c| c.to_string())) } }
                        tr { th { "attempt" } td { (i.attempt) " (failures " (i.failures) " of " (i.max_attempts) ", stalls " (i.stalls) ")" } }
                        tr { th { "requested" } td { (when(Some(i.requested_at))) } }
                        tr { th { "started" } td { (when(i.started_at)) } }
                        tr { th { "finished" } td { (when(i.finished_at)) } }
                        tr { th { "worker" } td { (i.worker_id.as_deref().unwrap_or("-")) } }
                        tr { th { "progress" } td { (crate::ops::progress_text(i)) } }
                        tr { th { "last error" } td.error { (i.last_error.as_deref().unwrap_or("-")) } }
                    }
                }
            }
            p {
                @if matches!(i.status, Status::Failed | Status::Cancelled) { (button(viewer, &format!("/items/{}/retry", i.id), "retry")) }
                @if matches!(i.status, Status::Queued | Status::Running) { (button(viewer, &format!("/items/{}/cancel", i.id), "cancel")) }
            }
            (files(i, true, &viewer.root))
            h2 { "payload" }
            pre { (serde_json::to_string_pretty(&i.payload).unwrap_or_default()) }
            @if let Some(result) = &i.result {
                h2 { "result" }
                pre { (serde_json::to_string_pretty(result).unwrap_or_default()) }
            }
        },
    )
}

pub fn problem(root: &Root, status: StatusCode, message: &str) -> Markup {
    layout(
        status.canonical_reason().unwrap_or("error"),
        root,
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p.error role="alert" { (message) }
            p { a href=(root.link("/")) { "back to the page" } }
        },
    )
}
