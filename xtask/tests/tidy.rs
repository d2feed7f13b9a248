//! Tidy tests: the rules ARCHITECTURE.md states, and the docs the code keeps true, checked on the sources.
//!
//! Plain text scans (no parser): comments, strings and `#[cfg(test)] mod … { … }` blocks are told apart well
//! enough for these rules, and every failure names the file and line to look at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The Worker's table of log events and metrics, as the Worker compiles it.
#[path = "../../crates/worker/src/observe/table.rs"]
#[allow(dead_code, reason = "the tidy tests read only the names")]
mod table;

/// Files under `crates/*/src` that may be longer than [`MAX_FILE_LINES`] or hold functions longer than
/// [`MAX_FN_LINES`]: generated code and templates only, each named in ARCHITECTURE.md ("Size limits").
const SIZE_EXCEPTIONS: &[&str] = &[];

/// No file under `crates/*/src` is longer (ARCHITECTURE.md, "Size limits").
const MAX_FILE_LINES: usize = 500;

/// No function under `crates/*/src` is longer, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 80;

/// Where the product reads the wall clock (`SystemTime::now`, `Utc::now`, UUID v7 ids), each listed in
/// ARCHITECTURE.md ("Time"). A path ending in `/` stands for the files beneath it.
const WALL_CLOCK_READERS: &[&str] = &[
    "crates/domain/src/ids.rs",
    "crates/store-pg/src/catalogue_store/rows.rs",
    "crates/media/src/dates/file_name.rs",
    "crates/media/src/video.rs",
    "crates/handlers/src/watch/poll.rs",
    "crates/worker/src/page/mod.rs",
    "crates/worker/src/observe.rs",
];

/// What reads the wall clock (`Instant` is monotonic and tokio's clock is the executor's: both are fine).
const WALL_CLOCK: &[&str] = &["SystemTime::now", "Utc::now", "Local::now", "now_v7", "chrono::offset::"];

/// What SQL looks like in a Rust source.
const SQL: &[&str] = &[
    "sql_query",
    "SELECT ",
    "INSERT INTO",
    "DELETE FROM",
    "UPDATE work_items",
    "UPDATE storage_configs",
    "UPDATE media_assets",
    "batch_execute",
    "simple_query",
];

/// Crates whose `src` may hold SQL: the adapter, and the tests' database support.
const SQL_CRATES: &[&str] = &["store-pg", "testdb"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// A source file: its path from the workspace root and its text.
struct Source {
    path: String,
    text: String,
}

impl Source {
    /// The crate's folder name (`store-pg`), for files under `crates/`.
    fn krate(&self) -> &str {
        self.path.strip_prefix("crates/").and_then(|p| p.split('/').next()).unwrap_or("")
    }
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.map(|e| e.expect("a readable folder").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Every file under `crates/*/src`, Rust or not.
fn crate_src_files() -> Vec<PathBuf> {
    let root = workspace();
    let mut out = Vec::new();
    let mut crates: Vec<_> = std::fs::read_dir(root.join("crates")).unwrap().map(|e| e.unwrap().path()).collect();
    crates.sort();
    for krate in crates {
        files_under(&krate.join("src"), &mut out);
    }
    out
}

/// Every Rust source under `crates/*/src`.
fn crate_sources() -> Vec<Source> {
    let root = workspace();
    crate_src_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| Source {
            path: p.strip_prefix(&root).unwrap().to_string_lossy().into_owned(),
            text: std::fs::read_to_string(&p).unwrap(),
        })
        .collect()
}

/// What a byte of a Rust source is part of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Code,
    Comment,
    Text,
}

/// The class of every byte of `text`: comments (line, block, nested), string literals (plain, byte, raw) and
/// character literals, told from lifetimes.
fn classify(text: &str) -> Vec<Class> {
    let b = text.as_bytes();
    let mut class = vec![Class::Code; b.len()];
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let start = i;
        let kind = if b[i..].starts_with(b"//") {
            i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
            Class::Comment
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            Class::Comment
        } else if let Some(hashes) = raw_string_at(b, i) {
            let open = b[i..].iter().position(|&c| c == b'"').expect("a raw string opens") + i + 1;
            let close = format!("\"{}", "#".repeat(hashes));
            i = text[open..].find(&close).map_or(b.len(), |n| open + n + close.len());
            Class::Text
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            Class::Text
        } else if b[i] == b'\'' && (i == 0 || !ident(b[i - 1]) || (b[i - 1] == b'b' && (i < 2 || !ident(b[i - 2])))) {
            // 'x', '\n', '\'', '\u{..}' are characters; 'a (no closing quote right after) is a lifetime or label.
            if b.get(i + 1) == Some(&b'\\') && i + 3 <= b.len() {
                i = b[i + 3..].iter().position(|&c| c == b'\'').map_or(b.len(), |n| i + 3 + n + 1);
                Class::Text
            } else if let Some(c) = text[i + 1..].chars().next() {
                let after = i + 1 + c.len_utf8();
                if b.get(after) == Some(&b'\'') {
                    i = after + 1;
                    Class::Text
                } else {
                    i += 1;
                    Class::Code
                }
            } else {
                i += 1;
                Class::Code
            }
        } else {
            i += 1;
            Class::Code
        };
        let end = i.min(b.len());
        class[start..end].fill(kind);
    }
    class
}

/// The number of `#`s of a raw string (`r"`, `r#"`, `br#"`) starting at `i`, if one does.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let rest = b[i..].strip_prefix(b"b").unwrap_or(&b[i..]);
    let rest = rest.strip_prefix(b"r")?;
    let hashes = rest.iter().take_while(|&&c| c == b'#').count();
    (rest.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// `text` with the bytes of the given classes replaced by spaces (newlines kept, so lines and offsets stay).
fn blank(text: &str, class: &[Class], hide: &[Class]) -> String {
    let bytes: Vec<u8> =
        text.bytes().zip(class).map(|(c, k)| if hide.contains(k) && c != b'\n' { b' ' } else { c }).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The byte after the brace that closes the one at `open` in `code` (comments and strings blanked).
fn closing(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// A source's code with its comments blanked, and with `#[cfg(test)] mod … { … }` blocks blanked too: what the
/// product runs. Strings are kept (SQL and event names live in them) unless `strings` is false.
fn product_code(source: &Source, strings: bool) -> String {
    let class = classify(&source.text);
    let code = blank(&source.text, &class, &[Class::Comment, Class::Text]);
    let hide: &[Class] = if strings { &[Class::Comment] } else { &[Class::Comment, Class::Text] };
    let mut out = blank(&source.text, &class, hide).into_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|n| from + n) {
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        let next = code.len() - after.len();
        from = next;
        if !(after.starts_with("mod ") || after.starts_with("pub mod ") || after.starts_with("pub(crate) mod ")) {
            continue;
        }
        let Some(brace) = code[next..].find('{') else { continue };
        if code[next..].find(';').is_some_and(|semi| semi < brace) {
            continue; // `mod tests;`: a file of its own, which is a test file (see `is_test_file`).
        }
        let end = closing(&code, next + brace);
        for c in &mut out[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).unwrap_or_default()
}

/// A file that only tests compile: `tests.rs` or a `tests/` module beside the code.
fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.contains("/tests/")
}

/// The 1-based line of byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].bytes().filter(|&c| c == b'\n').count() + 1
}

/// Every `what "name"` (e.g. `event = "claimed"`) in the product code, with where it is.
fn literals_after(what: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for source in crate_sources().iter().filter(|s| !is_test_file(&s.path)) {
        let code = product_code(source, true);
        let mut from = 0;
        while let Some(at) = code[from..].find(what).map(|n| from + n) {
            from = at + what.len();
            let rest = &code[from..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let place = format!("{}:{}", source.path, line_of(&code, at));
            found.push((name, place));
        }
    }
    found
}

#[test]
fn the_generated_docs_are_current() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xtask")).args(["docs", "--check"]).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn every_event_the_crates_emit_is_in_the_table_and_every_event_in_it_is_emitted() {
    let emitted = literals_after("event = \"");
    let table: BTreeSet<&str> = table::EVENTS.iter().map(|e| e.name).collect();
    assert_eq!(table.len(), table::EVENTS.len(), "an event is in crates/worker/src/observe/table.rs twice");
    let missing: Vec<_> = emitted.iter().filter(|(name, _)| !table.contains(name.as_str())).collect();
    assert!(
        missing.is_empty(),
        "events emitted but not in crates/worker/src/observe/table.rs (add a row, then `cargo xtask docs`): \
         {missing:?}"
    );
    let names: BTreeSet<&str> = emitted.iter().map(|(name, _)| name.as_str()).collect();
    let stale: Vec<_> = table.difference(&names).collect();
    assert!(stale.is_empty(), "events in crates/worker/src/observe/table.rs that nothing emits: {stale:?}");
    assert!(names.len() >= 50, "the scan found too few events to be working: {names:?}");
}

/// Every `const NAME: &str = "value";` of the crates' product code, by name.
fn string_constants() -> BTreeMap<String, BTreeSet<String>> {
    let mut constants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in crate_sources().iter().filter(|s| !is_test_file(&s.path)) {
        for line in product_code(source, true).lines() {
            let Some(rest) = line.split("const ").nth(1) else { continue };
            let Some((name, rest)) = rest.split_once(": &str = \"") else { continue };
            let Some((value, _)) = rest.split_once('"') else { continue };
            constants.entry(name.trim().to_owned()).or_default().insert(value.to_owned());
        }
    }
    constants
}

/// The first argument of every `counter!`, `gauge!` and `histogram!` (their `describe_` forms included) in the
/// product code, and of every `scrape_gauge(` (a gauge written as text at each scrape, `observe.rs`), with where
/// it is.
fn metric_names() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for source in crate_sources().iter().filter(|s| !is_test_file(&s.path)) {
        let code = product_code(source, true);
        for macro_name in ["counter!(", "gauge!(", "histogram!(", "scrape_gauge("] {
            for (at, _) in code.match_indices(macro_name) {
                let argument = code[at + macro_name.len()..].trim_start();
                let argument = argument.split([',', ')']).next().unwrap().trim().to_owned();
                found.push((argument, format!("{}:{}", source.path, line_of(&code, at))));
            }
        }
    }
    found
}

#[test]
fn every_metric_the_crates_record_is_in_the_table_and_every_metric_in_it_is_recorded() {
    let constants = string_constants();
    let table: BTreeSet<&str> = table::METRICS.iter().map(|m| m.name).collect();
    let mut recorded = BTreeSet::new();
    let mut unknown = Vec::new();
    for (argument, place) in metric_names() {
        let names: BTreeSet<String> = match argument.strip_prefix('"') {
            Some(literal) => [literal.trim_end_matches('"').to_owned()].into(),
            None => constants.get(argument.rsplit("::").next().unwrap()).cloned().unwrap_or_default(),
        };
        if names.is_empty() {
            unknown.push(format!("{place}: `{argument}`"));
        }
        for name in names {
            if !table.contains(name.as_str()) {
                unknown.push(format!("{place}: {name}"));
            }
            recorded.insert(name);
        }
    }
    assert!(unknown.is_empty(), "metrics recorded but not in crates/worker/src/observe/table.rs: {unknown:?}");
    let stale: Vec<_> = table.iter().filter(|m| !recorded.contains(**m)).collect();
    assert!(stale.is_empty(), "metrics in crates/worker/src/observe/table.rs that nothing records: {stale:?}");
}

/// The tests a doc names: lines `` - `file`: `test`, `test` ``, as (file, test, line of the doc).
fn tests_named_in(doc: &str) -> Vec<(String, String, usize)> {
    let text = std::fs::read_to_string(workspace().join(doc)).unwrap();
    let mut named = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("- `") else { continue };
        let Some((file, tests)) = rest.split_once("`: ") else { continue };
        if !file.ends_with(".rs") {
            continue;
        }
        for test in tests.split(", ") {
            named.push((file.to_owned(), test.trim().trim_matches('`').to_owned(), n + 1));
        }
    }
    named
}

#[test]
fn every_test_named_in_the_docs_exists() {
    let mut wrong = Vec::new();
    let mut count = 0;
    for doc in ["docs/safety.md", "docs/queue.md"] {
        for (file, test, line) in tests_named_in(doc) {
            count += 1;
            let Ok(text) = std::fs::read_to_string(workspace().join(&file)) else {
                wrong.push(format!("{doc}:{line}: no file {file}"));
                continue;
            };
            let code = blank(&text, &classify(&text), &[Class::Comment, Class::Text]);
            // A test: its `fn` (or `async fn`) right after an attribute.
            let defined = code.match_indices(&format!("fn {test}(")).any(|(at, _)| {
                let before = code[..at].trim_end();
                before.strip_suffix("async").unwrap_or(before).trim_end().ends_with(']')
            });
            if !defined {
                wrong.push(format!("{doc}:{line}: no fn {test} in {file}"));
            }
        }
    }
    assert!(wrong.is_empty(), "tests named in the docs that do not exist:\n{}", wrong.join("\n"));
    assert!(count >= 80, "the scan found too few tests to be working: {count}");
}

#[test]
fn every_safety_invariant_names_its_tests() {
    let text = std::fs::read_to_string(workspace().join("docs/safety.md")).unwrap();
    let sections: Vec<&str> = text.split("\n## ").skip(1).collect();
    assert_eq!(sections.len(), 12, "docs/safety.md lists the twelve invariants");
    for (n, section) in sections.iter().enumerate() {
        assert!(section.starts_with(&format!("{}. ", n + 1)), "invariant {} is numbered so: {section:.40}", n + 1);
        assert!(section.contains("\n- `"), "invariant {} names no test", n + 1);
    }
}

#[test]
fn every_invariant_the_code_cites_is_in_safety_md() {
    let safety = std::fs::read_to_string(workspace().join("docs/safety.md")).unwrap();
    let mut files = Vec::new();
    files_under(&workspace().join("crates"), &mut files);
    files_under(&workspace().join("tests"), &mut files);
    let mut wrong = Vec::new();
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "rs")) {
        let text = std::fs::read_to_string(path).unwrap().to_lowercase();
        for (at, _) in text.match_indices("invariant ") {
            let number: String = text[at + "invariant ".len()..].chars().take_while(char::is_ascii_digit).collect();
            if !number.is_empty() && !safety.contains(&format!("\n## {number}. ")) {
                wrong.push(format!("{}:{}: invariant {number}", path.display(), line_of(&text, at)));
            }
            if !number.is_empty() && !text.contains("docs/safety.md") {
                wrong.push(format!(
                    "{}:{}: cites invariant {number} without naming docs/safety.md",
                    path.display(),
                    line_of(&text, at)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "the code cites invariants docs/safety.md does not have:\n{}", wrong.join("\n"));
}

/// The `[dependencies]` (not dev- or build-) of a crate's Cargo.toml, by name.
fn dependencies(krate: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(workspace().join("crates").join(krate).join("Cargo.toml")).unwrap();
    let mut section = "";
    let mut names = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[dependencies]" && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap().trim();
            names.insert(name.to_owned());
        }
    }
    names
}

#[test]
fn dependencies_point_inwards() {
    let database = ["diesel", "diesel-async", "diesel_migrations", "tokio-postgres", "tokio-postgres-rustls"];
    // (crate, the workspace crates it may depend on, whether the database drivers are allowed)
    let rules: [(&str, &[&str], bool); 7] = [
        ("domain", &[], false),
        ("executor", &["almanac-domain"], false),
        ("media", &["almanac-domain"], false),
        ("handlers", &["almanac-domain", "almanac-executor", "almanac-media"], false),
        ("store-pg", &["almanac-domain"], true),
        ("testdb", &["almanac-store-pg"], true),
        (
            "worker",
            &["almanac-domain", "almanac-store-pg", "almanac-executor", "almanac-handlers", "almanac-media"],
            false,
        ),
    ];
    let mut crates: Vec<String> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    crates.sort();
    for krate in &crates {
        assert!(rules.iter().any(|(k, _, _)| k == krate), "crates/{krate} has no rule here: add one");
    }
    let mut wrong = Vec::new();
    for (krate, allowed, drivers) in rules {
        for dep in dependencies(krate) {
            if dep.starts_with("almanac-") && !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{krate} depends on {dep}"));
            }
            if database.contains(&dep.as_str()) && !drivers {
                wrong.push(format!("{krate} depends on {dep}: only store-pg talks to the database"));
            }
        }
    }
    let domain = dependencies("domain");
    for io in ["tokio", "tokio-util", "diesel", "diesel-async"] {
        if domain.contains(io) {
            wrong.push(format!("domain depends on {io}: the domain does no I/O"));
        }
    }
    assert!(wrong.is_empty(), "dependencies against ARCHITECTURE.md:\n{}", wrong.join("\n"));
}

#[test]
fn sql_lives_only_in_store_pg() {
    let mut found = Vec::new();
    for source in crate_sources().iter().filter(|s| !is_test_file(&s.path) && !SQL_CRATES.contains(&s.krate())) {
        let code = product_code(source, true);
        for pattern in SQL {
            for (at, _) in code.match_indices(pattern) {
                found.push(format!("{}:{}: {pattern}", source.path, line_of(&code, at)));
            }
        }
    }
    assert!(found.is_empty(), "SQL outside crates/store-pg (ARCHITECTURE.md):\n{}", found.join("\n"));
}

#[test]
fn the_wall_clock_is_read_only_where_architecture_says() {
    let architecture = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let allowed =
        |path: &str| WALL_CLOCK_READERS.iter().any(|r| if r.ends_with('/') { path.starts_with(r) } else { path == *r });
    let mut found = Vec::new();
    let mut readers = BTreeSet::new();
    for source in crate_sources().iter().filter(|s| !is_test_file(&s.path) && s.krate() != "testdb") {
        let code = product_code(source, false);
        for pattern in WALL_CLOCK {
            for (at, _) in code.match_indices(pattern) {
                readers.insert(source.path.clone());
                if !allowed(&source.path) {
                    found.push(format!("{}:{}: {pattern}", source.path, line_of(&code, at)));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "wall-clock reads outside the files ARCHITECTURE.md lists under \"Time\" (use the database's clock, \
         tokio's, or add the file to both lists with its reason):\n{}",
        found.join("\n")
    );
    for reader in WALL_CLOCK_READERS {
        let short = reader.trim_start_matches("crates/");
        assert!(architecture.contains(short), "ARCHITECTURE.md (\"Time\") does not name {short}");
        assert!(
            reader.ends_with('/') || readers.contains(*reader),
            "{reader} no longer reads the wall clock: take it off the lists"
        );
    }
}

/// Every file and folder of the project, as paths from the workspace root (`crates/worker/src/main.rs`).
fn project_paths() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                out.push(format!("{name}/"));
                walk(&path, root, out);
            } else {
                out.push(name);
            }
        }
    }
    let root = workspace();
    let mut out = Vec::new();
    for top in ["crates", "tests", "xtask", "docs", "migrations", "packaging"] {
        out.push(format!("{top}/"));
        walk(&root.join(top), &root, &mut out);
    }
    out
}

/// Whether a path ARCHITECTURE.md names is a project path, or the end of one (`crawl/mod.rs`, `page/auth`).
fn names_a_project_path(paths: &[String], named: &str) -> bool {
    let named = named.trim_end_matches('/');
    paths.iter().any(|p| {
        let p = p.trim_end_matches('/');
        p == named || p.ends_with(&format!("/{named}"))
    })
}

#[test]
fn every_file_architecture_names_exists() {
    let architecture = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let paths = project_paths();
    let mut missing = Vec::new();
    for (n, token) in architecture.split('`').enumerate() {
        let path = token.trim_end_matches(['.', ',']);
        let looks_like_a_file = [".rs", ".md", ".toml", ".sql"].iter().any(|e| path.ends_with(e));
        let looks_like_a_folder = path.ends_with('/') && !path.starts_with('/');
        let plain = !path.contains([' ', '<', '*', ':']);
        if n % 2 == 1 && (looks_like_a_file || looks_like_a_folder) && plain && !names_a_project_path(&paths, path) {
            missing.push(path.to_owned());
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md names files that do not exist: {missing:?}");
}

#[test]
fn size_exceptions_are_named_in_architecture() {
    let architecture = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    for exception in SIZE_EXCEPTIONS {
        assert!(
            architecture.contains(exception.trim_start_matches("crates/")),
            "{exception} is not in ARCHITECTURE.md"
        );
    }
}

#[test]
fn no_file_under_crates_src_is_over_500_lines() {
    let root = workspace();
    let mut long = Vec::new();
    for path in crate_src_files() {
        let name = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
        let lines = std::fs::read(&path).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0);
        if lines > MAX_FILE_LINES && !SIZE_EXCEPTIONS.contains(&name.as_str()) {
            long.push(format!("{name}: {lines} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (ARCHITECTURE.md, \"Size limits\"):\n{}",
        long.join("\n")
    );
}

/// Every function with a body in `text`: (name, first line, lines from its `fn` line to its closing brace).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = blank(text, &classify(text), &[Class::Comment, Class::Text]);
    let b = code.as_bytes();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue; // `fn(…)`: a pointer type
        }
        let rest = &code[at..];
        let Some(open) = rest.find(['{', ';']) else { continue };
        if rest.as_bytes()[open] == b';' {
            continue; // a declaration without a body
        }
        let end = closing(&code, at + open);
        let first = line_of(&code, at);
        found.push((name, first, line_of(&code, end.saturating_sub(1)) - first + 1));
    }
    found
}

#[test]
fn no_function_under_crates_src_is_over_80_lines() {
    let mut long = Vec::new();
    for source in crate_sources() {
        if SIZE_EXCEPTIONS.contains(&source.path.as_str()) {
            continue;
        }
        for (name, line, lines) in functions(&source.text) {
            if lines > MAX_FN_LINES {
                long.push(format!("{}:{line}: fn {name}: {lines} lines", source.path));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (ARCHITECTURE.md, \"Size limits\"):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_scanner_tells_code_from_comments_strings_and_characters() {
    let text =
        "fn a() {\n    let s = \"}\"; // }\n    let c = '}'; let r = r#\"{\"#;\n    /* { */ x::<'a>()\n}\nfn b();\n";
    assert_eq!(functions(text), [("a".to_owned(), 1, 5)]);
    let class = classify(text);
    let code = blank(text, &class, &[Class::Comment, Class::Text]);
    assert_eq!(code.matches('{').count(), 1, "{code}");
    assert_eq!(code.matches('}').count(), 1, "{code}");
    assert!(code.contains("'a>"), "a lifetime is code: {code}");
    let source = Source {
        path: "crates/x/src/lib.rs".into(),
        text: "fn a() { b(\"SELECT 1\") }\n#[cfg(test)]\nmod tests {\n    fn t() { \"SELECT 2\"; }\n}\n".into(),
    };
    let product = product_code(&source, true);
    assert!(product.contains("SELECT 1") && !product.contains("SELECT 2"), "{product}");
}

/// The names ARCHITECTURE's "What the web backend may use" section puts in backticks.
fn backend_surface() -> BTreeSet<String> {
    let architecture = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let start = architecture.find("### What the web backend may use").expect("the section exists");
    let section = &architecture[start..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |end| end + 4)];
    section.split('`').skip(1).step_by(2).flat_map(|token| token.split("::").last()).map(str::to_owned).collect()
}

#[test]
fn the_backend_example_uses_only_the_marked_surface() {
    let example = std::fs::read_to_string(workspace().join("crates/store-pg/examples/backend.rs")).unwrap();
    let surface = backend_surface();
    assert!(!example.contains("ports::"), "the backend example reaches into almanac_domain::ports, the Worker's own");
    let mut outside = BTreeSet::new();
    // Items of the store named by path or imported, and the store's methods it calls.
    for (at, _) in example.match_indices("almanac_store_pg::") {
        let rest = &example[at + "almanac_store_pg::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(list) => list[..list.find('}').unwrap()].split(',').map(str::trim).collect::<Vec<_>>(),
            None => vec![rest.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap()],
        };
        outside.extend(names.into_iter().filter(|n| !n.is_empty() && !surface.contains(*n)).map(str::to_owned));
    }
    for (at, _) in example.match_indices("store.") {
        let method: String =
            example[at + "store.".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !surface.contains(&method) {
            outside.insert(format!("PgStore::{method}"));
        }
    }
    assert!(
        outside.is_empty(),
        "the backend example uses {outside:?}, which ARCHITECTURE does not list as the web backend's"
    );
}
