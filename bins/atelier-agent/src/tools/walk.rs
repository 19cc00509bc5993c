//! A bounded walk over the regular files below a directory, for `glob` and `grep`: every
//! directory is opened from its parent's descriptor without following a link, `.git` and
//! `.builder` are never entered, what the workspace's ignore file names is passed by (the
//! directories it names are listed for the answer), and the walk stops (saying so) after a
//! fixed number of entries, so a tree full of names cannot hold the turn.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use atelier_fs::{tree, FileKind, FsError, Root};

use super::args::out_of_reach;
use super::ignore::IgnoreRules;

/// The most entries one walk looks at.
pub(crate) const MAX_WALK_ENTRIES: usize = 20_000;

/// The deepest directory a walk enters, counted from where it starts.
const MAX_WALK_DEPTH: usize = 32;

/// The most ignored directories a walk names.
pub(crate) const MAX_IGNORED_SHOWN: usize = 20;

/// Whether a visitor wants more files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on.
    More,
    /// Enough: stop the walk.
    Enough,
}

/// One walk: its rules and counters.
#[derive(Debug)]
pub(crate) struct Walk<'r> {
    rules: &'r IgnoreRules,
    /// Where the walk starts, relative to the workspace's root (what the rules are matched
    /// against).
    base: PathBuf,
    entries: usize,
    /// Whether the walk stopped at its entry or depth bound before seeing everything.
    pub truncated: bool,
    /// The directories passed by as ignored, relative to the workspace's root, each with a
    /// trailing `/`: at most [`MAX_IGNORED_SHOWN`].
    pub ignored: Vec<String>,
}

impl<'r> Walk<'r> {
    /// A walk that starts at `base` (relative to the workspace's root) and passes by what
    /// `rules` ignore.
    pub(crate) fn new(rules: &'r IgnoreRules, base: &Path) -> Walk<'r> {
        Walk {
            rules,
            base: base.to_path_buf(),
            entries: 0,
            truncated: false,
            ignored: Vec::new(),
        }
    }

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
            let is_dir = kind == FileKind::Dir;
            let from_root = self.base.join(&rel);
            if matches!(kind, FileKind::File | FileKind::Dir)
                && self.rules.ignores(&from_root, is_dir)
            {
                if is_dir && self.ignored.len() < MAX_IGNORED_SHOWN {
                    self.ignored
                        .push(format!("{}/", from_root.to_string_lossy()));
                }
                continue;
            }
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
        let none = IgnoreRules::default();
        let mut walk = Walk::new(&none, Path::new(""));
        walk.files(&root, &mut |_, _, rel| {
            seen.push(rel.to_string_lossy().into_owned());
            Flow::More
        })
        .unwrap();
        assert_eq!(seen, ["a/a.txt", "a/b/c.txt", "z.txt"]);
        assert!(!walk.truncated);

        let mut first = Vec::new();
        Walk::new(&none, Path::new(""))
            .files(&root, &mut |_, name, _| {
                first.push(name.to_owned());
                Flow::Enough
            })
            .unwrap();
        assert_eq!(first, ["a.txt"]);
    }

    #[test]
    fn what_the_rules_ignore_is_passed_by_and_its_directories_named() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        for dir in ["node_modules/pkg", "dist", "src/node_modules", "src/pages"] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
        }
        for file in [
            "node_modules/pkg/index.js",
            "dist/index.html",
            "src/node_modules/x.js",
            "src/pages/a.html",
            "src/debug.log",
            "index.html",
        ] {
            std::fs::write(ws.join(file), "x").unwrap();
        }
        let rules = IgnoreRules::parse(
            "/dist/
node_modules/
*.log
",
        );
        let root = Root::open(ws).unwrap();
        let walked = |start: &str| {
            let dir = if start.is_empty() {
                Root::open(ws).unwrap()
            } else {
                root.open_dir(start).unwrap()
            };
            let mut seen = Vec::new();
            let mut walk = Walk::new(&rules, Path::new(start));
            walk.files(&dir, &mut |_, _, rel| {
                seen.push(rel.to_string_lossy().into_owned());
                Flow::More
            })
            .unwrap();
            (seen, walk.ignored)
        };
        assert_eq!(
            walked(""),
            (
                vec!["index.html".to_owned(), "src/pages/a.html".to_owned()],
                vec![
                    "dist/".to_owned(),
                    "node_modules/".to_owned(),
                    "src/node_modules/".to_owned()
                ]
            )
        );
        // A walk that starts inside an ignored directory sees what is in it.
        assert_eq!(
            walked("dist"),
            (vec!["index.html".to_owned()], Vec::<String>::new())
        );
        assert_eq!(
            walked("src"),
            (
                vec!["pages/a.html".to_owned()],
                vec!["src/node_modules/".to_owned()]
            )
        );
    }
}
