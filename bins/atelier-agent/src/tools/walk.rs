//! A bounded walk over the regular files below a directory, for `glob` and `search`: every
//! directory is opened from its parent's descriptor without following a link, `.git` and
//! `.builder` are never entered, and the walk stops (saying so) after a fixed number of
//! entries, so a tree full of names cannot hold the turn.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use atelier_fs::{tree, FileKind, FsError, Root};

use super::args::out_of_reach;

/// The most entries one walk looks at.
pub(crate) const MAX_WALK_ENTRIES: usize = 20_000;

/// The deepest directory a walk enters, counted from where it starts.
const MAX_WALK_DEPTH: usize = 32;

/// Whether a visitor wants more files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on.
    More,
    /// Enough: stop the walk.
    Enough,
}

/// One walk's counters.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    entries: usize,
    /// Whether the walk stopped at its entry or depth bound before seeing everything.
    pub truncated: bool,
}

impl Walk {
    /// Visits every regular file below `dir`, in name order, depth first, with the directory
    /// that holds it, its name and its path relative to `dir`. A subdirectory that cannot be
    /// opened (it vanished, or became a link) is skipped; `dir` itself must be listable.
    pub(crate) fn files(
        &mut self,
        dir: &Root,
        visit: &mut dyn FnMut(&Root, &OsStr, &Path) -> Flow,
    ) -> Result<(), FsError> {
        self.descend(dir, Path::new(""), 0, visit).map(|_| ())
    }

    fn descend(
        &mut self,
        dir: &Root,
        prefix: &Path,
        depth: usize,
        visit: &mut dyn FnMut(&Root, &OsStr, &Path) -> Flow,
    ) -> Result<Flow, FsError> {
        for (name, kind) in tree::list_dir(dir, None)? {
            if out_of_reach(&name).is_some() {
                continue;
            }
            self.entries += 1;
            if self.entries > MAX_WALK_ENTRIES {
                self.truncated = true;
                return Ok(Flow::Enough);
            }
            let rel: PathBuf = prefix.join(&name);
            match kind {
                FileKind::File => {
                    if visit(dir, &name, &rel) == Flow::Enough {
                        return Ok(Flow::Enough);
                    }
                }
                FileKind::Dir if depth + 1 >= MAX_WALK_DEPTH => self.truncated = true,
                FileKind::Dir => {
                    let Ok(child) = dir.open_dir(&name) else {
                        continue;
                    };
                    let Ok(flow) = self.descend(&child, &rel, depth + 1, visit) else {
                        continue;
                    };
                    if flow == Flow::Enough {
                        return Ok(Flow::Enough);
                    }
                }
                FileKind::Symlink | FileKind::Other => {}
            }
        }
        Ok(Flow::More)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_files_in_order_skipping_links_and_unreachable_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
        std::fs::create_dir_all(ws.join("sub/.builder")).unwrap();
        std::fs::write(ws.join(".git/objects/x"), "x").unwrap();
        std::fs::write(ws.join("sub/.builder/mcp.json"), "{}").unwrap();
        std::fs::write(ws.join("z.txt"), "z").unwrap();
        std::fs::write(ws.join("a/b/c.txt"), "c").unwrap();
        std::fs::write(ws.join("a/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
        std::os::unix::fs::symlink("z.txt", ws.join("link.txt")).unwrap();
        let root = Root::open(ws).unwrap();
        let mut seen = Vec::new();
        let mut walk = Walk::default();
        walk.files(&root, &mut |_, _, rel| {
            seen.push(rel.to_string_lossy().into_owned());
            Flow::More
        })
        .unwrap();
        assert_eq!(seen, ["a/a.txt", "a/b/c.txt", "z.txt"]);
        assert!(!walk.truncated);

        let mut first = Vec::new();
        Walk::default()
            .files(&root, &mut |_, name, _| {
                first.push(name.to_owned());
                Flow::Enough
            })
            .unwrap();
        assert_eq!(first, ["a.txt"]);
    }
}
