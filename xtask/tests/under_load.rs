//! The busy loops of `cargo xtask test --under-load` cannot outlive the xtask that started them: a loop whose
//! parent ended (here a shell that starts one and exits at once, as an xtask killed with SIGKILL would) ends too.

use std::process::Command;
use std::time::Duration;

#[test]
fn a_busy_loop_ends_when_its_parent_does() {
    let xtask = env!("CARGO_BIN_EXE_xtask");
    // The shell starts the loop naming itself as the parent, prints the loop's id and exits.
    let out = Command::new("sh").args(["-c", "\"$0\" burn $$ & echo $!", xtask]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    almanac_testdb::patience::wait_for(
        "the orphaned busy loop to end",
        Duration::from_secs(2),
        Duration::from_millis(20),
        || (!running()).then_some(()),
    );
}

#[test]
fn a_busy_loop_of_a_living_parent_runs_until_stopped() {
    let mut burn =
        Command::new(env!("CARGO_BIN_EXE_xtask")).args(["burn", &std::process::id().to_string()]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(burn.try_wait().unwrap().is_none(), "it still runs: its parent lives");
    burn.kill().unwrap();
    burn.wait().unwrap();
}
