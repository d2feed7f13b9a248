//! Exit codes, chosen from typed values: a command returns the [`Exit`] it ends with, or a [`Failure`] that
//! carries its own, set where the error was typed (an [`OpError`]'s variant, a refusal's rule) and kept through
//! any context added on the way up.

use std::fmt;
use std::process::ExitCode;

use almanac_domain::{DomainError, QueueError};
use almanac_store_pg::StoreError;

use crate::ops::OpError;

/// How the process ends (`--help` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It did what was asked.
    Success = 0,
    /// It failed, or what it followed failed.
    Failure = 1,
    /// Bad usage or configuration, or a rule refused what was asked: nothing was done.
    Usage = 2,
    /// The database is unavailable.
    Unavailable = 3,
    /// Shutdown could not write everything (lease recovery will requeue what was left).
    Unclean = 4,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

impl Exit {
    /// The exit of an action that failed with `e`.
    pub fn of(e: &OpError) -> Exit {
        match e {
            OpError::Unavailable(_) => Exit::Unavailable,
            // Bad usage: nothing was done, and the message says what to type instead.
            OpError::Settings(_) | OpError::Forbidden(_) | OpError::BadInput(_) => Exit::Usage,
            OpError::NotFound(_)
            | OpError::Refused(_)
            | OpError::Conflict(_)
            | OpError::Failed(_)
            | OpError::Io { .. } => Exit::Failure,
        }
    }
}

/// Why a command did not do its work: the message, with the context added on the way up, and its exit.
#[derive(Debug)]
pub struct Failure {
    exit: Exit,
    error: anyhow::Error,
}

impl Failure {
    /// `error`, ending the process with `exit`.
    pub fn new(exit: Exit, error: impl Into<anyhow::Error>) -> Self {
        Self { exit, error: error.into() }
    }

    /// A failure that is not the database's nor a refusal (exit 1): a setting `run` cannot use, a port it
    /// cannot bind.
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self::new(Exit::Failure, error)
    }

    /// A refusal that changed nothing (exit 2): the message says what to do instead.
    pub fn usage(message: impl fmt::Display) -> Self {
        Self::new(Exit::Usage, anyhow::anyhow!("{message}"))
    }

    /// The same failure, saying what was being done.
    pub fn context(self, context: impl fmt::Display + Send + Sync + 'static) -> Self {
        Self { exit: self.exit, error: self.error.context(context) }
    }

    /// How the process ends.
    pub fn exit(&self) -> Exit {
        self.exit
    }
}

/// The whole chain, each link once: the context added on the way up, the error, and what it came from, unless
/// a link's words were already said (an error's words often carry its source's, which is kept all the same).
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = String::new();
        for link in self.error.chain() {
            let words = link.to_string();
            if said.contains(&words) {
                continue;
            }
            if !said.is_empty() {
                said.push_str(": ");
            }
            said.push_str(&words);
        }
        f.write_str(&said)
    }
}

impl From<OpError> for Failure {
    fn from(e: OpError) -> Self {
        Self::new(Exit::of(&e), e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        OpError::from(e).into()
    }
}

impl From<QueueError> for Failure {
    fn from(e: QueueError) -> Self {
        OpError::from(e).into()
    }
}

impl From<DomainError> for Failure {
    fn from(e: DomainError) -> Self {
        OpError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_is_the_typed_errors_whatever_context_is_added() {
        let cases = [
            (Failure::from(StoreError::Unavailable("gone".into())), 3),
            (Failure::from(QueueError::Unavailable("gone".into())), 3),
            (Failure::from(StoreError::Config("tls".into())), 2),
            (Failure::from(OpError::Forbidden("overlaps".into())), 2),
            (Failure::from(StoreError::Unexpected("bug".into())), 1),
            (Failure::from(OpError::Refused("running".into())), 1),
            (Failure::from(OpError::BadInput("\"crawls\" is not a kind".into())), 2),
            (Failure::from(OpError::NotFound("no work item".into())), 1),
            (Failure::usage("say what"), 2),
            (Failure::failed(anyhow::anyhow!("worker.user")), 1),
        ];
        for (failure, code) in cases {
            let failure = failure.context("reading the schema");
            assert_eq!(failure.exit() as u8, code, "{failure}");
            assert!(failure.to_string().starts_with("reading the schema: "), "{failure}");
        }
    }

    #[test]
    fn a_failure_says_each_link_of_its_chain_once() {
        let lost = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
        let store = StoreError::Unavailable(almanac_domain::Cause::with_source("connection reset by peer", lost));
        let failure = Failure::from(store).context("listing the items");
        let said = failure.to_string();
        assert!(said.starts_with("listing the items: the database is unavailable: connection reset by peer"), "{said}");
        assert_eq!(said.matches("connection reset by peer").count(), 1, "{said}");
        // The driver's error is kept beneath, for code that looks at it.
        let kept = failure.error.chain().find_map(|e| e.downcast_ref::<std::io::Error>()).expect("the source kept");
        assert_eq!(kept.kind(), std::io::ErrorKind::ConnectionReset);
    }
}
