//! Confined filesystem access for directory trees that a less trusted identity can write.
//!
//! Every read and write Atelier makes in such a tree goes through this crate, so that a link
//! planted at any level, a hard link or a racing rename can never make us read or write outside
//! the tree's root, and so that a refusal changes nothing.
//!
//! Parts:
//! - [`RelPath`], [`confined_join`]: lexical validation (no absolute path, no `..`, no NUL).
//! - [`resolve_within`]: a real-path check, for diagnostics only.
//! - [`Root`]: all I/O, walked one name at a time from a directory descriptor with
//!   `O_NOFOLLOW`; atomic and in-place writes with the mode set on the descriptor.
//! - [`tree`]: whole-tree walks (list, exclusive mkdir, symlink, remove, usage, modes).
//! - [`FsError`]: named refusals, each with a stable [`FsError::reason`].
//! - [`watch`]: change watches on opened directories, for caches of what was read below them.
//!
//! Linux only.

mod error;
mod path;
mod root;
pub mod tree;
pub mod watch;

pub use error::FsError;
pub use path::{confined_join, resolve_within, RelPath};
pub use root::{
    set_mode, FileKind, Metadata, Outcome, Root, DEFAULT_READ_LIMIT_BYTES, TEMP_NAME_PREFIX,
};
