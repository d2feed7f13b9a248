//! [`Cause`]: what went wrong beneath a port, in words for people, with the error it came from kept.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What went wrong beneath a port (the database, the driver), in words for people, with the error it came
/// from kept as its [`Error::source`], so a caller can still look at the driver's own error (and a report of
/// the whole chain shows it).
///
/// Its words already carry the original's (logs print an error's words alone); a report that walks the chain
/// should leave out a link whose words it has already printed.
#[derive(Clone)]
pub struct Cause {
    said: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Cause {
    /// Words with no error beneath them.
    pub fn new(said: impl Into<String>) -> Self {
        Self { said: said.into(), source: None }
    }

    /// Words, and the error they came from.
    pub fn with_source(said: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        Self { said: said.into(), source: Some(Arc::new(source)) }
    }

    /// An error's own words, and the error kept beneath them.
    pub fn from_error(source: impl Error + Send + Sync + 'static) -> Self {
        Self::with_source(source.to_string(), source)
    }

    /// Words, and the error they came from, already boxed (as diesel's migration harness gives it).
    pub fn with_boxed_source(said: impl Into<String>, source: Box<dyn Error + Send + Sync + 'static>) -> Self {
        Self { said: said.into(), source: Some(Arc::from(source)) }
    }

    /// The error these words came from, when there is one.
    pub fn origin(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// The words.
    pub fn as_str(&self) -> &str {
        &self.said
    }
}

impl std::ops::Deref for Cause {
    type Target = str;
    fn deref(&self) -> &str {
        &self.said
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.said)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{:?} (from {source:?})", self.said),
            None => write!(f, "{:?}", self.said),
        }
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// Causes are compared by their words: the error beneath is kept for people and for code that looks at it.
impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.said == other.said
    }
}

impl Eq for Cause {}

impl From<String> for Cause {
    fn from(said: String) -> Self {
        Self::new(said)
    }
}

impl From<&str> for Cause {
    fn from(said: &str) -> Self {
        Self::new(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_beneath_is_kept_as_the_source_and_the_words_are_compared() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let cause = Cause::with_source("the connection was reset by peer", io);
        let source = Error::source(&cause).expect("kept");
        assert_eq!(source.downcast_ref::<std::io::Error>().unwrap().kind(), std::io::ErrorKind::ConnectionReset);
        assert!(cause.origin().is_some());
        assert_eq!(cause, Cause::new("the connection was reset by peer"), "compared by their words");
        assert!(cause.contains("reset"));
        assert!(Cause::from("x").origin().is_none());
    }

    #[test]
    fn a_cause_shows_its_words_and_debug_shows_the_error_beneath() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let cause = Cause::with_source("the connection was reset", io);
        assert_eq!(cause.as_str(), "the connection was reset");
        assert_eq!(cause.to_string(), "the connection was reset");
        let debug = format!("{cause:?}");
        assert!(debug.starts_with("\"the connection was reset\" (from "), "{debug}");
        assert!(debug.contains("reset by peer"), "{debug}");
        assert_eq!(format!("{:?}", Cause::new("alone")), "\"alone\"");
        assert_ne!(Cause::new("one thing"), Cause::new("another"), "other words, another cause");
    }
}
