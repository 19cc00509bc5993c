//! [`Store`]: one surface's release store and the link that serves it, and every operation on
//! them — promote, publish, current, list, activate (rollback) and prune.
//!
//! Layout, e.g. preprod of one site:
//! ```text
//! <webspace>/pre                 -> .releases/pre/<id>   (the served link, a relative target)
//! <webspace>/.releases/pre/<id>/ a complete release, never changed after its rename
//! <webspace>/.releases/pre/.staging-<id>/   a promote in progress (or a crash's leftover)
//! <webspace>/.releases/pre/.pruning-<id>/   a release being pruned (or a crash's leftover)
//! <webspace>/pre.tmp-<id>        the next link, about to be renamed over `pre`
//! ```
//! A promote copies into staging, syncs the filesystem, renames staging to `<id>` and only then
//! flips the link with one `rename(2)`, so the link only ever names a complete release; a
//! crash at any point leaves the served link as it was plus leftovers, which the next promote
//! removes and every listing ignores (dot names). A prune renames a release to a dot name
//! before it deletes a file of it, so a crash mid-way never leaves a partial release a
//! rollback could serve. Promote, activate and prune of one store
//! exclude each other with `flock` on the store directory (across processes too); publish
//! holds the preprod store shared while it copies, so preprod cannot prune its source.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use atelier_fs::{tree, FileKind, FsError, RelPath, Root};
use rustix::fs::{AtFlags, FlockOperation, RenameFlags};
use rustix::io::Errno;

use crate::copy::{make_dir, CopyStats, Source, Strategy, TreeCopy};
use crate::error::{io_err, ReleaseError};
use crate::id::ReleaseId;

/// The prefix of a promote's staging directory in the store.
pub const STAGING_PREFIX: &str = ".staging-";

/// The prefix a pruned release is renamed to before its files are removed.
pub const PRUNING_PREFIX: &str = ".pruning-";

/// What follows the link's name in the name of the next link: `<link>.tmp-<id>`.
pub const LINK_TEMP_INFIX: &str = ".tmp-";

/// How many ids a promote tries when another process took the one it made.
const ID_ATTEMPTS: usize = 16;

/// A surface's release store and its served link, held open by descriptor.
#[derive(Debug)]
pub struct Store {
    /// The directory holding the link (the webspace), opened as given.
    link_dir: Root,
    /// The store, below `link_dir`.
    store: Root,
    /// `store` relative to `link_dir`: the link target's first part.
    store_rel: RelPath,
    /// The link's name in `link_dir`.
    link_name: OsString,
    /// For messages.
    store_path: PathBuf,
    link_path: PathBuf,
}

/// A release made by [`Store::promote`] or [`publish`] and now served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// The new release.
    pub id: ReleaseId,
    /// How its files got there.
    pub stats: CopyStats,
}

/// What [`publish`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The preprod release whose bytes were published.
    pub source: ReleaseId,
    /// The new prod release serving them.
    pub release: ReleaseId,
    /// How its files got there.
    pub stats: CopyStats,
}

/// What [`Store::prune`] removed and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Releases removed.
    pub removed: Vec<ReleaseId>,
    /// Releases kept, newest first.
    pub kept: Vec<ReleaseId>,
    /// Releases that could not be removed, with why (ignored, as the contract says; retried by
    /// the next prune).
    pub failed: Vec<(ReleaseId, String)>,
}

/// A held `flock` on a store directory, released when dropped (its descriptor closes).
struct StoreLock {
    _dir: Root,
}

// === impl Store ===

impl Store {
    /// Opens the store at `store_dir` served through the link at `link_path`, both absolute
    /// and normal (from the site table).
    ///
    /// Refused: a relative or non-normal path; a store not strictly below the link's
    /// directory (the link's target must be relative); a store whose path runs through the
    /// link; a symbolic link anywhere from the link's directory down to the store. The link's
    /// directory itself is trusted configuration (its ancestors may be links).
    pub fn open(store_dir: &Path, link_path: &Path) -> Result<Store, ReleaseError> {
        check_normal(store_dir)?;
        check_normal(link_path)?;
        let (Some(link_dir), Some(link_name)) = (link_path.parent(), link_path.file_name()) else {
            return Err(ReleaseError::PathNotNormal {
                path: link_path.to_path_buf(),
            });
        };
        let not_under = || ReleaseError::StoreNotUnderLinkDir {
            store: store_dir.to_path_buf(),
            link: link_path.to_path_buf(),
        };
        let rel = store_dir.strip_prefix(link_dir).map_err(|_| not_under())?;
        let store_rel = RelPath::new(rel).map_err(|_| not_under())?;
        if store_rel.names().next() == Some(link_name) {
            return Err(ReleaseError::StoreBehindLink {
                store: store_dir.to_path_buf(),
                link: link_path.to_path_buf(),
            });
        }
        let link_root = Root::open(link_dir)?;
        let store = link_root.open_dir(store_rel.as_path())?;
        Ok(Store {
            link_dir: link_root,
            store,
            store_rel,
            link_name: link_name.to_os_string(),
            store_path: store_dir.to_path_buf(),
            link_path: link_path.to_path_buf(),
        })
    }

    /// The store's path, as opened.
    pub fn store_path(&self) -> &Path {
        &self.store_path
    }

    /// The served link's path, as opened.
    pub fn link_path(&self) -> &Path {
        &self.link_path
    }

    /// The release the link serves, or `None`: no link, the provisioner's placeholder (a link
    /// to the store itself), or a target that is not a release of this store.
    ///
    /// The target is resolved lexically against the link's directory and must be a direct
    /// child of the store named like a release id.
    pub fn current(&self) -> Result<Option<ReleaseId>, ReleaseError> {
        let target = match rustix::fs::readlinkat(&self.link_dir, &self.link_name, Vec::new()) {
            Ok(target) => PathBuf::from(OsStr::from_bytes(target.as_bytes())),
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::INVAL) => {
                return Err(ReleaseError::LinkNotSymlink {
                    link: self.link_path.clone(),
                })
            }
            Err(errno) => return Err(io_err("read the link", &self.link_path, errno)),
        };
        let Some(link_dir) = self.link_path.parent() else {
            return Ok(None);
        };
        let Some(resolved) = lexical_resolve(link_dir, &target) else {
            return Ok(None);
        };
        let Ok(inside) = resolved.strip_prefix(&self.store_path) else {
            return Ok(None);
        };
        let mut names = inside.components();
        match (names.next(), names.next()) {
            (Some(Component::Normal(name)), None) => {
                Ok(name.to_str().and_then(|name| ReleaseId::parse(name).ok()))
            }
            _ => Ok(None),
        }
    }

    /// Every release in the store, newest first: the directories named like a release id.
    /// Dot names (staging leftovers) and anything else are not releases.
    pub fn list(&self) -> Result<Vec<ReleaseId>, ReleaseError> {
        let mut ids: Vec<ReleaseId> = tree::list_dir(&self.store, None)?
            .into_iter()
            .filter(|(_, kind)| *kind == FileKind::Dir)
            .filter_map(|(name, _)| ReleaseId::parse(name.to_str()?).ok())
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        Ok(ids)
    }

    /// Opens the release `id` for reading.
    pub fn open_release(&self, id: &ReleaseId) -> Result<Root, ReleaseError> {
        match self.store.open_dir(id.as_str()) {
            Ok(dir) => Ok(dir),
            Err(
                FsError::NotFound { .. }
                | FsError::NotDirectory { .. }
                | FsError::SymlinkRefused { .. },
            ) => Err(ReleaseError::UnknownRelease {
                id: id.clone(),
                store: self.store_path.clone(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Bytes of the regular files of release `id` (each hard link counted, links not
    /// followed): publish's quota question.
    pub fn release_bytes(&self, id: &ReleaseId) -> Result<u64, ReleaseError> {
        self.open_release(id)?;
        Ok(tree::usage_bytes(
            &self.store,
            Some(Path::new(id.as_str())),
        )?)
    }

    /// Serves the retained release `id` (rollback): one flip of the link.
    ///
    /// Refused by name, changing nothing: an `id` that is not a release id (which covers every
    /// path escape) and an id with no release directory here.
    pub fn activate(&self, id: &str) -> Result<ReleaseId, ReleaseError> {
        let id = ReleaseId::parse(id)?;
        let _lock = self.lock(FlockOperation::LockExclusive)?;
        self.open_release(&id)?;
        self.flip(&id).map_err(Flip::into_error)?;
        Ok(id)
    }

    /// Copies the build output `source` (a tree another identity can write) into a new
    /// release and serves it.
    ///
    /// Refused, with nothing left behind: a symbolic link, FIFO, socket or device anywhere in
    /// `source`, or a file with more than one hard link. With [`Strategy::LinkUnchanged`] a
    /// file equal to the served release's is linked to it; a file is never linked to the
    /// source.
    pub fn promote(&self, source: &Root, strategy: Strategy) -> Result<Promoted, ReleaseError> {
        let _lock = self.lock(FlockOperation::LockExclusive)?;
        let base = match strategy {
            Strategy::LinkUnchanged => self.current()?.and_then(|id| self.open_release(&id).ok()),
            Strategy::Copy | Strategy::Reflink => None,
        };
        self.promote_locked(source, Source::Untrusted, base.as_ref(), strategy)
    }

    /// Keeps the `retained` newest releases and the served one; removes the rest, each
    /// renamed out of the releases (and that rename synced) before its files go. Removal
    /// failures are reported, not raised.
    pub fn prune(&self, retained: usize) -> Result<Pruned, ReleaseError> {
        let _lock = self.lock(FlockOperation::LockExclusive)?;
        let current = self.current()?;
        let mut pruned = Pruned::default();
        let mut aside = Vec::new();
        for (index, id) in self.list()?.into_iter().enumerate() {
            if index < retained || current.as_ref() == Some(&id) {
                pruned.kept.push(id);
                continue;
            }
            let name = format!("{PRUNING_PREFIX}{}", id.as_str());
            match rustix::fs::renameat_with(
                &self.store,
                id.as_str(),
                &self.store,
                name.as_str(),
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => aside.push((id, name)),
                Err(errno) => pruned.failed.push((
                    id.clone(),
                    io_err("rename", self.store_path.join(id.as_str()), errno).to_string(),
                )),
            }
        }
        if aside.is_empty() {
            return Ok(pruned);
        }
        // Once the renames are on disk, a crash leaves only leftovers, never a partial release.
        rustix::fs::fsync(&self.store).map_err(|errno| io_err("sync", &self.store_path, errno))?;
        for (id, name) in aside {
            match tree::remove_tree(&self.store, &name) {
                Ok(_) => pruned.removed.push(id),
                Err(e) => pruned.failed.push((id, e.to_string())),
            }
        }
        Ok(pruned)
    }

    /// Removes what a crashed promote or prune left: staging and pruned directories in the
    /// store and next-links beside the served link. Only this store's own names are touched.
    pub fn clean_leftovers(&self) -> Result<usize, ReleaseError> {
        let _lock = self.lock(FlockOperation::LockExclusive)?;
        self.clean_locked()
    }

    fn clean_locked(&self) -> Result<usize, ReleaseError> {
        let mut removed = 0;
        for (name, _) in tree::list_dir(&self.store, None)? {
            let name_bytes = name.as_bytes();
            if name_bytes.starts_with(STAGING_PREFIX.as_bytes())
                || name_bytes.starts_with(PRUNING_PREFIX.as_bytes())
            {
                tree::remove_tree(&self.store, &name)?;
                removed += 1;
            }
        }
        let mut temp_prefix = self.link_name.clone();
        temp_prefix.push(LINK_TEMP_INFIX);
        for (name, kind) in tree::list_dir(&self.link_dir, None)? {
            if kind == FileKind::Symlink && name.as_bytes().starts_with(temp_prefix.as_bytes()) {
                self.link_dir.remove_file(&name)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn promote_locked(
        &self,
        source: &Root,
        kind: Source,
        base: Option<&Root>,
        strategy: Strategy,
    ) -> Result<Promoted, ReleaseError> {
        self.clean_locked()?;
        // Refused before the copy, so a link that cannot be flipped leaves nothing behind.
        self.check_link()?;
        let mut id = self.fresh_id()?;
        let staging_name = format!("{STAGING_PREFIX}{id}");
        let staging_shown = self.store_path.join(&staging_name);
        let staging = make_dir(&self.store, OsStr::new(&staging_name), &staging_shown)?;
        let mut copy = TreeCopy::new(strategy, kind);
        let copied = copy
            .copy_dir(source, &staging, base, Path::new(""), 0)
            .and_then(|()| {
                // One flush of the filesystem instead of an fsync per file: the release must
                // be on disk before a name the link can reach points at it.
                rustix::fs::syncfs(&staging).map_err(|errno| io_err("sync", &staging_shown, errno))
            });
        drop(staging);
        let renamed = copied.and_then(|()| {
            let mut attempts = 0;
            loop {
                match rustix::fs::renameat_with(
                    &self.store,
                    staging_name.as_str(),
                    &self.store,
                    id.as_str(),
                    RenameFlags::NOREPLACE,
                ) {
                    Ok(()) => return Ok(()),
                    // Another process made the same id: take the next one.
                    Err(Errno::EXIST) if attempts < ID_ATTEMPTS => {
                        attempts += 1;
                        id = id.successor();
                    }
                    Err(errno) => return Err(io_err("rename", &staging_shown, errno)),
                }
            }
        });
        if let Err(e) = renamed {
            // Best effort: the refusal matters more, and the next promote cleans up anyway.
            let _ = tree::remove_tree(&self.store, &staging_name);
            return Err(e);
        }
        rustix::fs::fsync(&self.store).map_err(|errno| io_err("sync", &self.store_path, errno))?;
        match self.flip(&id) {
            Ok(()) => {}
            Err(Flip::Unchanged(e)) => {
                // Best effort, as above: a release no link ever served is not kept.
                let _ = tree::remove_tree(&self.store, id.as_str());
                return Err(e);
            }
            // The link serves the new release already: it stays, whatever is reported.
            Err(Flip::Unsynced(e)) => return Err(e),
        }
        Ok(Promoted {
            id,
            stats: copy.stats,
        })
    }

    /// Refuses a served link that is there but is not a symbolic link (a directory or a file in
    /// its place): flipping it would replace what someone put there.
    fn check_link(&self) -> Result<(), ReleaseError> {
        match self.link_dir.metadata(&self.link_name) {
            Ok(meta) if meta.kind != FileKind::Symlink => Err(ReleaseError::LinkNotSymlink {
                link: self.link_path.clone(),
            }),
            Ok(_) | Err(FsError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A new id that sorts after every release already here (a clock stepped back must not
    /// make the newest release look old to prune).
    fn fresh_id(&self) -> Result<ReleaseId, ReleaseError> {
        let mut id = ReleaseId::generate();
        if let Some(newest) = self.list()?.into_iter().next() {
            if id <= newest {
                id = newest.successor();
            }
        }
        Ok(id)
    }

    /// Points the served link at release `id`: a new link `<link>.tmp-<id>` with the relative
    /// target `<store>/<id>`, renamed over the link in one `rename(2)`.
    fn flip(&self, id: &ReleaseId) -> Result<(), Flip> {
        self.check_link().map_err(Flip::Unchanged)?;
        let target = self.store_rel.as_path().join(id.as_str());
        let mut temp = self.link_name.clone();
        temp.push(LINK_TEMP_INFIX);
        temp.push(id.as_str());
        let temp_shown = self.link_path.with_file_name(&temp);
        // A leftover of the same name can only be a crashed flip to this very id.
        match rustix::fs::unlinkat(&self.link_dir, &temp, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(errno) => return Err(Flip::Unchanged(io_err("remove", &temp_shown, errno))),
        }
        rustix::fs::symlinkat(&target, &self.link_dir, &temp)
            .map_err(|errno| Flip::Unchanged(io_err("create the link", &temp_shown, errno)))?;
        if let Err(errno) =
            rustix::fs::renameat(&self.link_dir, &temp, &self.link_dir, &self.link_name)
        {
            let _ = rustix::fs::unlinkat(&self.link_dir, &temp, AtFlags::empty());
            return Err(Flip::Unchanged(match errno {
                Errno::ISDIR | Errno::NOTEMPTY => ReleaseError::LinkNotSymlink {
                    link: self.link_path.clone(),
                },
                errno => io_err("rename the link over", &self.link_path, errno),
            }));
        }
        rustix::fs::fsync(&self.link_dir).map_err(|errno| {
            Flip::Unsynced(io_err(
                "sync",
                self.link_path.parent().unwrap_or(Path::new("/")),
                errno,
            ))
        })
    }

    /// Takes `operation` on a fresh descriptor of the store (a `flock` is per open file, so
    /// two threads of one process exclude each other too).
    fn lock(&self, operation: FlockOperation) -> Result<StoreLock, ReleaseError> {
        let dir = self.link_dir.open_dir(self.store_rel.as_path())?;
        rustix::fs::flock(&dir, operation)
            .map_err(|errno| io_err("lock", &self.store_path, errno))?;
        Ok(StoreLock { _dir: dir })
    }
}

/// How a flip of the served link failed: before the link changed, or after (it serves the new
/// release, but its folder could not be synced).
enum Flip {
    Unchanged(ReleaseError),
    Unsynced(ReleaseError),
}

impl Flip {
    fn into_error(self) -> ReleaseError {
        match self {
            Flip::Unchanged(error) | Flip::Unsynced(error) => error,
        }
    }
}

/// Publishes the release `preprod` serves into `prod` and serves it there: the exact bytes
/// that were previewed, never a rebuild.
///
/// Refused: [`ReleaseError::NothingToPublish`] when preprod serves no release,
/// [`ReleaseError::UnknownRelease`] when its directory is gone ("rebuild"), and
/// [`ReleaseError::ForeignReleaseFile`] for a file in it that promote did not make.
pub fn publish(
    preprod: &Store,
    prod: &Store,
    strategy: Strategy,
) -> Result<Published, ReleaseError> {
    let (a, b) = (
        rustix::fs::fstat(&preprod.store).map_err(|e| io_err("stat", &preprod.store_path, e))?,
        rustix::fs::fstat(&prod.store).map_err(|e| io_err("stat", &prod.store_path, e))?,
    );
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
        return Err(ReleaseError::SameStore {
            store: prod.store_path.clone(),
        });
    }
    let _source_lock = preprod.lock(FlockOperation::LockShared)?;
    let source = preprod
        .current()?
        .ok_or_else(|| ReleaseError::NothingToPublish {
            store: preprod.store_path.clone(),
        })?;
    let tree = preprod.open_release(&source)?;
    let _lock = prod.lock(FlockOperation::LockExclusive)?;
    let promoted = prod.promote_locked(&tree, Source::OwnRelease, None, strategy)?;
    Ok(Published {
        source,
        release: promoted.id,
        stats: promoted.stats,
    })
}

/// Refuses a path that is not absolute and normal: every name between single slashes, none
/// `.` or `..`, no trailing slash, no NUL. (`Path::components` would hide an inner `.`.)
fn check_normal(path: &Path) -> Result<(), ReleaseError> {
    let bytes = path.as_os_str().as_bytes();
    let normal = bytes.len() > 1
        && bytes[0] == b'/'
        && bytes[1..]
            .split(|&b| b == b'/')
            .all(|name| !name.is_empty() && name != b"." && name != b".." && !name.contains(&0));
    if normal {
        Ok(())
    } else {
        Err(ReleaseError::PathNotNormal {
            path: path.to_path_buf(),
        })
    }
}

/// `target` resolved against `dir` without touching the filesystem: `.` dropped, `..` popping
/// a name (never above the root). `None` for an empty result.
fn lexical_resolve(dir: &Path, target: &Path) -> Option<PathBuf> {
    let mut resolved = if target.is_absolute() {
        PathBuf::from("/")
    } else {
        dir.to_path_buf()
    };
    for component in target.components() {
        match component {
            Component::Normal(name) => resolved.push(name),
            Component::ParentDir => {
                resolved.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    (!resolved.as_os_str().is_empty()).then_some(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_resolution() {
        let dir = Path::new("/srv/w");
        let cases = [
            ("relative", ".releases/pre/x", "/srv/w/.releases/pre/x"),
            ("dotted", "./.releases/./pre/x", "/srv/w/.releases/pre/x"),
            ("parent", "../w/.releases/pre/x", "/srv/w/.releases/pre/x"),
            (
                "absolute",
                "/srv/w/.releases/pre/x",
                "/srv/w/.releases/pre/x",
            ),
            ("above the root", "../../../../x", "/x"),
        ];
        for (name, target, want) in cases {
            assert_eq!(
                lexical_resolve(dir, Path::new(target)).unwrap(),
                Path::new(want),
                "case {name}"
            );
        }
    }
}
