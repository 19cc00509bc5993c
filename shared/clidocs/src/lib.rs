//! Manual pages and shell completions, written by each binary from its own clap definition.
//!
//! The clap definitions live in the binary crates, and no crate may depend on a binary crate,
//! so no separate generator can reach them: instead every binary's `main` calls
//! [`generate_if_asked`] before anything else. When the environment variable
//! [`GENERATE_ENV`] (`ATELIER_GENERATE_DOCS`) names a directory, the binary writes its
//! documentation there and exits without doing its job:
//! - `<dir>/man/<name>.1`, and a page per subcommand (`<name>-<sub>.1`, nested ones likewise),
//!   roff rendered by `clap_mangen`;
//! - with [`Docs::ManualAndCompletions`], completions named as each shell looks them up:
//!   `<dir>/completions/bash/<name>`, `<dir>/completions/zsh/_<name>` and
//!   `<dir>/completions/fish/<name>.fish`.
//!
//! Unset or empty, the variable changes nothing. `scripts/package` runs every built binary this
//! way and installs what they write; no unit or rendered environment ever sets it. Every page
//! carries the date [`DATE_ENV`] (`ATELIER_DOCS_DATE`, `YYYY-MM-DD`) gives: the packager dates
//! the pages by the commit, so a package built twice from one commit has the same pages.
//!
//! The operator commands share one more piece of their terminal manners here: [`progress`],
//! the line that shows a long step while it runs.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Command;
use clap_complete::Shell;

pub mod progress;

/// The environment variable that asks a binary to write its documentation to the directory it
/// names, then exit.
pub const GENERATE_ENV: &str = "ATELIER_GENERATE_DOCS";

/// The environment variable that gives the pages' date, `YYYY-MM-DD`; required with
/// [`GENERATE_ENV`] (a page needs one: without it the title line's fields shift).
pub const DATE_ENV: &str = "ATELIER_DOCS_DATE";

/// The manual's name in every page's footer.
const MANUAL: &str = "Atelier";

/// The shells completions are written for, each with the file name it looks a command up by.
const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bash"),
    (Shell::Zsh, "zsh"),
    (Shell::Fish, "fish"),
];

/// What a binary documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Docs {
    /// Manual pages only: a daemon or helper nobody types at a prompt.
    Manual,
    /// Manual pages and completions for bash, zsh and fish: a command an operator types.
    ManualAndCompletions,
}

/// Why the documentation could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    /// A directory or file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// What was being written.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// [`DATE_ENV`] is missing or not a `YYYY-MM-DD` date.
    #[error("{DATE_ENV} must be a date as YYYY-MM-DD, got {0:?}")]
    Date(String),
}

/// Writes the documentation of `command` when [`GENERATE_ENV`] names a directory; `None` (and
/// nothing written) when it does not, so the binary goes on with its job. `command` is only
/// built when asked.
pub fn generate_if_asked(
    command: impl FnOnce() -> Command,
    docs: Docs,
) -> Option<Result<Vec<PathBuf>, DocsError>> {
    let dir = std::env::var_os(GENERATE_ENV).filter(|dir| !dir.is_empty())?;
    let date = std::env::var(DATE_ENV).unwrap_or_default();
    Some(generate(command(), docs, Path::new(&dir), &date))
}

/// Writes the manual pages (dated `date`, `YYYY-MM-DD`) and, when asked, completions of
/// `command` below `dir`; returns every file written.
pub fn generate(
    command: Command,
    docs: Docs,
    dir: &Path,
    date: &str,
) -> Result<Vec<PathBuf>, DocsError> {
    if !is_date(date) {
        return Err(DocsError::Date(date.to_owned()));
    }
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let mut written = Vec::new();
    let man_dir = dir.join("man");
    create_dir(&man_dir)?;
    manual_pages(&command, &man_dir, date, &mut written)?;
    if docs == Docs::ManualAndCompletions {
        let name = command.get_name().to_owned();
        for (shell, folder) in SHELLS {
            let shell_dir = dir.join("completions").join(folder);
            create_dir(&shell_dir)?;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, &name, &mut script);
            written.push(write(
                &shell_dir.join(completion_file(shell, &name)),
                &script,
            )?);
        }
    }
    Ok(written)
}

/// The exit status of a binary that was asked for its documentation: success, or the error
/// printed on stderr and failure.
pub fn exit_code(done: Result<Vec<PathBuf>, DocsError>) -> ExitCode {
    match done {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{GENERATE_ENV}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The page of `command` and, depth first, of each subcommand it shows in its help.
fn manual_pages(
    command: &Command,
    dir: &Path,
    date: &str,
    written: &mut Vec<PathBuf>,
) -> Result<(), DocsError> {
    let man = clap_mangen::Man::new(command.clone())
        .manual(MANUAL)
        .date(date);
    let mut page = Vec::new();
    man.render(&mut page).map_err(|source| DocsError::Write {
        path: dir.join(man.get_filename()),
        source,
    })?;
    written.push(write(&dir.join(man.get_filename()), &page)?);
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        manual_pages(sub, dir, date, written)?;
    }
    Ok(())
}

/// Whether `date` reads `YYYY-MM-DD` (digits where digits go; the packager computes it).
fn is_date(date: &str) -> bool {
    let bytes = date.as_bytes();
    bytes.len() == 10
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// The file name `shell` finds the completions of `name` under.
fn completion_file(shell: Shell, name: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{name}"),
        Shell::Fish => format!("{name}.fish"),
        _ => name.to_owned(),
    }
}

fn create_dir(dir: &Path) -> Result<(), DocsError> {
    fs::create_dir_all(dir).map_err(|source| DocsError::Write {
        path: dir.to_owned(),
        source,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<PathBuf, DocsError> {
    fs::write(path, bytes).map_err(|source| DocsError::Write {
        path: path.to_owned(),
        source,
    })?;
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests;
