//! `almanac-worker`: the Worker of Almanac, a self-hosted photo and video flashback library.
//!
//! This file only parses the command line and dispatches it ([`commands::dispatch`]); the rules an operator's
//! actions follow are in [`ops`], shared with the operator's page.
//!
//! Exit codes ([`commands::Exit`]): 0 success; 1 failure; 2 bad usage or configuration; 3 the database is
//! unavailable; 4 shutdown could not write everything (lease recovery will requeue what was left).

mod cli;
mod commands;
mod http;
mod observe;
mod ops;
mod page;
mod settings;
#[cfg(test)]
mod tests;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::commands::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match cli.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("almanac-worker: {}", observe::shown(&format!("{e:#}")));
            return Exit::Usage.into();
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("almanac-worker: cannot start the runtime: {e}");
            return Exit::Failure.into();
        }
    };
    let done = runtime.block_on(commands::dispatch(cli.command, settings));
    // Dropping the runtime would wait for every call still running on its blocking threads: one into a share whose
    // server stopped answering never returns, and the Worker would never exit.
    runtime.shutdown_timeout(LEFT_RUNNING_AT_EXIT);
    match done {
        Ok(exit) => exit.into(),
        Err(failure) => {
            eprintln!("almanac-worker: {}", observe::shown(&failure.to_string()));
            failure.exit().into()
        }
    }
}

/// How long what still runs on the runtime's blocking threads when a command is done (a call into a share that
/// answers nothing, a proxy's write the shutdown grace cut short) is waited for before the process exits without it.
const LEFT_RUNNING_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(5);
