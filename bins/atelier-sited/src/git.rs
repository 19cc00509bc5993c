//! The workspace git repository, driven by the real `git` under a constructed environment:
//! no ambient configuration, a fixed identity, hooks and fsmonitor off.
//!
//! This is the one place in sited that starts `git`. It runs git directly; the confinement
//! issue moves these commands behind the site's `git` door.

use atelier_layout::workspace::{BUILDER_DIR, WORKSPACE_DIR_MODE, WORKSPACE_FILE_MODE};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use atelier_fs::Root;

/// The service identity every commit carries.
pub const GIT_NAME: &str = "Dédalo Site Builder";
/// See [`GIT_NAME`].
pub const GIT_EMAIL: &str = "site-builder@dedalo.local";
/// The first commit's message.
pub const SCAFFOLD_MESSAGE: &str = "scaffold: initial template";
/// The commit message of an agent turn.
pub fn turn_message(session_id: &str, turn: u32) -> String {
    format!("agent: session {session_id} turn {turn}")
}

/// The commit message of the boot sweep's recovery commit.
pub fn recovery_message(session_id: &str) -> String {
    format!("agent: recovered after restart (session {session_id})")
}

/// The only `PATH` git runs with.
pub const GIT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `.git/info/exclude`, rewritten before every commit so a run cannot un-exclude `.builder/`.
const EXCLUDE: &str =
    "# Written by atelier-sited before every commit; edits are lost.\n/.builder/\n";

/// Output kept from a failed git command, for the log.
const MAX_STDERR: usize = 2048;

/// Why a git command failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be started.
    #[error("starting git: {0}")]
    Spawn(#[source] std::io::Error),
    /// git ran longer than the timeout and was killed.
    #[error("git {0} timed out")]
    Timeout(String),
    /// git exited unsuccessfully.
    #[error("git {args} failed ({status}): {stderr}")]
    Failed {
        /// The subcommand.
        args: String,
        /// Its exit status.
        status: String,
        /// The tail of its stderr.
        stderr: String,
    },
    /// Writing `.git/info/exclude` failed.
    #[error("writing the git exclusion: {0}")]
    Exclude(#[from] atelier_fs::FsError),
}

/// How sited runs git.
#[derive(Debug, Clone)]
pub struct Git {
    program: PathBuf,
    home: PathBuf,
    timeout: Duration,
}

/// One finished git command.
#[derive(Debug)]
pub struct GitOutput {
    /// Exit code (a command killed by a signal is a [`GitError::Failed`]).
    pub code: i32,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// The tail of standard error.
    pub stderr: String,
}

impl Git {
    /// git as `program` (looked up on [`GIT_PATH`] when bare), with `home` as its `HOME` (an
    /// empty directory of the daemon's) and a per-command timeout.
    pub fn new(program: impl Into<PathBuf>, home: impl Into<PathBuf>, timeout: Duration) -> Self {
        Self {
            program: program.into(),
            home: home.into(),
            timeout,
        }
    }

    /// The complete environment git runs with; nothing of the daemon's own is inherited.
    pub fn environment(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("PATH", GIT_PATH.into()),
            ("HOME", self.home.clone().into_os_string()),
            ("LANG", "C".into()),
            ("LC_ALL", "C".into()),
            ("GIT_CONFIG_NOSYSTEM", "1".into()),
            ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
            ("GIT_TERMINAL_PROMPT", "0".into()),
            ("GIT_AUTHOR_NAME", GIT_NAME.into()),
            ("GIT_AUTHOR_EMAIL", GIT_EMAIL.into()),
            ("GIT_COMMITTER_NAME", GIT_NAME.into()),
            ("GIT_COMMITTER_EMAIL", GIT_EMAIL.into()),
        ]
    }

    /// Runs `git <args>` in `workspace` and returns its output whatever its exit status.
    pub async fn run(&self, workspace: &Path, args: &[&str]) -> Result<GitOutput, GitError> {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .env_clear()
            .envs(self.environment())
            .current_dir(workspace)
            // A repository's own config is agent-writable text: never run a hook or a monitor.
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().map_err(GitError::Spawn)?;
        let output = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| GitError::Timeout(args.join(" ")))?
            .map_err(GitError::Spawn)?;
        match output.status.code() {
            Some(code) => Ok(GitOutput {
                code,
                stdout: output.stdout,
                stderr: tail(&output.stderr),
            }),
            None => Err(GitError::Failed {
                args: args.join(" "),
                status: output.status.to_string(),
                stderr: tail(&output.stderr),
            }),
        }
    }

    /// Runs `git <args>` and requires exit 0.
    async fn check(&self, workspace: &Path, args: &[&str]) -> Result<GitOutput, GitError> {
        let out = self.run(workspace, args).await?;
        if out.code == 0 {
            Ok(out)
        } else {
            Err(GitError::Failed {
                args: args.join(" "),
                status: format!("exit {}", out.code),
                stderr: out.stderr,
            })
        }
    }

    /// `git init` on branch `main`, then the first commit of everything but `.builder/`.
    pub async fn init(&self, workspace: &Root) -> Result<(), GitError> {
        let path = workspace.path().to_path_buf();
        self.check(&path, &["init", "--quiet", "--initial-branch=main"])
            .await?;
        self.commit(workspace, SCAFFOLD_MESSAGE).await?;
        Ok(())
    }

    /// Commits every change but `.builder/`; returns false when there was nothing to commit.
    pub async fn commit(&self, workspace: &Root, message: &str) -> Result<bool, GitError> {
        let path = workspace.path().to_path_buf();
        workspace.create_dir_all(".git/info", WORKSPACE_DIR_MODE)?;
        workspace.write_atomic(".git/info/exclude", EXCLUDE.as_bytes(), WORKSPACE_FILE_MODE)?;
        self.check(
            &path,
            &[
                "rm",
                "-r",
                "--cached",
                "--quiet",
                "--ignore-unmatch",
                BUILDER_DIR,
            ],
        )
        .await?;
        self.check(&path, &["add", "-A"]).await?;
        let diff = self.run(&path, &["diff", "--cached", "--quiet"]).await?;
        if diff.code == 0 {
            return Ok(false);
        }
        self.check(&path, &["commit", "--quiet", "--no-verify", "-m", message])
            .await?;
        Ok(true)
    }

    /// The paths with uncommitted changes (including untracked files), from
    /// `git status --porcelain -z`.
    pub async fn changed_files(&self, workspace: &Root) -> Result<Vec<String>, GitError> {
        let out = self
            .check(
                workspace.path(),
                &["status", "--porcelain", "-z", "--untracked-files=all"],
            )
            .await?;
        Ok(parse_porcelain_z(&out.stdout))
    }
}

/// Paths of `git status --porcelain -z`: records `XY path\0`, where a rename or copy (`R`/`C`
/// in either column) is followed by its source path as one more `\0`-terminated field. Paths
/// are verbatim (no quoting under `-z`); the new path of a rename is the one returned.
pub fn parse_porcelain_z(output: &[u8]) -> Vec<String> {
    let mut paths = Vec::new();
    let mut fields = output.split(|&b| b == 0);
    while let Some(record) = fields.next() {
        if record.len() < 4 || record[2] != b' ' {
            continue;
        }
        let (x, y) = (record[0], record[1]);
        paths.push(String::from_utf8_lossy(&record[3..]).into_owned());
        if matches!(x, b'R' | b'C') || matches!(y, b'R' | b'C') {
            fields.next();
        }
    }
    paths
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(MAX_STDERR);
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_z_table() {
        let cases: Vec<(&str, &[u8], Vec<&str>)> = vec![
            ("empty", b"", vec![]),
            (
                "worktree-modified keeps its leading space",
                b" M src/a.js\0",
                vec!["src/a.js"],
            ),
            ("staged", b"M  b.txt\0", vec!["b.txt"]),
            ("untracked", b"?? new file.txt\0", vec!["new file.txt"]),
            ("deleted", b" D gone\0", vec!["gone"]),
            (
                "rename takes the new path and skips the old",
                b"R  new.js\0old.js\0 M x\0",
                vec!["new.js", "x"],
            ),
            ("copy", b"C  copy.js\0orig.js\0", vec!["copy.js"]),
            ("newline in a name", b"?? a\nb\0", vec!["a\nb"]),
            (
                "quote-worthy name verbatim",
                b"?? \"q\".txt\0",
                vec!["\"q\".txt"],
            ),
            ("several", b"A  a\0AM b\0?? c\0", vec!["a", "b", "c"]),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse_porcelain_z(input), want, "case {name}");
        }
    }

    #[test]
    fn commit_messages_are_the_originals() {
        assert_eq!(turn_message("s1", 2), "agent: session s1 turn 2");
        assert_eq!(
            recovery_message("s1"),
            "agent: recovered after restart (session s1)"
        );
    }
}
