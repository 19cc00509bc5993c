//! The workspace git repository, driven by the real `git` through the site's git door: no
//! ambient configuration (the door fixes HOME and git's configuration), a fixed identity, hooks
//! and fsmonitor off.

use std::collections::BTreeMap;
use std::time::Duration;

use atelier_fs::Root;
use atelier_layout::workspace::{BUILDER_DIR, WORKSPACE_DIR_MODE, WORKSPACE_FILE_MODE};
use atelier_proto::Door;

use crate::runs::{base_env, RunRefusal, RunSpec, RunTarget, Runner};

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

/// `.git/info/exclude`, rewritten before every commit so a run cannot un-exclude `.builder/`,
/// nor what an atomic write killed half way left (named [`atelier_fs::TEMP_NAME_PREFIX`]).
const EXCLUDE: &str = "# Written by atelier-sited before every commit; edits are lost.\n\
    /.builder/\n.atelier-tmp.*\n";

/// A commit of everything but sited's own state: `$0` is the message, `$1` the state's
/// directory (`.builder`), the rest git's options.
const COMMIT_SCRIPT: &str = "set -e
state=$1; shift
git \"$@\" rm -r --cached --quiet --ignore-unmatch \"$state\"
git \"$@\" add -A
if git \"$@\" diff --cached --quiet; then exit 75; fi
exec git \"$@\" commit --quiet --no-verify -m \"$0\"";

/// The commit script's exit code when there was nothing to commit.
const NOTHING_TO_COMMIT: i32 = 75;

/// Output kept from a failed git command, for the log.
const MAX_STDERR: usize = 2048;

/// The most output of one git command sited keeps; porcelain status of a huge tree fits.
const MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// Why a git command failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The git door refused the run.
    #[error("running git: {0}")]
    Refused(#[from] RunRefusal),
    /// The run ended without an exit record, or went past its deadline.
    #[error("git {args} did not finish: {why}")]
    Lost {
        /// The subcommand.
        args: String,
        /// What happened.
        why: String,
    },
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
    runner: Runner,
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
    /// git through `runner`'s git door, each command ended after `timeout`.
    pub fn new(runner: Runner, timeout: Duration) -> Self {
        Self { runner, timeout }
    }

    /// The run seam git goes through.
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// The environment git runs with besides what the door fixes; nothing of the daemon's
    /// own is inherited.
    pub fn environment() -> BTreeMap<String, String> {
        let mut env = base_env(GIT_PATH);
        for (key, value) in [
            ("GIT_TERMINAL_PROMPT", "0"),
            ("GIT_AUTHOR_NAME", GIT_NAME),
            ("GIT_AUTHOR_EMAIL", GIT_EMAIL),
            ("GIT_COMMITTER_NAME", GIT_NAME),
            ("GIT_COMMITTER_EMAIL", GIT_EMAIL),
        ] {
            env.insert(key.to_owned(), value.to_owned());
        }
        env
    }

    /// The options every git command of `site` runs with. A repository's own config is
    /// agent-writable text: never run a hook or a monitor. The workspace belongs to the service
    /// user and git runs as the site's identity, so the one repository it works in is declared
    /// safe on the command line (only protected configuration can say so).
    fn options(site: &RunTarget) -> Vec<String> {
        vec![
            "-c".to_owned(),
            "core.hooksPath=/dev/null".to_owned(),
            "-c".to_owned(),
            "core.fsmonitor=false".to_owned(),
            "-c".to_owned(),
            format!("safe.directory={}", site.workspace.display()),
        ]
    }

    /// Runs `git <args>` in the workspace of `site` and returns its output whatever its exit
    /// status.
    pub async fn run(&self, site: &RunTarget, args: &[&str]) -> Result<GitOutput, GitError> {
        let mut argv = vec!["git".to_owned()];
        argv.extend(Self::options(site));
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        self.run_argv(site, argv, &args.join(" ")).await
    }

    /// One run of the git door with `argv`, its output collected; `what` names it in errors.
    async fn run_argv(
        &self,
        site: &RunTarget,
        argv: Vec<String>,
        what: &str,
    ) -> Result<GitOutput, GitError> {
        let spec = RunSpec {
            door: Door::Git,
            argv,
            env: Self::environment(),
            stdin: None,
        };
        let output = self
            .runner
            .collect(site, spec, MAX_OUTPUT, self.timeout)
            .await?;
        let stderr = tail(&output.stderr);
        match output.end {
            Ok(exit) => match exit.code {
                Some(code) => Ok(GitOutput {
                    code,
                    stdout: output.stdout,
                    stderr,
                }),
                None => Err(GitError::Failed {
                    args: what.to_owned(),
                    status: format!("killed by {}", exit.signal.unwrap_or_default()),
                    stderr,
                }),
            },
            Err(why) => Err(GitError::Lost {
                args: what.to_owned(),
                why,
            }),
        }
    }

    /// Runs `git <args>` and requires exit 0.
    async fn check(&self, site: &RunTarget, args: &[&str]) -> Result<GitOutput, GitError> {
        let out = self.run(site, args).await?;
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
    pub async fn init(&self, site: &RunTarget, workspace: &Root) -> Result<(), GitError> {
        self.check(site, &["init", "--quiet", "--initial-branch=main"])
            .await?;
        self.commit(site, workspace, SCAFFOLD_MESSAGE).await?;
        Ok(())
    }

    /// Commits every change but `.builder/`; returns false when there was nothing to commit.
    pub async fn commit(
        &self,
        site: &RunTarget,
        workspace: &Root,
        message: &str,
    ) -> Result<bool, GitError> {
        workspace.create_dir_all(".git/info", WORKSPACE_DIR_MODE)?;
        workspace.write_atomic(".git/info/exclude", EXCLUDE.as_bytes(), WORKSPACE_FILE_MODE)?;
        // One run of the git door for the whole commit: each run pays the door's sandbox
        // setup (about 100 ms under PID 1). The script is a constant; the message and git's
        // options arrive as its positional parameters, never as shell text.
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            COMMIT_SCRIPT.to_owned(),
            message.to_owned(),
            BUILDER_DIR.to_owned(),
        ];
        argv.extend(Self::options(site));
        let out = self.run_argv(site, argv, "commit").await?;
        match out.code {
            0 => Ok(true),
            NOTHING_TO_COMMIT => Ok(false),
            code => Err(GitError::Failed {
                args: "commit".to_owned(),
                status: format!("exit {code}"),
                stderr: out.stderr,
            }),
        }
    }

    /// The paths with uncommitted changes (including untracked files), from
    /// `git status --porcelain -z`.
    pub async fn changed_files(&self, site: &RunTarget) -> Result<Vec<String>, GitError> {
        let out = self
            .check(
                site,
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
    fn the_exclude_names_the_temporary_files_of_atomic_writes() {
        let pattern = format!("{}*", atelier_fs::TEMP_NAME_PREFIX);
        assert!(EXCLUDE.lines().any(|line| line == pattern), "{EXCLUDE}");
    }

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
