//! Lexical confinement: relative paths validated into plain names, joins that cannot leave a
//! root, and a real-path check for diagnostics.
//!
//! Nothing here makes I/O safe on its own: a lexically clean path can still cross a symlink.
//! Actual reads and writes go through [`Root`](crate::Root), which walks a [`RelPath`] one
//! name at a time from a directory descriptor.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::FsError;

/// A relative path made only of plain names: not empty, not absolute, no `..`, no NUL byte.
/// `.` components are dropped.
///
/// Every operation of [`Root`](crate::Root) validates its path into one; build one up front to
/// report a bad path early.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath {
    // Invariant: built only from `Component::Normal` names, at least one.
    path: PathBuf,
}

// === impl RelPath ===

impl RelPath {
    /// Validates `path` into plain names.
    ///
    /// Refuses an empty path (also `.` alone), an absolute path, any `..` component (even one
    /// that would stay inside, like `a/../b`) and a NUL byte.
    pub fn new(path: impl AsRef<Path>) -> Result<RelPath, FsError> {
        let given = path.as_ref();
        if given.as_os_str().as_bytes().contains(&0) {
            return Err(FsError::NulByte {
                path: given.to_path_buf(),
            });
        }
        let mut clean = PathBuf::new();
        for component in given.components() {
            match component {
                Component::Normal(name) => clean.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(FsError::ParentComponent {
                        path: given.to_path_buf(),
                    })
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(FsError::AbsolutePath {
                        path: given.to_path_buf(),
                    })
                }
            }
        }
        if clean.as_os_str().is_empty() {
            return Err(FsError::EmptyPath);
        }
        Ok(RelPath { path: clean })
    }

    /// The normalised path (no `.` components, no trailing slash).
    pub fn as_path(&self) -> &Path {
        &self.path
    }

    /// The names from the root downwards.
    pub fn names(&self) -> impl Iterator<Item = &OsStr> + '_ {
        self.path.components().filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
    }

    /// The last name.
    pub fn file_name(&self) -> &OsStr {
        // The invariant guarantees a last normal component; the fallback is unreachable.
        self.path.file_name().unwrap_or(self.path.as_os_str())
    }

    /// The path without its last name, or `None` for a single name.
    pub fn parent(&self) -> Option<RelPath> {
        let parent = self.path.parent()?;
        if parent.as_os_str().is_empty() {
            return None;
        }
        Some(RelPath {
            path: parent.to_path_buf(),
        })
    }

    /// This path followed by `more`, which is validated the same way.
    pub fn join(&self, more: impl AsRef<Path>) -> Result<RelPath, FsError> {
        let more = RelPath::new(more)?;
        Ok(RelPath {
            path: self.path.join(more.path),
        })
    }
}

impl AsRef<Path> for RelPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.path.display().fmt(f)
    }
}

/// Joins `rel` below `root` lexically, after validating it into a [`RelPath`].
///
/// The result is for naming and display; opening it as a string would follow symlinks, so do
/// I/O through [`Root`](crate::Root) instead.
pub fn confined_join(root: &Path, rel: impl AsRef<Path>) -> Result<PathBuf, FsError> {
    let rel = RelPath::new(rel)?;
    Ok(root.join(rel.as_path()))
}

/// Resolves `root/rel` to its real path and refuses a result outside the real root.
///
/// For diagnostics and reports only: the answer can be stale as soon as it is returned, so
/// never open what it returns. The longest existing prefix is canonicalised and the missing
/// rest (plain names) appended, so a path that does not exist yet can be checked too; a
/// dangling link on the way is reported as the `NotFound` of that prefix.
pub fn resolve_within(root: &Path, rel: impl AsRef<Path>) -> Result<PathBuf, FsError> {
    let rel = RelPath::new(rel)?;
    let real_root = root.canonicalize().map_err(|source| FsError::Io {
        op: "canonicalize root",
        path: root.to_path_buf(),
        source,
    })?;
    let names: Vec<&OsStr> = rel.names().collect();
    let mut resolved = None;
    for existing in (1..=names.len()).rev() {
        let prefix: PathBuf = names[..existing].iter().collect();
        let candidate = real_root.join(&prefix);
        match candidate.canonicalize() {
            Ok(real) => {
                let rest: PathBuf = names[existing..].iter().collect();
                resolved = Some(real.join(rest));
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A dangling link exists but cannot be resolved; anything else is missing.
                if candidate.symlink_metadata().is_ok() {
                    return Err(FsError::NotFound { path: prefix });
                }
            }
            Err(source) => {
                return Err(FsError::Io {
                    op: "canonicalize",
                    path: prefix,
                    source,
                })
            }
        }
    }
    let resolved = resolved.unwrap_or_else(|| real_root.join(rel.as_path()));
    if resolved.starts_with(&real_root) {
        Ok(resolved)
    } else {
        Err(FsError::EscapeViaLink {
            path: rel.as_path().to_path_buf(),
            resolved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn confined_join_table() {
        let root = Path::new("/srv/site");
        // (name, input, expected Ok path or Err reason)
        let cases: Vec<(&str, OsString, Result<&str, &str>)> = vec![
            ("plain", "a/b/c".into(), Ok("/srv/site/a/b/c")),
            ("single name", "f".into(), Ok("/srv/site/f")),
            ("leading dot", "./a".into(), Ok("/srv/site/a")),
            ("inner dots", "a/./b/./c".into(), Ok("/srv/site/a/b/c")),
            ("trailing slash", "a/b/".into(), Ok("/srv/site/a/b")),
            ("doubled slashes", "a//b".into(), Ok("/srv/site/a/b")),
            (
                "hidden name",
                ".git/config".into(),
                Ok("/srv/site/.git/config"),
            ),
            (
                "dots in a name",
                "a..b/...".into(),
                Ok("/srv/site/a..b/..."),
            ),
            ("empty", "".into(), Err("empty_path")),
            ("only dot", ".".into(), Err("empty_path")),
            ("only dots", "./././".into(), Err("empty_path")),
            ("absolute", "/etc/passwd".into(), Err("absolute_path")),
            ("absolute root", "/".into(), Err("absolute_path")),
            (
                "double slash absolute",
                "//etc".into(),
                Err("absolute_path"),
            ),
            (
                "parent first",
                "../outside/f".into(),
                Err("parent_component"),
            ),
            (
                "parent escaping",
                "a/../../outside/f".into(),
                Err("parent_component"),
            ),
            (
                "parent staying inside",
                "a/../b".into(),
                Err("parent_component"),
            ),
            ("parent last", "a/..".into(), Err("parent_component")),
            ("parent alone", "..".into(), Err("parent_component")),
            (
                "nul byte",
                OsString::from_vec(b"a/b\0c".to_vec()),
                Err("nul_byte"),
            ),
            (
                "nul byte alone",
                OsString::from_vec(vec![0]),
                Err("nul_byte"),
            ),
        ];
        for (name, input, expected) in cases {
            let got = confined_join(root, &input);
            match (expected, got) {
                (Ok(want), Ok(got)) => assert_eq!(got, Path::new(want), "case {name}"),
                (Err(want), Err(got)) => assert_eq!(got.reason(), want, "case {name}: {got}"),
                (want, got) => panic!("case {name}: expected {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn rel_path_parts() {
        let rel = RelPath::new("./a/b/c.txt").unwrap();
        assert_eq!(rel.as_path(), Path::new("a/b/c.txt"));
        assert_eq!(rel.to_string(), "a/b/c.txt");
        assert_eq!(rel.names().collect::<Vec<_>>(), ["a", "b", "c.txt"]);
        assert_eq!(rel.file_name(), "c.txt");
        assert_eq!(rel.parent().unwrap().as_path(), Path::new("a/b"));
        assert_eq!(RelPath::new("f").unwrap().parent(), None);
        assert_eq!(
            rel.join("d/e").unwrap().as_path(),
            Path::new("a/b/c.txt/d/e")
        );
        assert_eq!(rel.join("../x").unwrap_err().reason(), "parent_component");
        assert_eq!(rel.join("/x").unwrap_err().reason(), "absolute_path");
    }

    #[test]
    fn resolve_within_follows_links_and_refuses_escapes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        std::os::unix::fs::symlink("b", root.join("a/in")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", root.join("dangling")).unwrap();
        let real_root = root.canonicalize().unwrap();

        assert_eq!(resolve_within(&root, "a/b").unwrap(), real_root.join("a/b"));
        // An inside link resolves (this is diagnostics; I/O would still refuse it).
        assert_eq!(
            resolve_within(&root, "a/in/new").unwrap(),
            real_root.join("a/b/new")
        );
        // Missing tail is appended lexically.
        assert_eq!(
            resolve_within(&root, "a/missing/f").unwrap(),
            real_root.join("a/missing/f")
        );
        let err = resolve_within(&root, "out/f").unwrap_err();
        assert_eq!(err.reason(), "escape_via_link", "{err}");
        assert!(err.is_escape());
        let err = resolve_within(&root, "dangling").unwrap_err();
        assert_eq!(err.reason(), "not_found", "{err}");
        let err = resolve_within(&root, "../outside").unwrap_err();
        assert_eq!(err.reason(), "parent_component", "{err}");
    }
}
