//! A busy machine on demand: `cargo xtask test --under-load [N]` runs N CPU-bound processes beside the suite,
//! at the suite's own priority, so that a wait that holds only on an idle machine shows up here and not on a
//! newcomer's laptop. Each is this binary's hidden `burn` verb: a busy loop that ends as soon as the xtask
//! that started it is no longer its parent (killed, even with SIGKILL, or ended), so none can outlive it; the
//! [`Load`] guard also kills them when the suite ends, whatever its outcome, and Ctrl-C reaches them with the
//! rest of the terminal's process group.

use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// How many CPU-bound processes `cargo xtask test --under-load` runs when not told: several times the cores of
/// a small machine, as a build and benchmarks beside the suite would make it.
pub const DEFAULT: usize = 4;

/// The CPU-bound processes, killed and reaped when this is dropped.
pub struct Load(Vec<Child>);

impl Load {
    /// Starts `n` busy loops (none for 0).
    pub fn start(n: usize) -> Result<Self> {
        let me = std::env::current_exe().context("finding xtask's own binary")?;
        let parent = std::process::id().to_string();
        Self::of(n, || {
            let mut burn = Command::new(&me);
            burn.args(["burn", &parent]);
            burn
        })
    }

    /// Starts `n` processes of `command`, nothing read from or written to them.
    fn of(n: usize, command: impl Fn() -> Command) -> Result<Self> {
        let mut load = Self(Vec::with_capacity(n));
        for _ in 0..n {
            let child = command().stdin(Stdio::null()).stdout(Stdio::null()).spawn().context("starting a busy loop")?;
            load.0.push(child);
        }
        if n > 0 {
            println!("==> {n} CPU-bound processes run beside the suite");
        }
        Ok(load)
    }

    /// The processes' ids.
    #[cfg(test)]
    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spins one core until `parent` is no longer this process's parent (it ended and the process was handed to
/// another), checking a few hundred times a second.
pub fn burn(parent: u32) -> ! {
    let mut x: u64 = 1;
    loop {
        for i in 0..200_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        // Reaped (gone) or a zombie (dead, not yet reaped) is not alive.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    }

    #[test]
    fn the_load_is_killed_and_reaped_when_dropped() {
        let load = Load::of(3, || {
            let mut c = Command::new("sleep");
            c.arg("600");
            c
        })
        .unwrap();
        let pids = load.pids();
        assert_eq!(pids.len(), 3);
        assert!(pids.iter().all(|p| alive(*p)), "they run");
        drop(load);
        assert!(pids.iter().all(|p| !alive(*p)), "none is left: {pids:?}");
        assert!(Load::of(0, || Command::new("false")).unwrap().pids().is_empty());
    }
}
