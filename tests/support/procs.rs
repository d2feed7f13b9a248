//! Processes as `/proc` shows them: the tools a Worker started, and whether they are gone.

/// A living process (not a zombie).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Its id.
    pub pid: u32,
    /// Its parent now (a process whose parent died has another).
    pub parent: u32,
    /// When it started, in clock ticks after boot: with the pid, it names one process even if the pid is reused.
    pub started: u64,
    /// Its command line (empty for a kernel thread).
    pub args: Vec<String>,
}

/// The process `pid`, unless it is gone or a zombie (dead, waiting to be reaped).
pub fn process(pid: u32) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: the name may hold spaces and parentheses, so read after the last `)`.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    if matches!(fields.first()?.chars().next()?, 'Z' | 'X') {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty());
    Some(Process {
        pid,
        parent: fields.get(1)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
        args: args.map(|a| String::from_utf8_lossy(a).into_owned()).collect(),
    })
}

/// Every living process.
pub fn processes() -> Vec<Process> {
    let pids = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    pids.filter_map(process).collect()
}

/// Whether the process `p` names has ended (gone, a zombie, or its pid taken by another process).
pub fn has_ended(p: &Process) -> bool {
    process(p.pid).is_none_or(|now| now.started != p.started)
}

/// Polls `found` every 50 ms until it gives something, for something that takes up to `idle` on an idle machine
/// (the deadline is the tests' patience for that: `almanac_testdb::patience`); panics naming `what` after that.
pub fn wait_for<T>(what: &str, idle: std::time::Duration, found: impl FnMut() -> Option<T>) -> T {
    almanac_testdb::patience::wait_for(what, idle, std::time::Duration::from_millis(50), found)
}
