//! Whole-tree operations on a [`Root`]: listing, exclusive mkdir, a relative symlink, removal,
//! copying sources and usage — each walked from held directory descriptors without ever
//! following a link.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::{set_mode, FileKind, FsError, RelPath, Root};
use rustix::fs::{AtFlags, FileType, Mode};
use rustix::io::Errno;

/// Entries a walk visits at most, so a tree a run filled with millions of names cannot pin
/// the daemon.
const MAX_WALK_ENTRIES: usize = 200_000;

/// Entries a usage measure visits at most: more than a walk that copies or removes, as a
/// site's release stores hold several builds' trees side by side, and a measure only stats.
const MAX_MEASURED_ENTRIES: usize = 2_000_000;

fn io(op: &'static str, path: &Path, errno: Errno) -> FsError {
    FsError::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

fn kind_of(file_type: FileType) -> FileKind {
    match file_type {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

/// The names in the directory `dir` (or the root itself for `None`), with their kinds as seen
/// without following them, sorted by name.
pub fn list_dir(root: &Root, dir: Option<&Path>) -> Result<Vec<(OsString, FileKind)>, FsError> {
    let opened;
    let dir_root = match dir {
        Some(rel) => {
            opened = root.open_dir(rel)?;
            &opened
        }
        None => root,
    };
    let shown = dir_root.path().to_path_buf();
    let mut reader = rustix::fs::Dir::read_from(dir_root).map_err(|e| io("read", &shown, e))?;
    let mut names = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(|e| io("read", &shown, e))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() >= MAX_WALK_ENTRIES {
            return Err(io("list", &shown, Errno::NOMEM));
        }
        let name = OsStr::from_bytes(name).to_os_string();
        // d_type may be DT_UNKNOWN on some file systems; ask without following.
        let stat = rustix::fs::statat(dir_root, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io("stat", &shown.join(&name), e))?;
        names.push((name, kind_of(FileType::from_raw_mode(stat.st_mode))));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(names)
}

/// Creates the single directory `name` directly below `root`, failing with `Ok(false)` if
/// anything already has that name; its mode is set on its descriptor (the umask is moot).
pub fn create_dir_exclusive(root: &Root, name: &str, mode: u32) -> Result<bool, FsError> {
    let rel = RelPath::new(name)?;
    let shown = root.path().join(rel.as_path());
    match rustix::fs::mkdirat(root, rel.as_path(), Mode::from_raw_mode(mode & 0o777)) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Ok(false),
        Err(e) => return Err(io("create directory", &shown, e)),
    }
    let dir = root.open_dir(rel.as_path())?;
    set_mode(&dir, mode).map_err(|e| io("chmod", &shown, e))?;
    Ok(true)
}

/// Creates the symlink `rel` (its parent must exist) pointing at `target`, which is stored as
/// given; a link never replaces an existing entry.
pub fn symlink(root: &Root, rel: &str, target: &str) -> Result<(), FsError> {
    let rel = RelPath::new(rel)?;
    let parent;
    let dir = match rel.parent() {
        Some(p) => {
            parent = root.open_dir(p.as_path())?;
            &parent
        }
        None => root,
    };
    rustix::fs::symlinkat(target, dir, rel.file_name())
        .map_err(|e| io("create symlink", &root.path().join(rel.as_path()), e))
}

/// Removes `rel` below `root`: a directory with everything in it, or any other entry (a link
/// is removed itself, never followed). Returns false if nothing was there.
pub fn remove_tree(root: &Root, rel: impl AsRef<Path>) -> Result<bool, FsError> {
    let rel = RelPath::new(rel)?;
    let parent;
    let dir = match rel.parent() {
        Some(p) => match root.open_dir(p.as_path()) {
            Ok(d) => {
                parent = d;
                &parent
            }
            Err(FsError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        },
        None => root,
    };
    let name = rel.file_name();
    let shown = root.path().join(rel.as_path());
    let meta = match dir.metadata(name) {
        Ok(meta) => meta,
        Err(FsError::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    if meta.kind == FileKind::Dir {
        empty_dir(&dir.open_dir(name)?, 0)?;
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
            .map_err(|e| io("remove directory", &shown, e))?;
    } else {
        rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| io("remove", &shown, e))?;
    }
    Ok(true)
}

fn empty_dir(dir: &Root, depth: usize) -> Result<(), FsError> {
    if depth > 256 {
        return Err(io("remove", dir.path(), Errno::LOOP));
    }
    for (name, kind) in list_dir(dir, None)? {
        if kind == FileKind::Dir {
            let child = dir.open_dir(&name)?;
            empty_dir(&child, depth + 1)?;
            rustix::fs::unlinkat(dir, name.as_os_str(), AtFlags::REMOVEDIR)
                .map_err(|e| io("remove directory", &dir.path().join(&name), e))?;
        } else {
            rustix::fs::unlinkat(dir, name.as_os_str(), AtFlags::empty())
                .map_err(|e| io("remove", &dir.path().join(&name), e))?;
        }
    }
    Ok(())
}

/// Bytes of the regular files under `rel` (or the root for `None`); links are not followed
/// (a link, or a file, where the folder should be counts 0) and a missing folder counts 0. The tree may change while it is measured (a run that
/// installs packages, a build): an entry that is gone or became something else by the time
/// it is looked at counts as what it is then, or 0, never as a failure.
pub fn usage_bytes(root: &Root, rel: Option<&Path>) -> Result<u64, FsError> {
    let opened;
    let dir = match rel {
        Some(rel) => match root.open_dir(rel) {
            Ok(d) => {
                opened = d;
                &opened
            }
            // A link is not followed, whether it is the folder itself or on the way to it.
            Err(e) if replaced(&e) => return Ok(0),
            Err(e) => return Err(e),
        },
        None => root,
    };
    let mut total = 0u64;
    let mut seen = 0usize;
    usage_walk(dir, 0, &mut total, &mut seen)?;
    Ok(total)
}

fn usage_walk(dir: &Root, depth: usize, total: &mut u64, seen: &mut usize) -> Result<(), FsError> {
    if depth > 256 {
        return Err(io("measure", dir.path(), Errno::LOOP));
    }
    let shown = dir.path().to_path_buf();
    let mut reader = match rustix::fs::Dir::read_from(dir) {
        Ok(reader) => reader,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(io("read", &shown, e)),
    };
    while let Some(entry) = reader.read() {
        let entry = match entry {
            Ok(entry) => entry,
            // The folder was removed while it was read.
            Err(Errno::NOENT) => break,
            Err(e) => return Err(io("read", &shown, e)),
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        *seen += 1;
        if *seen > MAX_MEASURED_ENTRIES {
            return Err(io("measure", &shown, Errno::NOMEM));
        }
        let name = OsStr::from_bytes(name);
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io("stat", &shown.join(name), e)),
        };
        match kind_of(FileType::from_raw_mode(stat.st_mode)) {
            FileKind::Dir => match dir.open_dir(Path::new(name)) {
                Ok(child) => usage_walk(&child, depth + 1, total, seen)?,
                Err(error) if replaced(&error) => {}
                Err(error) => return Err(error),
            },
            FileKind::File => *total += u64::try_from(stat.st_size).unwrap_or(0),
            FileKind::Symlink | FileKind::Other => {}
        }
    }
    Ok(())
}

/// Whether opening a folder failed because it is not there, or is not a folder (a link, a
/// file), maybe swapped since it was listed: it counts 0.
fn replaced(error: &FsError) -> bool {
    matches!(
        error,
        FsError::NotFound { .. } | FsError::SymlinkRefused { .. } | FsError::NotDirectory { .. }
    )
}

/// Sets `dir_mode` on every directory and `file_mode` on every regular file below `root` (the
/// root itself included) that this process owns, through descriptors opened without following
/// links; the names in `skip` (at the top level) are left as they are. Links and special files
/// are never touched, and neither is what another identity made: only its owner could change
/// its mode, and its unit's `UMask=` already gave it the shared one.
pub fn apply_modes(
    root: &Root,
    dir_mode: u32,
    file_mode: u32,
    skip: &[&str],
) -> Result<(), FsError> {
    set_mode(root, dir_mode).map_err(|e| io("chmod", root.path(), e))?;
    modes_walk(root, dir_mode, file_mode, skip, 0)
}

fn modes_walk(
    dir: &Root,
    dir_mode: u32,
    file_mode: u32,
    skip: &[&str],
    depth: usize,
) -> Result<(), FsError> {
    if depth > 64 {
        return Err(io("chmod", dir.path(), Errno::LOOP));
    }
    for (name, kind) in list_dir(dir, None)? {
        if depth == 0 && skip.iter().any(|s| OsStr::new(s) == name) {
            continue;
        }
        let shown = dir.path().join(&name);
        match kind {
            FileKind::Dir => {
                let child = dir.open_dir(&name)?;
                if owned(&child, &shown)? {
                    set_mode(&child, dir_mode).map_err(|e| io("chmod", &shown, e))?;
                }
                modes_walk(&child, dir_mode, file_mode, &[], depth + 1)?;
            }
            FileKind::File => {
                let file = dir.open_read(&name)?;
                if owned(&file, &shown)? {
                    set_mode(&file, file_mode).map_err(|e| io("chmod", &shown, e))?;
                }
            }
            FileKind::Symlink | FileKind::Other => {}
        }
    }
    Ok(())
}

/// Whether this process owns the open file or directory `fd`.
fn owned(fd: impl std::os::fd::AsFd, shown: &Path) -> Result<bool, FsError> {
    let stat = rustix::fs::fstat(fd).map_err(|e| io("stat", shown, e))?;
    Ok(stat.st_uid == rustix::process::geteuid().as_raw())
}

/// One regular file of a tree, as [`files_under`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// Its path relative to the walked directory.
    pub rel: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// Every directory and regular file below `root` (relative paths, parents before children),
/// skipping entries whose first-level or any-level name is in `skip`. Links and special files
/// are left out.
pub fn files_under(root: &Root, skip: &[&str]) -> Result<(Vec<PathBuf>, Vec<TreeFile>), FsError> {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    walk_files(root, Path::new(""), skip, 0, &mut dirs, &mut files)?;
    Ok((dirs, files))
}

fn walk_files(
    dir: &Root,
    prefix: &Path,
    skip: &[&str],
    depth: usize,
    dirs: &mut Vec<PathBuf>,
    files: &mut Vec<TreeFile>,
) -> Result<(), FsError> {
    if depth > 64 || dirs.len() + files.len() > MAX_WALK_ENTRIES {
        return Err(io("walk", dir.path(), Errno::LOOP));
    }
    for (name, kind) in list_dir(dir, None)? {
        if skip.iter().any(|s| OsStr::new(s) == name) {
            continue;
        }
        let rel = prefix.join(&name);
        match kind {
            FileKind::Dir => {
                dirs.push(rel.clone());
                walk_files(&dir.open_dir(&name)?, &rel, skip, depth + 1, dirs, files)?;
            }
            FileKind::File => {
                let size = dir.metadata(&name)?.len;
                files.push(TreeFile { rel, size });
            }
            FileKind::Symlink | FileKind::Other => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_tree_removes_a_planted_link_and_never_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/file"), b"x").unwrap();
        let root_path = tmp.path().join("root");
        std::fs::create_dir_all(root_path.join("ws/a/b")).unwrap();
        std::fs::write(root_path.join("ws/a/b/f"), b"hello").unwrap();
        std::os::unix::fs::symlink(&outside, root_path.join("ws/a/out")).unwrap();
        let root = Root::open(&root_path).unwrap();

        assert_eq!(usage_bytes(&root, Some(Path::new("ws"))).unwrap(), 5);
        assert!(remove_tree(&root, "ws").unwrap());
        assert!(!root_path.join("ws").exists());
        assert!(outside.join("keep/file").exists());
        assert!(!remove_tree(&root, "ws").unwrap());
        assert_eq!(usage_bytes(&root, Some(Path::new("ws"))).unwrap(), 0);
    }

    /// A run installing packages while a turn or a publish measures the site: files and
    /// folders come and go, and one is swapped for a link, under the walk. Every measure
    /// answers (what is there when looked at); none fails.
    #[test]
    fn usage_is_measured_while_the_tree_changes_under_the_walk() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("kept")).unwrap();
        std::fs::write(ws.join("kept/f"), b"12345").unwrap();
        let root = Root::open(tmp.path()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let churn = {
            let (ws, stop) = (ws.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rounds = 0u32;
                while !stop.load(Ordering::Relaxed) || rounds < 50 {
                    for n in 0..40 {
                        let dir = ws.join(format!("pkg{n}"));
                        let _ = std::fs::create_dir_all(dir.join("lib"));
                        let _ = std::fs::write(dir.join("lib/index.js"), b"x");
                        let _ = std::fs::write(dir.join("package.json"), b"{}");
                    }
                    for n in 0..40 {
                        let dir = ws.join(format!("pkg{n}"));
                        let _ = std::fs::remove_dir_all(&dir);
                        if n % 4 == 0 {
                            let _ = std::os::unix::fs::symlink("/", &dir);
                            let _ = std::fs::remove_file(&dir);
                        }
                    }
                    rounds += 1;
                }
            })
        };
        for _ in 0..400 {
            let bytes = usage_bytes(&root, Some(Path::new("ws"))).unwrap();
            assert!(bytes >= 5, "{bytes}");
        }
        stop.store(true, Ordering::Relaxed);
        churn.join().unwrap();
    }

    #[test]
    fn exclusive_mkdir_sets_the_mode_and_refuses_an_existing_name() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        assert!(create_dir_exclusive(&root, "site", 0o2770).unwrap());
        let mode = std::fs::metadata(tmp.path().join("site"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o2770);
        assert!(!create_dir_exclusive(&root, "site", 0o2770).unwrap());
        std::os::unix::fs::symlink("/etc", tmp.path().join("link")).unwrap();
        assert!(!create_dir_exclusive(&root, "link", 0o2770).unwrap());
    }

    #[test]
    fn apply_modes_sets_the_shared_modes_and_never_follows_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::create_dir_all(ws.join(".builder")).unwrap();
        std::fs::write(ws.join("a/b/f"), "f").unwrap();
        std::fs::set_permissions(ws.join("a/b/f"), std::fs::Permissions::from_mode(0o444)).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("a/link")).unwrap();
        let root = Root::open(&ws).unwrap();
        apply_modes(&root, 0o2770, 0o660, &[".builder"]).unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&ws), 0o2770);
        assert_eq!(mode(&ws.join("a/b")), 0o2770);
        assert_eq!(mode(&ws.join("a/b/f")), 0o660);
        assert_ne!(mode(&ws.join(".builder")), 0o2770);
        assert_eq!(mode(&outside), 0o600);
    }
}
