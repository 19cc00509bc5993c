//! Every way a build ends without output: one enum whose [`BuildFailure::as_str`] is exactly
//! the `error` string the build record stores, with an exit code each.

use std::borrow::Cow;
use std::fmt;

use crate::BuildStep;

/// Why a build produced no promotable output.
///
/// The output-directory variants carry the manifest's `output` as given, because the contract's
/// strings name it (`build produced no dist/ directory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildFailure {
    /// The install step ran past `install_timeout_ms`; its process group was killed.
    InstallTimedOut,
    /// The install step exited non-zero, was killed by a signal, or could not be started.
    InstallFailed,
    /// The build step ran past `build_timeout_ms`; its process group was killed.
    BuildTimedOut,
    /// The build step exited non-zero, was killed by a signal, or could not be started.
    BuildFailed,
    /// Nothing exists at the output path (`lstat` found nothing).
    OutputMissing {
        /// The manifest's output.
        output: String,
    },
    /// The output path itself is a symbolic link.
    OutputIsSymlink {
        /// The manifest's output.
        output: String,
    },
    /// The output path is something other than a directory.
    OutputNotDirectory {
        /// The manifest's output.
        output: String,
    },
    /// The output path is absolute, has a `..` component, or its real path lies outside the
    /// workspace's real path.
    OutputOutsideWorkspace {
        /// The manifest's output.
        output: String,
    },
    /// The output's real path is inside the workspace, but a directory on the way to it is a
    /// symbolic link: the promote reads the tree without following links, so it is refused
    /// here, where the reason can be named.
    OutputThroughSymlink {
        /// The manifest's output.
        output: String,
    },
    /// A symbolic link somewhere inside the output: it would be served, or followed.
    OutputContainsSymlink {
        /// The manifest's output.
        output: String,
    },
    /// A FIFO, socket or device somewhere inside the output.
    OutputContainsSpecialFile {
        /// The manifest's output.
        output: String,
    },
    /// A regular file inside the output with more than one hard link: its bytes may also live
    /// outside the output, and the confined reader refuses it.
    OutputContainsHardLink {
        /// The manifest's output.
        output: String,
    },
    /// atelier-build was told to stop (SIGTERM, SIGINT or SIGHUP) and killed the running step.
    Interrupted,
    /// Anything else: a malformed plan, an unreadable tree, a broken output stream.
    BuildError,
}

// === impl BuildFailure ===

impl BuildFailure {
    /// The contract's `error` string for this failure, e.g. `install timed out` or
    /// `build output 'dist' is a symbolic link`; sited records it verbatim.
    pub fn as_str(&self) -> Cow<'static, str> {
        match self {
            BuildFailure::InstallTimedOut => Cow::Borrowed("install timed out"),
            BuildFailure::InstallFailed => Cow::Borrowed("install failed"),
            BuildFailure::BuildTimedOut => Cow::Borrowed("build timed out"),
            BuildFailure::BuildFailed => Cow::Borrowed("build failed"),
            BuildFailure::OutputMissing { output } => {
                Cow::Owned(format!("build produced no {output}/ directory"))
            }
            BuildFailure::OutputIsSymlink { output } => {
                Cow::Owned(format!("build output '{output}' is a symbolic link"))
            }
            BuildFailure::OutputNotDirectory { output } => {
                Cow::Owned(format!("build output '{output}' is not a directory"))
            }
            BuildFailure::OutputOutsideWorkspace { output } => Cow::Owned(format!(
                "build output '{output}' resolves outside the workspace"
            )),
            BuildFailure::OutputThroughSymlink { output } => Cow::Owned(format!(
                "build output '{output}' is reached through a symbolic link"
            )),
            BuildFailure::OutputContainsSymlink { output } => {
                Cow::Owned(format!("build output '{output}' contains a symbolic link"))
            }
            BuildFailure::OutputContainsSpecialFile { output } => {
                Cow::Owned(format!("build output '{output}' contains a special file"))
            }
            BuildFailure::OutputContainsHardLink { output } => {
                Cow::Owned(format!("build output '{output}' contains a hard link"))
            }
            BuildFailure::Interrupted => Cow::Borrowed("build interrupted"),
            BuildFailure::BuildError => Cow::Borrowed("build error"),
        }
    }

    /// A stable snake_case code for logs and metrics (the `error` string is for the record).
    pub fn code(&self) -> &'static str {
        match self {
            BuildFailure::InstallTimedOut => "install_timed_out",
            BuildFailure::InstallFailed => "install_failed",
            BuildFailure::BuildTimedOut => "build_timed_out",
            BuildFailure::BuildFailed => "build_failed",
            BuildFailure::OutputMissing { .. } => "output_missing",
            BuildFailure::OutputIsSymlink { .. } => "output_is_symlink",
            BuildFailure::OutputNotDirectory { .. } => "output_not_directory",
            BuildFailure::OutputOutsideWorkspace { .. } => "output_outside_workspace",
            BuildFailure::OutputThroughSymlink { .. } => "output_through_symlink",
            BuildFailure::OutputContainsSymlink { .. } => "output_contains_symlink",
            BuildFailure::OutputContainsSpecialFile { .. } => "output_contains_special_file",
            BuildFailure::OutputContainsHardLink { .. } => "output_contains_hard_link",
            BuildFailure::Interrupted => "interrupted",
            BuildFailure::BuildError => "build_error",
        }
    }

    /// atelier-build's exit status for this failure (0 is success, 64 a bad command line).
    pub fn exit_code(&self) -> u8 {
        match self {
            BuildFailure::InstallTimedOut => 20,
            BuildFailure::InstallFailed => 21,
            BuildFailure::BuildTimedOut => 22,
            BuildFailure::BuildFailed => 23,
            BuildFailure::Interrupted => 24,
            BuildFailure::OutputMissing { .. } => 30,
            BuildFailure::OutputIsSymlink { .. } => 31,
            BuildFailure::OutputNotDirectory { .. } => 32,
            BuildFailure::OutputOutsideWorkspace { .. } => 33,
            BuildFailure::OutputThroughSymlink { .. } => 34,
            BuildFailure::OutputContainsSymlink { .. } => 35,
            BuildFailure::OutputContainsSpecialFile { .. } => 36,
            BuildFailure::OutputContainsHardLink { .. } => 37,
            BuildFailure::BuildError => 70,
        }
    }

    /// The failure of `step` ending on its deadline.
    pub fn timed_out(step: BuildStep) -> BuildFailure {
        match step {
            BuildStep::Install => BuildFailure::InstallTimedOut,
            BuildStep::Build => BuildFailure::BuildTimedOut,
        }
    }

    /// The failure of `step` exiting unsuccessfully.
    pub fn failed(step: BuildStep) -> BuildFailure {
        match step {
            BuildStep::Install => BuildFailure::InstallFailed,
            BuildStep::Build => BuildFailure::BuildFailed,
        }
    }
}

impl fmt::Display for BuildFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(output: &str) -> Vec<BuildFailure> {
        let o = || output.to_owned();
        vec![
            BuildFailure::InstallTimedOut,
            BuildFailure::InstallFailed,
            BuildFailure::BuildTimedOut,
            BuildFailure::BuildFailed,
            BuildFailure::OutputMissing { output: o() },
            BuildFailure::OutputIsSymlink { output: o() },
            BuildFailure::OutputNotDirectory { output: o() },
            BuildFailure::OutputOutsideWorkspace { output: o() },
            BuildFailure::OutputThroughSymlink { output: o() },
            BuildFailure::OutputContainsSymlink { output: o() },
            BuildFailure::OutputContainsSpecialFile { output: o() },
            BuildFailure::OutputContainsHardLink { output: o() },
            BuildFailure::Interrupted,
            BuildFailure::BuildError,
        ]
    }

    #[test]
    fn the_contract_strings_are_exact() {
        let cases = [
            (BuildFailure::InstallTimedOut, "install timed out"),
            (BuildFailure::InstallFailed, "install failed"),
            (BuildFailure::BuildTimedOut, "build timed out"),
            (BuildFailure::BuildFailed, "build failed"),
            (
                BuildFailure::OutputMissing {
                    output: "dist".into(),
                },
                "build produced no dist/ directory",
            ),
            (
                BuildFailure::OutputIsSymlink {
                    output: "dist".into(),
                },
                "build output 'dist' is a symbolic link",
            ),
            (
                BuildFailure::OutputNotDirectory {
                    output: "dist".into(),
                },
                "build output 'dist' is not a directory",
            ),
            (
                BuildFailure::OutputOutsideWorkspace {
                    output: "dist".into(),
                },
                "build output 'dist' resolves outside the workspace",
            ),
            (BuildFailure::BuildError, "build error"),
        ];
        for (failure, want) in cases {
            assert_eq!(failure.as_str(), want);
            assert_eq!(failure.to_string(), want);
        }
    }

    #[test]
    fn codes_and_exit_statuses_are_distinct() {
        let failures = all("out");
        let mut codes: Vec<_> = failures.iter().map(BuildFailure::code).collect();
        let mut exits: Vec<_> = failures.iter().map(BuildFailure::exit_code).collect();
        let mut strings: Vec<_> = failures.iter().map(BuildFailure::as_str).collect();
        for list_len in [codes.len(), exits.len(), strings.len()] {
            assert_eq!(list_len, failures.len());
        }
        codes.sort_unstable();
        codes.dedup();
        exits.sort_unstable();
        exits.dedup();
        strings.sort_unstable();
        strings.dedup();
        assert_eq!(codes.len(), failures.len());
        assert_eq!(exits.len(), failures.len());
        assert_eq!(strings.len(), failures.len());
        assert!(!exits.contains(&0) && !exits.contains(&64));
    }
}
