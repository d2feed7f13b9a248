//! `status`: the queue at a glance, as a table or as JSON.

use almanac_domain::ports::WatchStore;
use almanac_domain::{ProgressEstimate, Status, StorageConfigId, WorkItem, WorkKind};
use almanac_store_pg::{PgStore, QueueSummaryRow};
use serde_json::{Value, json};

use super::{Exit, Failure};
use crate::ops;
use crate::settings::Settings;

mod watches;

use watches::Watches;

/// What `status` shows, read in one go.
struct Overview {
    summary: Vec<QueueSummaryRow>,
    running: Vec<WorkItem>,
    failed: Vec<WorkItem>,
    problems: Vec<String>,
    paused_kinds: Vec<WorkKind>,
    paused_configs: Vec<(StorageConfigId, String)>,
    watches: Watches,
}

/// `status [--json]`: counts by kind and status, running items, pauses, root problems, recent failures.
pub async fn status(store: &PgStore, settings: &Settings, json: bool) -> Result<Exit, Failure> {
    let summary = store.queue_summary().await?;
    let running = store.list_items(Some(Status::Running), 100).await?;
    let failed = store.list_items(Some(Status::Failed), 10).await?;
    let problems = ops::roots::root_problems(store, &settings.storage.proxy_root).await?;
    let (paused_kinds, paused_configs) = store.paused().await?;
    let roots = store.list_storage_configs().await?.into_iter().map(|c| (c.id, c.root_path.display().to_string()));
    let watches = Watches { states: store.watch_states().await?, roots: roots.collect() };
    let overview = Overview { summary, running, failed, problems, paused_kinds, paused_configs, watches };
    if json {
        let text = serde_json::to_string_pretty(&as_json(&overview)).map_err(Failure::failed)?;
        println!("{}", crate::observe::json_shown(&text));
    } else {
        table(&overview).iter().for_each(|line| say!("{line}"));
    }
    Ok(Exit::Success)
}

/// The overview as `status --json` prints it.
fn as_json(o: &Overview) -> Value {
    let running = |i: &WorkItem| {
        let mut item = serde_json::to_value(i).unwrap_or_default();
        if let Some(e) = i.progress.as_ref().and_then(ProgressEstimate::from_progress) {
            item["estimate"] = json!({
                "done": e.done,
                "total": e.total,
                "percent": e.percent,
                "per_second": e.per_second,
                "remaining_seconds": e.remaining.map(|r| r.as_secs()),
            });
        }
        item
    };
    json!({
        "counts": o.summary.iter().map(|r| json!({"kind": r.kind.as_str(), "status": r.status.as_str(), "count": r.count})).collect::<Vec<_>>(),
        "running": o.running.iter().map(running).collect::<Vec<_>>(),
        "recent_failures": o.failed,
        "root_problems": o.problems,
        "paused": {
            "kinds": o.paused_kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "configs": o.paused_configs.iter().map(|(id, root)| json!({"id": id.to_string(), "root": root})).collect::<Vec<_>>(),
        },
        "watches": o.watches.as_json(),
    })
}

/// A line of the counts' table, its heading or a kind's: the kind, then a column per status (`Status::ALL`), each
/// right-aligned in two more than its heading's width or 7, whichever is wider.
fn count_line(kind: &str, cells: [String; Status::ALL.len()]) -> String {
    let mut line = format!("{kind:<22}");
    for (status, cell) in Status::ALL.into_iter().zip(cells) {
        let width = status.as_str().len().max(7) + 2;
        line.push_str(&format!("{cell:>width$}"));
    }
    line
}

/// The overview as a table and sections, line by line.
fn table(o: &Overview) -> Vec<String> {
    let mut lines = vec![count_line("KIND", Status::ALL.map(|s| s.as_str().to_uppercase()))];
    let mut kinds: Vec<WorkKind> = o.summary.iter().map(|r| r.kind).collect();
    kinds.dedup();
    for kind in kinds {
        let n = |status: Status| o.summary.iter().find(|r| r.kind == kind && r.status == status).map_or(0, |r| r.count);
        lines.push(count_line(kind.as_str(), Status::ALL.map(|s| n(s).to_string())));
    }
    section(&mut lines, "RUNNING", &o.running, |i| {
        format!(
            "{}  {}  config {}  worker {}  attempt {}  progress {}",
            i.id,
            i.kind,
            i.scope.storage_config().map_or("-".into(), |c| c.to_string()),
            i.worker_id.as_deref().unwrap_or("-"),
            i.attempt,
            ops::progress_text(i)
        )
    });
    let paused: Vec<String> = (o.paused_kinds.iter().map(|kind| format!("kind {kind}")))
        .chain(o.paused_configs.iter().map(|(id, root)| format!("config {id}  {root}")))
        .collect();
    section(&mut lines, "PAUSED (queued work not claimed; almanac-worker resume)", &paused, String::clone);
    section(&mut lines, "ROOT PROBLEMS", &o.problems, String::clone);
    section(&mut lines, "WATCHES (almanac-worker config watch)", &o.watches.lines(), String::clone);
    section(&mut lines, "RECENT FAILURES", &o.failed, |i| {
        format!("{}  {}  {}", i.id, i.kind, i.last_error.as_deref().unwrap_or("-"))
    });
    lines
}

/// A titled section of lines, after a blank line; nothing when there are none.
fn section<T>(lines: &mut Vec<String>, title: &str, rows: &[T], line: impl Fn(&T) -> String) {
    if rows.is_empty() {
        return;
    }
    lines.extend([String::new(), title.to_owned()]);
    lines.extend(rows.iter().map(line));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::item;

    #[test]
    fn the_table_counts_each_kind_per_status_and_shows_only_the_sections_with_lines() {
        let row = |kind, status, count| QueueSummaryRow { kind, status, count };
        let mut running = item(WorkKind::BurstDetection, Status::Running, None);
        running.worker_id = Some(almanac_domain::WorkerId::new("worker-a").unwrap());
        let overview = Overview {
            summary: vec![
                row(WorkKind::Crawl, Status::Queued, 2),
                row(WorkKind::Crawl, Status::Succeeded, 7),
                row(WorkKind::BurstDetection, Status::Running, 1),
                row(WorkKind::BurstDetection, Status::Cancelled, 3),
            ],
            running: vec![running.clone()],
            failed: vec![],
            problems: vec!["storage config 1 has the root /a/./b".into()],
            paused_kinds: vec![WorkKind::Purge],
            paused_configs: vec![],
            watches: Watches { states: vec![], roots: Default::default() },
        };
        let lines = table(&overview);
        let at = |title: &str| lines.iter().position(|l| l == title).unwrap_or_else(|| panic!("{title}: {lines:#?}"));
        assert_eq!(lines[0], "KIND                     QUEUED  RUNNING  SUCCEEDED   FAILED  CANCELLED");
        assert_eq!(lines[1], "crawl                         2        0          7        0          0");
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["burst_detection", "0", "1", "0", "0", "3"]);
        assert_eq!(lines[3], "", "a blank line before each section");
        let running_line = &lines[at("RUNNING") + 1];
        assert!(running_line.starts_with(&format!("{}  burst_detection  config -  worker worker-a", running.id)));
        assert_eq!(lines[at("PAUSED (queued work not claimed; almanac-worker resume)") + 1], "kind purge");
        assert_eq!(lines[at("ROOT PROBLEMS") + 1], "storage config 1 has the root /a/./b");
        for empty in ["WATCHES (almanac-worker config watch)", "RECENT FAILURES"] {
            assert!(!lines.iter().any(|l| l == empty), "{empty} has no lines: {lines:#?}");
        }
        // The same as JSON.
        let json = as_json(&overview);
        assert_eq!(json["counts"][1], json!({"kind": "crawl", "status": "succeeded", "count": 7}));
        assert_eq!(json["running"][0]["id"], running.id.to_string());
        assert_eq!(json["paused"]["kinds"], json!(["purge"]));
        assert_eq!(json["root_problems"], json!(overview.problems));
    }
}
