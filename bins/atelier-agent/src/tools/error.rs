//! Why a tool call failed: every refusal is a named variant whose text the model reads as the
//! failed call's result, and whose [`ToolError::reason`] is a stable machine code.

use std::path::Path;

use atelier_fs::FsError;

/// A tool call that was refused or failed. `Display` is what the model reads; it names the
/// refusal first (`refused: symlink (…)`, `not found (…)`, `too large: …`) so the model can
/// tell a rule from a typo.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The model called a tool nobody offered.
    #[error("unknown tool: {name}")]
    UnknownTool {
        /// The name it called.
        name: String,
    },
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for {tool}: {detail}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong with them.
        detail: String,
    },
    /// An absolute path or a `..` component: the path could leave the workspace.
    #[error("refused: path escapes the workspace ({path})")]
    Escape {
        /// The path as given.
        path: String,
    },
    /// The path holds a NUL byte, which no file name can.
    #[error("refused: the path contains a NUL byte")]
    NulByte,
    /// The path names nothing (empty, or only `.`) where a file is needed.
    #[error("refused: empty path (name a file below the workspace)")]
    EmptyPath,
    /// A component of the path is `.git` or `.builder`, at any depth.
    #[error("refused: {name} is out of reach ({path})")]
    OutOfReach {
        /// The directory name that is out of reach.
        name: &'static str,
        /// The path as given.
        path: String,
    },
    /// A symbolic link on the way or at the end; links are never followed.
    #[error("refused: symlink ({path} is a symbolic link; links are never followed)")]
    Symlink {
        /// The path up to and including the link.
        path: String,
    },
    /// The file has more than one hard link, so its content may live outside the workspace.
    #[error("refused: hard link ({path} has {links} links)")]
    HardLink {
        /// The file.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// A directory, FIFO, socket or device where a regular file is needed.
    #[error("refused: not a regular file ({path})")]
    NotRegularFile {
        /// The entry.
        path: String,
    },
    /// Something other than a directory where one is needed.
    #[error("refused: not a directory ({path})")]
    NotDirectory {
        /// The entry.
        path: String,
    },
    /// Nothing by that name.
    #[error("not found ({path})")]
    NotFound {
        /// The path up to and including the missing entry.
        path: String,
    },
    /// A file or an argument over its size limit.
    #[error("too large: {what} is over the limit of {limit} bytes")]
    TooLarge {
        /// What is too large (`index.html`, `content`).
        what: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The file is not UTF-8 text, so it cannot be shown or edited as text.
    #[error("not text: {path} is not UTF-8")]
    NotText {
        /// The file.
        path: String,
    },
    /// `edit`'s `old_string` does not occur in the file.
    #[error("no match: old_string does not occur in {path}")]
    NoMatch {
        /// The file.
        path: String,
    },
    /// `edit`'s `old_string` occurs more than once and `replace_all` is not set.
    #[error(
        "ambiguous: old_string occurs {count} times in {path}; include more surrounding text to \
         make it unique, or set replace_all"
    )]
    Ambiguous {
        /// The file.
        path: String,
        /// How many times it occurs.
        count: usize,
    },
    /// A glob or regular expression that does not compile (or compiles too large).
    #[error("invalid pattern: {detail}")]
    InvalidPattern {
        /// The compiler's complaint.
        detail: String,
    },
    /// The operating system refused for a reason that is not a rule of ours.
    #[error("failed: {detail}")]
    Failed {
        /// What failed.
        detail: String,
    },
    /// A remote server's tool answered the call with an error: its own words.
    #[error("{tool} failed: {detail}")]
    Remote {
        /// The tool as the model called it.
        tool: String,
        /// What the server said.
        detail: String,
    },
    /// A remote server could not be asked, or did not answer in time or in shape.
    #[error("unavailable: the {server} server did not answer ({detail})")]
    Unavailable {
        /// The server's name.
        server: String,
        /// What went wrong.
        detail: String,
    },
}

// === impl ToolError ===

impl ToolError {
    /// A stable snake_case machine code for this variant.
    pub fn reason(&self) -> &'static str {
        match self {
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::InvalidArguments { .. } => "invalid_arguments",
            ToolError::Escape { .. } => "escape",
            ToolError::NulByte => "nul_byte",
            ToolError::EmptyPath => "empty_path",
            ToolError::OutOfReach { .. } => "out_of_reach",
            ToolError::Symlink { .. } => "symlink",
            ToolError::HardLink { .. } => "hard_link",
            ToolError::NotRegularFile { .. } => "not_regular_file",
            ToolError::NotDirectory { .. } => "not_directory",
            ToolError::NotFound { .. } => "not_found",
            ToolError::TooLarge { .. } => "too_large",
            ToolError::NotText { .. } => "not_text",
            ToolError::NoMatch { .. } => "no_match",
            ToolError::Ambiguous { .. } => "ambiguous",
            ToolError::InvalidPattern { .. } => "invalid_pattern",
            ToolError::Failed { .. } => "failed",
            ToolError::Remote { .. } => "remote_error",
            ToolError::Unavailable { .. } => "unavailable",
        }
    }

    /// Invalid arguments for `tool`.
    pub(crate) fn invalid(tool: &str, detail: impl Into<String>) -> ToolError {
        ToolError::InvalidArguments {
            tool: tool.to_owned(),
            detail: detail.into(),
        }
    }
}

fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl From<FsError> for ToolError {
    fn from(error: FsError) -> ToolError {
        match error {
            FsError::AbsolutePath { path }
            | FsError::ParentComponent { path }
            | FsError::EscapeViaLink { path, .. } => ToolError::Escape { path: shown(&path) },
            FsError::EmptyPath => ToolError::EmptyPath,
            FsError::NulByte { .. } => ToolError::NulByte,
            FsError::SymlinkRefused { path } => ToolError::Symlink { path: shown(&path) },
            FsError::HardLinkRefused { path, links } => ToolError::HardLink {
                path: shown(&path),
                links,
            },
            FsError::NotRegularFile { path } => ToolError::NotRegularFile { path: shown(&path) },
            FsError::NotDirectory { path } => ToolError::NotDirectory { path: shown(&path) },
            FsError::NotFound { path } => ToolError::NotFound { path: shown(&path) },
            FsError::TooLarge { path, limit } => ToolError::TooLarge {
                what: shown(&path),
                limit,
            },
            FsError::Io { op, path, source } => ToolError::Failed {
                detail: format!("{op} {}: {source}", shown(&path)),
            },
            other @ (FsError::NotOwned { .. } | FsError::InvalidMode { .. }) => ToolError::Failed {
                detail: other.to_string(),
            },
        }
    }
}
