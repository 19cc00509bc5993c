//! The one error type of this crate: every refusal is a named variant with a stable reason,
//! decided before anything is promoted or flipped.

use std::path::PathBuf;

use atelier_fs::FsError;

use crate::id::ReleaseId;

/// Why a release operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// A store or link path given by configuration is relative, or has a `.`/`..` component.
    #[error("refused {path}: a store or link path must be absolute and normal")]
    PathNotNormal {
        /// The path as given.
        path: PathBuf,
    },
    /// The store is not strictly below the directory that holds the link, so the link could
    /// not carry a relative target into it.
    #[error("refused store {store}: it is not below {link}'s directory")]
    StoreNotUnderLinkDir {
        /// The store.
        store: PathBuf,
        /// The link.
        link: PathBuf,
    },
    /// The store's path runs through the served link itself.
    #[error("refused store {store}: it lies behind the served link {link}")]
    StoreBehindLink {
        /// The store.
        store: PathBuf,
        /// The link.
        link: PathBuf,
    },
    /// The served link is something other than a symbolic link (a directory, a file).
    #[error("refused {link}: the served link is not a symbolic link")]
    LinkNotSymlink {
        /// The link.
        link: PathBuf,
    },
    /// A release id that is not of the id's shape (this includes every path escape).
    #[error("refused release id {given:?}: not a release id")]
    InvalidReleaseId {
        /// The id as given (at most 64 characters of it).
        given: String,
    },
    /// A well-formed id with no release directory in the store.
    #[error("no release {id} in {store}")]
    UnknownRelease {
        /// The id.
        id: ReleaseId,
        /// The store.
        store: PathBuf,
    },
    /// Publish found no current preprod release (nothing was ever built, or only the
    /// provisioner's placeholder is served).
    #[error("nothing to publish: {store} serves no release")]
    NothingToPublish {
        /// The preprod store.
        store: PathBuf,
    },
    /// Publish was given one store as both preprod and prod: preprod's pruning would then
    /// delete what production serves.
    #[error("refused {store}: preprod and prod are the same store")]
    SameStore {
        /// The store.
        store: PathBuf,
    },
    /// The source of a promote holds a symbolic link; nothing was promoted.
    #[error("refused the source: {path} is a symbolic link")]
    SourceSymlink {
        /// The link, relative to the source.
        path: PathBuf,
    },
    /// The source of a promote holds a FIFO, socket or device; nothing was promoted.
    #[error("refused the source: {path} is a FIFO, socket or device")]
    SourceSpecialFile {
        /// The entry, relative to the source.
        path: PathBuf,
    },
    /// An untrusted source holds a file with more than one hard link; nothing was promoted.
    #[error("refused the source: {path} has more than one hard link")]
    SourceHardLink {
        /// The file, relative to the source.
        path: PathBuf,
    },
    /// A file of one of our own releases is not what promote makes: not owned by us, or not of
    /// the release file mode. Someone else wrote into the store; it is not served onwards.
    #[error("refused {path}: a release file not owned by this user or not of mode 0640")]
    ForeignReleaseFile {
        /// The file.
        path: PathBuf,
    },
    /// The source tree is deeper or larger than a promote walks.
    #[error("refused the source: {what}")]
    SourceTooLarge {
        /// What limit was passed.
        what: String,
    },
    /// A confined filesystem operation was refused or failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A system call failed for a reason that is not a refusal.
    #[error("failed to {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// What it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

// === impl ReleaseError ===

impl ReleaseError {
    /// A stable snake_case code for this variant (an [`FsError`] keeps its own reason).
    pub fn reason(&self) -> &'static str {
        match self {
            ReleaseError::PathNotNormal { .. } => "path_not_normal",
            ReleaseError::StoreNotUnderLinkDir { .. } => "store_not_under_link_dir",
            ReleaseError::StoreBehindLink { .. } => "store_behind_link",
            ReleaseError::LinkNotSymlink { .. } => "link_not_symlink",
            ReleaseError::InvalidReleaseId { .. } => "invalid_release_id",
            ReleaseError::UnknownRelease { .. } => "unknown_release",
            ReleaseError::NothingToPublish { .. } => "nothing_to_publish",
            ReleaseError::SameStore { .. } => "same_store",
            ReleaseError::SourceSymlink { .. } => "source_symlink",
            ReleaseError::SourceSpecialFile { .. } => "source_special_file",
            ReleaseError::SourceHardLink { .. } => "source_hard_link",
            ReleaseError::ForeignReleaseFile { .. } => "foreign_release_file",
            ReleaseError::SourceTooLarge { .. } => "source_too_large",
            ReleaseError::Fs(e) => e.reason(),
            ReleaseError::Io { .. } => "io_error",
        }
    }

    /// Returns true if and only if this is a refusal decided by policy, as opposed to an
    /// operating system failure.
    pub fn is_refusal(&self) -> bool {
        match self {
            ReleaseError::Fs(e) => e.is_refusal(),
            ReleaseError::Io { .. } => false,
            _ => true,
        }
    }
}

/// An [`ReleaseError::Io`] from an errno.
pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
    errno: rustix::io::Errno,
) -> ReleaseError {
    ReleaseError::Io {
        op,
        path: path.into(),
        source: errno.into(),
    }
}
