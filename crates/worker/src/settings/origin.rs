//! Where the settings came from: the file read (if any) and the environment variables that set a value, so that an
//! operator can tell which database and proxy root a command acts on.

use std::path::{Path, PathBuf};

/// The file the settings were read from and what the environment set over it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origin {
    /// The settings file read, if any.
    pub file: Option<PathBuf>,
    /// Each environment variable that set a value, in the order of the settings they set.
    pub environment: Vec<FromEnvironment>,
}

/// An environment variable that set a setting.
#[derive(Debug, Clone, PartialEq)]
pub struct FromEnvironment {
    /// `DATABASE_URL` or `ALMANAC__SECTION__KEY`.
    pub variable: String,
    /// The setting it set (`database.url`).
    pub setting: String,
    /// Whether the settings file gives that setting too (its value is then not the one used).
    pub over_the_file: bool,
}

impl Origin {
    /// The origin of settings read from `file` and then `variables` (each with the setting it sets), the file's own
    /// settings being `in_file`.
    pub(super) fn new(file: Option<&Path>, variables: Vec<(String, String)>, in_file: impl Fn(&str) -> bool) -> Self {
        let mut environment: Vec<FromEnvironment> = variables
            .into_iter()
            .map(|(variable, setting)| FromEnvironment { over_the_file: in_file(&setting), variable, setting })
            .collect();
        environment.sort_by(|a, b| (&a.setting, &a.variable).cmp(&(&b.setting, &b.variable)));
        Self { file: file.map(Path::to_path_buf), environment }
    }

    /// Where the settings were read from, for `config check`: the file, then each variable that set a value.
    pub fn described(&self) -> Vec<String> {
        let mut lines = vec![match &self.file {
            Some(file) => format!("settings read from {}", file.display()),
            None => format!(
                "no settings file (almanac.toml here, {}, or --config-file): the built-in defaults",
                super::INSTALLED_FILE
            ),
        }];
        lines.extend(self.environment.iter().map(|e| self.line(e)));
        lines
    }

    /// A warning for each setting the environment gives over the file's own value, for every command but `run`:
    /// a `DATABASE_URL` left in an operator's shell otherwise sends `config add` to another database silently.
    pub fn overriding_the_file(&self) -> Vec<String> {
        self.environment.iter().filter(|e| e.over_the_file).map(|e| self.line(e)).collect()
    }

    /// The variables that set a value, for the `worker_starting` event: `DATABASE_URL` or
    /// `ALMANAC__QUEUE__LEASE (over the file)`; `none` when none did.
    pub fn environment_summary(&self) -> String {
        let each = self
            .environment
            .iter()
            .map(|e| if e.over_the_file { format!("{} (over the file)", e.variable) } else { e.variable.clone() });
        let all = each.collect::<Vec<_>>().join(", ");
        if all.is_empty() { "none".into() } else { all }
    }

    fn line(&self, e: &FromEnvironment) -> String {
        match (&self.file, e.over_the_file) {
            (Some(file), true) => format!(
                "{} in the environment sets {}, not the value in {} (unset it to use the file's)",
                e.variable,
                e.setting,
                file.display()
            ),
            _ => format!("{} in the environment sets {}", e.variable, e.setting),
        }
    }
}
