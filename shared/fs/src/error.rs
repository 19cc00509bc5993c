//! The one error type of this crate: every refusal is a named variant with a stable reason.

use std::path::PathBuf;

/// Why a confined filesystem operation was refused or failed.
///
/// Paths in the variants are relative to the [`Root`](crate::Root) (or, for
/// [`Root::open`](crate::Root::open) and [`resolve_within`](crate::resolve_within), the
/// trusted path the caller gave). A refusal is decided before anything is created,
/// truncated or renamed, so a refused operation changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The path is absolute where a path relative to the root is required (a lexical escape).
    #[error("refused {path}: absolute path where a path relative to the root is required")]
    AbsolutePath {
        /// The path as given.
        path: PathBuf,
    },
    /// The path has a `..` component (a lexical escape; refused even when it would stay inside).
    #[error("refused {path}: a `..` component could leave the root")]
    ParentComponent {
        /// The path as given.
        path: PathBuf,
    },
    /// The path names nothing below the root (empty, or only `.` components).
    #[error("refused an empty path: it must name at least one entry below the root")]
    EmptyPath,
    /// The path contains a NUL byte, which no file name can hold.
    #[error("refused {path}: the path contains a NUL byte")]
    NulByte {
        /// The path as given (lossy when displayed).
        path: PathBuf,
    },
    /// The real (canonical) path lies outside the canonical root: a link leads out.
    #[error("refused {path}: it resolves to {resolved}, outside the root")]
    EscapeViaLink {
        /// The relative path as given.
        path: PathBuf,
        /// Where it really resolves.
        resolved: PathBuf,
    },
    /// An entry on the way (or the entry itself) is a symbolic link; links are never followed,
    /// not even ones that point inside the root.
    #[error("refused {path}: it is a symbolic link, and links are never followed")]
    SymlinkRefused {
        /// The path up to and including the link.
        path: PathBuf,
    },
    /// The file has more than one hard link, so its content may also live outside the root.
    #[error("refused {path}: the file has {links} hard links and may also live outside the root")]
    HardLinkRefused {
        /// The file.
        path: PathBuf,
        /// Its link count when it was checked.
        links: u64,
    },
    /// The entry exists but is not a regular file (a directory, FIFO, socket or device).
    #[error("refused {path}: not a regular file")]
    NotRegularFile {
        /// The entry.
        path: PathBuf,
    },
    /// The file belongs to another user, so someone else planted or can change it.
    #[error("refused {path}: not owned by this process's user")]
    NotOwned {
        /// The file.
        path: PathBuf,
    },
    /// An entry that must be a directory is something else.
    #[error("refused {path}: not a directory")]
    NotDirectory {
        /// The path up to and including the entry.
        path: PathBuf,
    },
    /// An entry on the way, or the target itself, does not exist.
    #[error("{path}: not found")]
    NotFound {
        /// The path up to and including the missing entry.
        path: PathBuf,
    },
    /// The file is larger than the read limit.
    #[error("refused {path}: larger than the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// The requested permission mode has bits this crate does not set (file type bits,
    /// set-user-ID, or on files set-group-ID and sticky).
    #[error("refused {path}: mode {mode:#o} is not an allowed permission mode")]
    InvalidMode {
        /// The entry that would have been created.
        path: PathBuf,
        /// The mode as requested.
        mode: u32,
    },
    /// A system call failed for a reason that is not a refusal.
    #[error("failed to {op} {path}")]
    Io {
        /// What was being done, as a verb phrase (`"open directory"`, `"rename"`).
        op: &'static str,
        /// The entry it was done to.
        path: PathBuf,
        /// The operating system error.
        #[source]
        source: std::io::Error,
    },
}

// === impl FsError ===

impl FsError {
    /// A stable snake_case machine code for this variant, for logs, metrics and wire errors.
    pub fn reason(&self) -> &'static str {
        match self {
            FsError::AbsolutePath { .. } => "absolute_path",
            FsError::ParentComponent { .. } => "parent_component",
            FsError::EmptyPath => "empty_path",
            FsError::NulByte { .. } => "nul_byte",
            FsError::EscapeViaLink { .. } => "escape_via_link",
            FsError::SymlinkRefused { .. } => "symlink_refused",
            FsError::HardLinkRefused { .. } => "hard_link_refused",
            FsError::NotRegularFile { .. } => "not_regular_file",
            FsError::NotOwned { .. } => "not_owned",
            FsError::NotDirectory { .. } => "not_directory",
            FsError::NotFound { .. } => "not_found",
            FsError::TooLarge { .. } => "too_large",
            FsError::InvalidMode { .. } => "invalid_mode",
            FsError::Io { .. } => "io_error",
        }
    }

    /// Returns true if and only if the path tried to leave the root, lexically or through a
    /// link that was resolved ([`resolve_within`](crate::resolve_within)).
    pub fn is_escape(&self) -> bool {
        matches!(
            self,
            FsError::AbsolutePath { .. }
                | FsError::ParentComponent { .. }
                | FsError::EscapeViaLink { .. }
        )
    }

    /// Returns true if and only if this is a refusal decided by policy (as opposed to a missing
    /// entry or an operating system failure).
    pub fn is_refusal(&self) -> bool {
        !matches!(self, FsError::NotFound { .. } | FsError::Io { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_distinct_and_messages_name_the_path() {
        let p = || PathBuf::from("a/b");
        let all = vec![
            FsError::AbsolutePath { path: p() },
            FsError::ParentComponent { path: p() },
            FsError::NulByte { path: p() },
            FsError::EscapeViaLink {
                path: p(),
                resolved: PathBuf::from("/etc"),
            },
            FsError::SymlinkRefused { path: p() },
            FsError::HardLinkRefused {
                path: p(),
                links: 2,
            },
            FsError::NotRegularFile { path: p() },
            FsError::NotOwned { path: p() },
            FsError::NotDirectory { path: p() },
            FsError::NotFound { path: p() },
            FsError::TooLarge {
                path: p(),
                limit: 1,
            },
            FsError::InvalidMode {
                path: p(),
                mode: 0o4755,
            },
            FsError::Io {
                op: "open",
                path: p(),
                source: std::io::Error::other("boom"),
            },
        ];
        let mut reasons: Vec<_> = all.iter().map(FsError::reason).collect();
        for e in &all {
            assert!(e.to_string().contains("a/b"), "{e}");
        }
        reasons.push(FsError::EmptyPath.reason());
        let n = reasons.len();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), n);
    }
}
