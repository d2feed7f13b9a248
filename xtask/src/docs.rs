//! `cargo xtask docs`: the parts of the docs generated from tables in the code, written between marker
//! comments (`<!-- generated: NAME … -->` and `<!-- end: NAME -->`), or checked (`--check`, and the tidy test).
//!
//! Today: docs/operations.md's events and metrics, from `crates/worker/src/observe/table.rs`.

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::observe_table::{EVENTS, METRICS, MetricType};

/// One generated section: the file, the section's name and its text.
struct Section {
    file: &'static str,
    name: &'static str,
    text: String,
}

fn sections() -> Vec<Section> {
    vec![
        Section { file: "docs/operations.md", name: "events", text: events() },
        Section { file: "docs/operations.md", name: "metrics", text: metrics() },
    ]
}

/// operations.md's table of events.
fn events() -> String {
    let mut out = String::from("| event | on the page | meaning |\n|---|---|---|\n");
    for e in EVENTS {
        let page = if e.page { "yes" } else { "" };
        writeln!(out, "| `{}` | {page} | {} |", e.name, e.meaning).expect("a String takes it");
    }
    out
}

/// operations.md's table of metrics.
fn metrics() -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for m in METRICS {
        let kind = match m.kind {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        };
        let labels = m.labels.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ");
        writeln!(out, "| `{}` | {kind} | {labels} | {} |", m.name, m.help).expect("a String takes it");
    }
    out
}

/// `text` with the section `name` replaced by `body`.
fn splice(text: &str, name: &str, body: &str) -> Result<String> {
    let start = format!("<!-- generated: {name} ");
    let end = format!("<!-- end: {name} -->");
    let begin = text.find(&start).with_context(|| format!("no `{start}…-->` marker"))?;
    let body_at = begin + text[begin..].find("-->\n").context("the start marker is not closed")? + "-->\n".len();
    let end_at = body_at + text[body_at..].find(&end).with_context(|| format!("no `{end}` marker"))?;
    Ok(format!("{}{body}{}", &text[..body_at], &text[end_at..]))
}

/// Writes every generated section (or, with `check`, fails naming those that differ).
pub fn run(workspace: &Path, check: bool) -> Result<()> {
    let mut stale = Vec::new();
    for section in sections() {
        let path = workspace.join(section.file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", section.file))?;
        let fresh = splice(&text, section.name, &section.text).with_context(|| section.file)?;
        if fresh == text {
            continue;
        }
        if check {
            stale.push(format!("{} ({})", section.file, section.name));
        } else {
            std::fs::write(&path, fresh).with_context(|| format!("writing {}", section.file))?;
            println!("wrote the {} of {}", section.name, section.file);
        }
    }
    if !stale.is_empty() {
        bail!("stale generated docs: {}; run `cargo xtask docs` and commit the result", stale.join(", "));
    }
    if check {
        println!("the generated docs are current");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::splice;

    #[test]
    fn a_section_is_replaced_between_its_markers_and_nothing_else() {
        let text = "a\n<!-- generated: x (cargo xtask docs) -->\nold\n<!-- end: x -->\nb\n";
        let fresh = splice(text, "x", "new\n").unwrap();
        assert_eq!(fresh, "a\n<!-- generated: x (cargo xtask docs) -->\nnew\n<!-- end: x -->\nb\n");
        assert_eq!(splice(&fresh, "x", "new\n").unwrap(), fresh);
        assert!(splice(text, "y", "new\n").is_err());
    }
}
