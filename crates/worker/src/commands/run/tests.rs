//! The Worker's wiring against what the guide says of it.

use super::*;

/// The guide's "Sizing" section: its table of pools (name, connections) and the line that adds them up.
fn sizing() -> (Vec<(String, String)>, String) {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"))
        .expect("docs/operations.md");
    let section: Vec<&str> = guide.lines().skip_while(|l| !l.starts_with("### Sizing")).skip(1).collect();
    let rows = section
        .iter()
        .skip_while(|l| !l.starts_with("| pool |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].to_owned(), cells[2].to_owned())
        })
        .collect();
    let total = section.iter().find(|l| l.starts_with("so at most")).expect("the sum of the pools").to_string();
    (rows, total)
}

/// The number after the last `+ ` of a cell, or the whole cell as a number.
fn added(cell: &str) -> usize {
    let tail = cell.rsplit("+ ").next().unwrap_or(cell);
    tail.trim().parse().unwrap_or_else(|_| panic!("no number in {cell:?}"))
}

#[test]
fn the_guide_states_the_connections_a_worker_opens() {
    let (rows, total) = sizing();
    let row = |name: &str| {
        rows.iter().find(|(pool, _)| pool == name).map(|(_, c)| c.as_str()).unwrap_or_else(|| panic!("no row {name}"))
    };
    let defaults = Settings::default();
    assert_eq!(row("shared"), format!("`database.max_connections` ({})", defaults.database.max_connections));
    let spare = added(row("reserved"));
    assert!(row("reserved").starts_with("`worker.slots` + "), "{}", row("reserved"));
    for slots in [1, 2, 8, 256] {
        assert_eq!(ExecutorConfig::reserved_connections(slots), slots + spare, "reserved for {slots} slots");
    }
    assert_eq!(added(row("probes")), PROBE_CONNECTIONS);
    assert_eq!(added(row("page")), PAGE_CONNECTIONS);
    assert_eq!(added(row("listener")), LISTENER_CONNECTIONS);
    assert_eq!(rows.len(), 5, "every pool is in the table and the sum: {rows:?}");

    // "so at most `database.max_connections + worker.slots + N` a Worker: M with the defaults."
    let (formula, rest) = total.split_once("` a Worker: ").expect("the sum's formula");
    let beyond_slots = added(formula);
    let with_defaults: usize = rest.split_whitespace().next().unwrap().parse().expect("the defaults' sum");
    for slots in [1, 4, 256] {
        let mut s = Settings::default();
        s.worker.slots = slots;
        assert_eq!(most_connections(&s), s.database.max_connections + slots + beyond_slots, "{total}");
    }
    assert_eq!(most_connections(&defaults), with_defaults, "{total}");
}
