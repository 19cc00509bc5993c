//! [`Root`]: reads and writes below a directory descriptor, one name at a time, never following
//! a symlink.
//!
//! Every path is validated into a [`RelPath`] and walked from the root's descriptor with
//! `openat(O_NOFOLLOW | O_CLOEXEC)`, adding `O_DIRECTORY` for each directory on the way. No
//! whole path string is ever handed to the kernel, so a link planted at any level, even one
//! pointing inside the root, is refused rather than followed.
//!
//! What this guarantees against a writer of the tree racing us: every entry we open is reached
//! through directories we hold open, each of which was below the root when we opened it, and
//! nothing is resolved through a link. What it cannot prevent:
//! - Hard links. A file with more than one link is refused before it is read or written, but
//!   a racer can add or drop a link between our open and our check. Keep the kernel's
//!   `fs.protected_hardlinks = 1` (the systemd default), which stops an identity from linking
//!   a file it could not already write, and keep sensitive files on another filesystem where
//!   possible.
//! - The tree's writer replacing entries after we are done; confinement is about where we
//!   read and write, not about the tree's content staying as we left it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

use crate::{FsError, RelPath};

/// The limit of [`Root::read`], in bytes: a tree's writer must not be able to make us allocate
/// without bound (a sparse file costs them nothing).
pub const DEFAULT_READ_LIMIT_BYTES: u64 = 64 * 1024 * 1024; // 64 MiB

/// How the name of an atomic write's temporary file begins (it is renamed over the target once
/// complete). A process killed half way leaves one behind, which no commit should take.
pub const TEMP_NAME_PREFIX: &str = ".atelier-tmp.";

/// How many temporary names [`Root::write_atomic`] tries before giving up; a collision needs
/// someone to pre-create our exact name, so more than one retry means an adversary.
const TEMP_NAME_ATTEMPTS: u32 = 16;

/// Permission bits a file may be created with: no set-user-ID, set-group-ID or sticky bit, so
/// a privileged writer never plants a privilege-carrying file in a tree others control.
const FILE_MODE_MASK: u32 = 0o777;

/// Permission bits a directory may be created with: set-group-ID (group inheritance) and
/// sticky are meaningful there; set-user-ID is not.
const DIR_MODE_MASK: u32 = 0o3777;

/// Flags for every directory on a walk: never follow, must be a directory.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Flags for opening a final entry that must be a regular file. `NONBLOCK` makes a planted
/// FIFO fail or return at once instead of hanging the open; `NOCTTY` keeps a terminal from
/// becoming ours.
fn file_flags(access: OFlags) -> OFlags {
    access | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY
}

/// Whether something was written or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tree was modified.
    Changed,
    /// The tree already held what was asked for; nothing was touched.
    Unchanged,
}

// === impl Outcome ===

impl Outcome {
    /// Returns true if and only if the tree was modified.
    pub fn is_changed(self) -> bool {
        self == Outcome::Changed
    }
}

/// The type of an entry, as seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// What [`Root::metadata`] reports about an entry, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    /// The entry's type.
    pub kind: FileKind,
    /// Permission bits, `0o7777` at most.
    pub mode: u32,
    /// Size in bytes.
    pub len: u64,
    /// Hard link count.
    pub links: u64,
    /// Owner user ID.
    pub uid: u32,
    /// Owner group ID.
    pub gid: u32,
}

/// A directory tree that a less trusted identity may write, held open by descriptor.
///
/// All paths given to its methods are relative to the root and are walked from the held
/// descriptor, never following a symlink.
///
/// Against a writer of the tree racing us: every entry we open is reached through directories
/// we hold open, each of which was below the root when we opened it. A hard link can still be
/// added or dropped between our open and our link-count check, so keep the kernel's
/// `fs.protected_hardlinks = 1` (the systemd default).
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    // For error messages and `path()` only; never reopened.
    path: PathBuf,
}

/// The directory that holds the final name of a path, and that name.
struct Located<'a> {
    // `None` when the parent is the root itself.
    parent: Option<OwnedFd>,
    root: BorrowedFd<'a>,
    name: &'a OsStr,
}

impl Located<'_> {
    fn dir(&self) -> BorrowedFd<'_> {
        match &self.parent {
            Some(fd) => fd.as_fd(),
            None => self.root,
        }
    }
}

// === impl Root ===

impl Root {
    /// Opens the directory at `path` as a root.
    ///
    /// `path` is trusted configuration: its ancestors are resolved normally (so `/var` may be
    /// a link), but its last component must itself be a directory, not a symlink to one,
    /// because whoever can write the parent of the root could otherwise retarget it. Use
    /// [`Root::open_following_symlink`] where the last component is a trusted link.
    pub fn open(path: impl AsRef<Path>) -> Result<Root, FsError> {
        let path = path.as_ref();
        match rustix::fs::openat(CWD, path, dir_flags(), Mode::empty()) {
            Ok(fd) => Ok(Root {
                fd,
                path: path.to_path_buf(),
            }),
            Err(errno) => Err(classify_open(CWD, path.as_os_str(), path, errno, Want::Dir)),
        }
    }

    /// Opens the directory at `path` as a root, following a symlink in its last component.
    ///
    /// Only for a root path whose every link is controlled by a trusted identity.
    pub fn open_following_symlink(path: impl AsRef<Path>) -> Result<Root, FsError> {
        let path = path.as_ref();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat(CWD, path, flags, Mode::empty()) {
            Ok(fd) => Ok(Root {
                fd,
                path: path.to_path_buf(),
            }),
            Err(errno) => Err(classify_open(CWD, path.as_os_str(), path, errno, Want::Dir)),
        }
    }

    /// The path this root was opened with (or derived from, for [`Root::open_dir`]); for
    /// messages only, since it may no longer name the same directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the directory `rel` below this root as a root of its own.
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> Result<Root, FsError> {
        let rel = RelPath::new(rel)?;
        let loc = self.locate(&rel)?;
        let fd = open_dir_in(loc.dir(), loc.name, rel.as_path())?;
        Ok(Root {
            fd,
            path: self.path.join(rel.as_path()),
        })
    }

    /// Reads the regular file `rel`, up to [`DEFAULT_READ_LIMIT_BYTES`].
    pub fn read(&self, rel: impl AsRef<Path>) -> Result<Vec<u8>, FsError> {
        self.read_limited(rel, DEFAULT_READ_LIMIT_BYTES)
    }

    /// Reads the regular file `rel`, refusing one larger than `max_bytes`.
    ///
    /// Refuses a symlink anywhere on the path, a final entry that is not a regular file, and a
    /// file with more than one hard link.
    pub fn read_limited(&self, rel: impl AsRef<Path>, max_bytes: u64) -> Result<Vec<u8>, FsError> {
        let rel = RelPath::new(rel)?;
        let (mut file, stat) = self.open_regular(&rel)?;
        let too_large = || FsError::TooLarge {
            path: rel.as_path().to_path_buf(),
            limit: max_bytes,
        };
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size > max_bytes {
            return Err(too_large());
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // One byte past the limit tells a file that grew after the check from one that fits.
        (&mut file)
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|source| FsError::Io {
                op: "read",
                path: rel.as_path().to_path_buf(),
                source,
            })?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_bytes {
            return Err(too_large());
        }
        Ok(bytes)
    }

    /// [`Root::read_limited`] for the daemon's own state in a tree another identity can write:
    /// also refuses a file this process does not own (an agent-authored record is not the
    /// daemon's word). `Ok(None)` when `rel` does not exist.
    pub fn read_own_limited(
        &self,
        rel: impl AsRef<Path>,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, FsError> {
        let rel = RelPath::new(rel)?;
        match self.open_regular(&rel) {
            Ok((_, stat)) => own(&stat, rel.as_path())?,
            Err(FsError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        self.read_limited(rel.as_path(), max_bytes).map(Some)
    }

    /// The end of the regular file `rel`, which this process must own: at most `max_bytes`,
    /// starting after a line break when the start was left out, with how many bytes before it
    /// were left out; `None` when there is no such file. The refusals of
    /// [`Root::read_limited`], never its refusal of a large file.
    pub fn read_own_tail(
        &self,
        rel: impl AsRef<Path>,
        max_bytes: u64,
    ) -> Result<Option<(Vec<u8>, u64)>, FsError> {
        let rel = RelPath::new(rel)?;
        let (mut file, stat) = match self.open_regular(&rel) {
            Ok(opened) => opened,
            Err(FsError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        own(&stat, rel.as_path())?;
        let io = |source| FsError::Io {
            op: "read",
            path: rel.as_path().to_path_buf(),
            source,
        };
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        // When the start is left out, the byte before the cut is read too: it tells whether
        // the cut fell at a line's start.
        let from = size.saturating_sub(max_bytes).saturating_sub(1);
        file.seek(SeekFrom::Start(from)).map_err(io)?;
        let mut bytes = Vec::with_capacity(usize::try_from(size - from).unwrap_or(0));
        // A file that grows meanwhile (a running build's log) is read up to its size then.
        (&mut file)
            .take(size - from)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if size <= max_bytes {
            return Ok(Some((bytes, 0)));
        }
        // A cut line would read as garbage: the tail starts at the next whole one.
        let cut = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..cut);
        Ok(Some((bytes, from + u64::try_from(cut).unwrap_or(0))))
    }

    /// Opens the regular file `rel` for reading, with the same refusals as
    /// [`Root::read_limited`] (without a size limit: the caller reads as much as it wants).
    pub fn open_read(&self, rel: impl AsRef<Path>) -> Result<File, FsError> {
        let rel = RelPath::new(rel)?;
        let (file, _) = self.open_regular(&rel)?;
        // Opened non-blocking to defuse a planted FIFO; a regular file never needed it, but the
        // caller should get an ordinary descriptor.
        let flags = rustix::fs::fcntl_getfl(&file)
            .and_then(|flags| rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK))
            .map_err(|errno| io_err("clear O_NONBLOCK on", rel.as_path(), errno));
        flags.map(|()| file)
    }

    /// Replaces `rel` atomically with `bytes`, with permission bits `mode` (`0o777` at most).
    ///
    /// Writes a temporary file in the same directory (created exclusively, never through a
    /// link, its mode set on the descriptor so the umask does not matter), syncs it, renames
    /// it over `rel` and syncs the directory. The parent directory must exist. Refuses when
    /// `rel` exists and is a symlink or not a regular file. Returns
    /// [`Outcome::Unchanged`] without writing when `rel` is already a regular file we own with
    /// exactly these bytes and this mode. On any error the temporary file is removed.
    pub fn write_atomic(
        &self,
        rel: impl AsRef<Path>,
        bytes: &[u8],
        mode: u32,
    ) -> Result<Outcome, FsError> {
        self.write_atomic_as(rel.as_ref(), bytes, mode, None)
    }

    /// [`Root::write_atomic`], with the file owned by `uid`:`gid`.
    ///
    /// The owner is set on the temporary file's descriptor before the rename (and the mode
    /// again after it, since a change of owner may clear set-ID bits), so the final name never
    /// holds the bytes under another owner. Returns [`Outcome::Unchanged`] without writing when
    /// `rel` already holds exactly these bytes with this mode and owner. Changing the owner
    /// needs the privilege to do so (root, or giving a file to oneself).
    pub fn write_atomic_owned(
        &self,
        rel: impl AsRef<Path>,
        bytes: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Outcome, FsError> {
        self.write_atomic_as(rel.as_ref(), bytes, mode, Some((uid, gid)))
    }

    /// Sets the owner and then the permission bits of the existing entry `rel` (a directory or
    /// a regular file; a symlink or anything else is refused), through a descriptor opened
    /// without following links. Directories may carry set-group-ID and sticky (`0o3777`),
    /// files `0o777` at most. Returns [`Outcome::Unchanged`] when both already hold.
    pub fn set_owner_and_mode(
        &self,
        rel: impl AsRef<Path>,
        uid: u32,
        gid: u32,
        mode: u32,
    ) -> Result<Outcome, FsError> {
        let rel = RelPath::new(rel)?;
        let loc = self.locate(&rel)?;
        let path = rel.as_path();
        let stat = match rustix::fs::statat(loc.dir(), loc.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => {
                return Err(FsError::NotFound {
                    path: path.to_path_buf(),
                })
            }
            Err(errno) => return Err(io_err("stat", path, errno)),
        };
        let fd = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                checked_mode(&rel, mode, DIR_MODE_MASK)?;
                open_dir_in(loc.dir(), loc.name, path)?
            }
            FileType::RegularFile => {
                checked_mode(&rel, mode, FILE_MODE_MASK)?;
                let fd = rustix::fs::openat(
                    loc.dir(),
                    loc.name,
                    file_flags(OFlags::RDONLY),
                    Mode::empty(),
                )
                .map_err(|errno| classify_open(loc.dir(), loc.name, path, errno, Want::File))?;
                checked_regular(&fd, path)?;
                fd
            }
            FileType::Symlink => return Err(symlink_refused(path)),
            _ => return Err(not_regular(path)),
        };
        // The descriptor's own stat: the entry may have been swapped since the statat.
        let now = rustix::fs::fstat(&fd).map_err(|errno| io_err("stat", path, errno))?;
        let want = Mode::from_raw_mode(mode);
        if now.st_uid == uid && now.st_gid == gid && Mode::from_raw_mode(now.st_mode) == want {
            return Ok(Outcome::Unchanged);
        }
        if now.st_uid != uid || now.st_gid != gid {
            rustix::fs::fchown(
                &fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )
            .map_err(|errno| io_err("set the owner of", path, errno))?;
        }
        set_mode(&fd, want.as_raw_mode())
            .map_err(|errno| io_err("set the mode of", path, errno))?;
        Ok(Outcome::Changed)
    }

    fn write_atomic_as(
        &self,
        rel: &Path,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<Outcome, FsError> {
        let rel = RelPath::new(rel)?;
        let mode = checked_mode(&rel, mode, FILE_MODE_MASK)?;
        let loc = self.locate(&rel)?;
        let dir = loc.dir();
        match rustix::fs::statat(dir, loc.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => {
                    if holds_exactly(dir, loc.name, bytes, mode, owner) {
                        return Ok(Outcome::Unchanged);
                    }
                }
                FileType::Symlink => return Err(symlink_refused(rel.as_path())),
                _ => return Err(not_regular(rel.as_path())),
            },
            Err(Errno::NOENT) => {}
            Err(errno) => return Err(io_err("stat", rel.as_path(), errno)),
        }

        let (temp_name, temp_fd) = create_temp(dir, &rel, mode)?;
        let written = write_temp_and_rename(dir, loc.name, &temp_name, temp_fd, bytes, mode, owner)
            .map_err(|(op, errno)| io_err(op, rel.as_path(), errno));
        if written.is_err() {
            // Best effort: the error being reported matters more than a failed cleanup.
            let _ = rustix::fs::unlinkat(dir, &temp_name, AtFlags::empty());
        }
        written?;
        rustix::fs::fsync(dir)
            .map_err(|errno| io_err("sync the directory of", rel.as_path(), errno))?;
        Ok(Outcome::Changed)
    }

    /// Overwrites the regular file `rel` in place (same inode), creating it with permission
    /// bits `mode` (`0o777` at most, set on the descriptor) if it does not exist.
    ///
    /// An existing file keeps its mode and owner. It is opened without `O_TRUNC` and checked
    /// before anything is changed: refused if it is a symlink, not a regular file, or has more
    /// than one hard link. Then it is truncated, written and synced. The parent directory must
    /// exist.
    pub fn write_in_place(
        &self,
        rel: impl AsRef<Path>,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), FsError> {
        let rel = RelPath::new(rel)?;
        let raw_mode = checked_mode(&rel, mode, FILE_MODE_MASK)?;
        let loc = self.locate(&rel)?;
        let dir = loc.dir();
        let path = rel.as_path();

        let (fd, created) = open_for_overwrite(dir, loc.name, path, raw_mode)?;
        let mut file = File::from(fd);
        let result = (|| {
            if created {
                set_mode(&file, raw_mode.as_raw_mode()).map_err(|e| ("set the mode of", e))?;
            }
            rustix::fs::ftruncate(&file, 0).map_err(|e| ("truncate", e))?;
            file.write_all(bytes)
                .map_err(|e| ("write", Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
            rustix::fs::fsync(&file).map_err(|e| ("sync", e))
        })();
        match result {
            Ok(()) => Ok(()),
            Err((op, errno)) => {
                if created {
                    // A file we just created must not stay behind half-written.
                    let _ = rustix::fs::unlinkat(dir, loc.name, AtFlags::empty());
                }
                Err(io_err(op, path, errno))
            }
        }
    }

    /// Opens the regular file `rel` for reading and appending, creating it with permission
    /// bits `mode` (set on the descriptor) if it does not exist. The parent must exist.
    ///
    /// Refused before anything is written: a symlink at any level, anything but a regular
    /// file, a file with more than one hard link, or one this process's user does not own.
    /// Every write on the returned file lands at its end (`O_APPEND`).
    pub fn open_append(&self, rel: impl AsRef<Path>, mode: u32) -> Result<File, FsError> {
        let rel = RelPath::new(rel)?;
        let raw_mode = checked_mode(&rel, mode, FILE_MODE_MASK)?;
        let loc = self.locate(&rel)?;
        let dir = loc.dir();
        let path = rel.as_path();
        let flags = file_flags(OFlags::RDWR | OFlags::APPEND | OFlags::CREATE);
        let fd = rustix::fs::openat(dir, loc.name, flags, creation_mode(raw_mode))
            .map_err(|errno| classify_open(dir, loc.name, path, errno, Want::File))?;
        own(&checked_regular(&fd, path)?, path)?;
        set_mode(&fd, raw_mode.as_raw_mode())
            .map_err(|errno| io_err("set the mode of", path, errno))?;
        Ok(File::from(fd))
    }

    /// Creates the directory `rel` and any missing parents, level by level.
    ///
    /// A level that exists must be a real directory (not a symlink to one) and is never
    /// re-moded. A level this call creates gets permission bits `mode` (`0o3777` at most: no
    /// set-user-ID) set on its descriptor, so the umask does not matter. Returns
    /// [`Outcome::Unchanged`] if every level already existed.
    pub fn create_dir_all(&self, rel: impl AsRef<Path>, mode: u32) -> Result<Outcome, FsError> {
        let rel = RelPath::new(rel)?;
        let raw_mode = checked_mode(&rel, mode, DIR_MODE_MASK)?;
        let euid = rustix::process::geteuid().as_raw();
        let mut outcome = Outcome::Unchanged;
        let mut current: Option<OwnedFd> = None;
        let mut shown = PathBuf::new();
        for name in rel.names() {
            shown.push(name);
            let dir = current.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
            let next = match open_dir_in(dir, name, &shown) {
                Ok(fd) => fd,
                Err(FsError::NotFound { .. }) => {
                    match rustix::fs::mkdirat(dir, name, creation_mode(raw_mode)) {
                        // Lost a race with another creator: what is there now is existing.
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(io_err("create directory", &shown, errno)),
                    }
                    let fd = open_dir_in(dir, name, &shown)?;
                    let stat =
                        rustix::fs::fstat(&fd).map_err(|errno| io_err("stat", &shown, errno))?;
                    // Mode only what is ours: a directory someone swapped in after our mkdir
                    // is an existing level, and existing levels are never re-moded.
                    if stat.st_uid == euid {
                        set_mode(&fd, raw_mode.as_raw_mode())
                            .map_err(|errno| io_err("set the mode of", &shown, errno))?;
                        outcome = Outcome::Changed;
                    }
                    fd
                }
                Err(e) => return Err(e),
            };
            current = Some(next);
        }
        Ok(outcome)
    }

    /// [`Root::create_dir_all`] for the daemon's own folder in a tree another identity can
    /// write: the last level, created now or found, must belong to this process's user
    /// ([`FsError::NotOwned`] otherwise), so a folder someone else planted there is never taken
    /// for the daemon's own.
    pub fn create_own_dir_all(&self, rel: impl AsRef<Path>, mode: u32) -> Result<Outcome, FsError> {
        let rel = rel.as_ref();
        let outcome = self.create_dir_all(rel, mode)?;
        let dir = self.open_dir(rel)?;
        let stat = rustix::fs::fstat(&dir.fd).map_err(|errno| io_err("stat", rel, errno))?;
        own(&stat, rel)?;
        Ok(outcome)
    }

    /// Removes the non-directory entry `rel` (a symlink is removed itself, never its target).
    ///
    /// Returns `Ok(true)` if it was removed and `Ok(false)`, "unchanged", if it or a parent
    /// did not exist. A directory is refused as not a regular file.
    pub fn remove_file(&self, rel: impl AsRef<Path>) -> Result<bool, FsError> {
        let rel = RelPath::new(rel)?;
        let loc = match self.locate(&rel) {
            Ok(loc) => loc,
            Err(FsError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        match rustix::fs::unlinkat(loc.dir(), loc.name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(Errno::ISDIR) => Err(not_regular(rel.as_path())),
            Err(errno) => Err(io_err("remove", rel.as_path(), errno)),
        }
    }

    /// Makes this directory's entries durable (`fsync(2)` on it): a file created, renamed or
    /// removed in it is so on the disk, not only in the kernel, once this returns.
    pub fn sync(&self) -> Result<(), FsError> {
        rustix::fs::fsync(&self.fd).map_err(|errno| io_err("sync", &self.path, errno))
    }

    /// Renames the regular file `from` to `to` in the same tree. The file itself is never
    /// followed (a link or anything but a regular file at `from` is refused), and an entry
    /// already at `to` is refused rather than replaced, so a rename never overwrites.
    pub fn rename_file(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<(), FsError> {
        self.rename_kind(from.as_ref(), to.as_ref(), FileType::RegularFile)
    }

    /// Renames the directory `from` to `to` in the same tree, whole, in one step: a link or
    /// anything but a directory at `from` is refused, and so is an entry already at `to`.
    pub fn rename_dir(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<(), FsError> {
        self.rename_kind(from.as_ref(), to.as_ref(), FileType::Directory)
    }

    fn rename_kind(&self, from: &Path, to: &Path, kind: FileType) -> Result<(), FsError> {
        let (from, to) = (RelPath::new(from)?, RelPath::new(to)?);
        let (old, new) = (self.locate(&from)?, self.locate(&to)?);
        match rustix::fs::statat(old.dir(), old.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == kind => {}
            Ok(_) if kind == FileType::Directory => {
                return Err(FsError::NotDirectory {
                    path: from.as_path().to_path_buf(),
                })
            }
            Ok(_) => return Err(not_regular(from.as_path())),
            Err(Errno::NOENT) => {
                return Err(FsError::NotFound {
                    path: from.as_path().to_path_buf(),
                })
            }
            Err(errno) => return Err(io_err("stat", from.as_path(), errno)),
        }
        rustix::fs::renameat_with(
            old.dir(),
            old.name,
            new.dir(),
            new.name,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|errno| io_err("rename", from.as_path(), errno))
    }

    /// Describes the entry `rel` without following it; a symlink is reported as
    /// [`FileKind::Symlink`]. Links on the way to it are still refused.
    pub fn metadata(&self, rel: impl AsRef<Path>) -> Result<Metadata, FsError> {
        let rel = RelPath::new(rel)?;
        let loc = self.locate(&rel)?;
        match rustix::fs::statat(loc.dir(), loc.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(metadata_of(&stat)),
            Err(Errno::NOENT) => Err(FsError::NotFound {
                path: rel.as_path().to_path_buf(),
            }),
            Err(errno) => Err(io_err("stat", rel.as_path(), errno)),
        }
    }

    /// Walks every name of `rel` but the last as a directory.
    fn locate<'a>(&'a self, rel: &'a RelPath) -> Result<Located<'a>, FsError> {
        let names: Vec<&OsStr> = rel.names().collect();
        let (name, parents) = match names.split_last() {
            Some((name, parents)) => (*name, parents),
            None => return Err(FsError::EmptyPath),
        };
        let mut current: Option<OwnedFd> = None;
        let mut shown = PathBuf::new();
        for parent in parents {
            shown.push(parent);
            let dir = current.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
            current = Some(open_dir_in(dir, parent, &shown)?);
        }
        Ok(Located {
            parent: current,
            root: self.fd.as_fd(),
            name,
        })
    }

    /// Opens `rel` read-only and checks it is a regular file with one link.
    fn open_regular(&self, rel: &RelPath) -> Result<(File, Stat), FsError> {
        let loc = self.locate(rel)?;
        let path = rel.as_path();
        let fd = rustix::fs::openat(
            loc.dir(),
            loc.name,
            file_flags(OFlags::RDONLY),
            Mode::empty(),
        )
        .map_err(|errno| classify_open(loc.dir(), loc.name, path, errno, Want::File))?;
        let stat = checked_regular(&fd, path)?;
        Ok((File::from(fd), stat))
    }
}

impl AsFd for Root {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What an entry being opened has to be, to name the refusal when the open fails.
#[derive(Clone, Copy)]
enum Want {
    Dir,
    File,
}

fn open_dir_in(dir: BorrowedFd<'_>, name: &OsStr, shown: &Path) -> Result<OwnedFd, FsError> {
    rustix::fs::openat(dir, name, dir_flags(), Mode::empty())
        .map_err(|errno| classify_open(dir, name, shown, errno, Want::Dir))
}

/// Turns a failed no-follow open into a named refusal where one applies.
///
/// The follow-up `lstat` only picks the message: the open already refused, so a race here can
/// mislabel a refusal but never turn one into success.
fn classify_open(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    shown: &Path,
    errno: Errno,
    want: Want,
) -> FsError {
    let path = shown.to_path_buf();
    match errno {
        Errno::NOENT => FsError::NotFound { path },
        // `O_NOFOLLOW` on a symlink.
        Errno::LOOP => FsError::SymlinkRefused { path },
        // `O_DIRECTORY` on a non-directory (Linux reports a symlink this way too), a
        // directory opened for writing, a FIFO without a reader or a socket.
        Errno::NOTDIR | Errno::ISDIR | Errno::NXIO => {
            let now = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|stat| FileType::from_raw_mode(stat.st_mode));
            match (now, want) {
                (Ok(FileType::Symlink), _) => FsError::SymlinkRefused { path },
                // A directory now, after the open found none: the entry is being swapped,
                // which is what a planted link racing us looks like.
                (Ok(FileType::Directory), Want::Dir) => FsError::SymlinkRefused { path },
                (Err(Errno::NOENT), _) => FsError::NotFound { path },
                (_, Want::Dir) => FsError::NotDirectory { path },
                (_, Want::File) => FsError::NotRegularFile { path },
            }
        }
        _ => io_err(
            match want {
                Want::Dir => "open directory",
                Want::File => "open",
            },
            shown,
            errno,
        ),
    }
}

/// Refuses a descriptor that is not a regular file with exactly one link.
fn checked_regular(fd: &OwnedFd, path: &Path) -> Result<Stat, FsError> {
    let stat = rustix::fs::fstat(fd).map_err(|errno| io_err("stat", path, errno))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular(path));
    }
    let links = link_count(&stat);
    if links > 1 {
        return Err(FsError::HardLinkRefused {
            path: path.to_path_buf(),
            links,
        });
    }
    Ok(stat)
}

/// Opens `name` for writing without truncating: created exclusively with `mode`, or an
/// existing regular file with one link. Returns whether it was created.
fn open_for_overwrite(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
    mode: Mode,
) -> Result<(OwnedFd, bool), FsError> {
    let create =
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // Created-or-opened can flip if the tree's writer deletes and recreates the name between
    // our two opens; a few rounds settle any honest race.
    for _ in 0..3 {
        match rustix::fs::openat(dir, name, create, mode) {
            Ok(fd) => return Ok((fd, true)),
            Err(Errno::EXIST) => {}
            Err(errno) => return Err(classify_open(dir, name, path, errno, Want::File)),
        }
        match rustix::fs::openat(dir, name, file_flags(OFlags::WRONLY), Mode::empty()) {
            Ok(fd) => {
                checked_regular(&fd, path)?;
                return Ok((fd, false));
            }
            Err(Errno::NOENT) => continue,
            Err(errno) => return Err(classify_open(dir, name, path, errno, Want::File)),
        }
    }
    Err(io_err("open", path, Errno::AGAIN))
}

/// Creates an exclusive temporary file next to `rel`'s final name.
fn create_temp(
    dir: BorrowedFd<'_>,
    rel: &RelPath,
    mode: Mode,
) -> Result<(OsString, OwnedFd), FsError> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let pid = rustix::process::getpid().as_raw_nonzero();
    let mut last = Errno::EXIST;
    for _ in 0..TEMP_NAME_ATTEMPTS {
        // Not derived from the target's name, which may already be NAME_MAX long.
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let temp_name = OsString::from(format!("{TEMP_NAME_PREFIX}{pid}.{seq}"));
        match rustix::fs::openat(dir, &temp_name, flags, mode) {
            Ok(fd) => return Ok((temp_name, fd)),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(errno) => {
                last = errno;
                break;
            }
        }
    }
    Err(io_err("create a temporary file for", rel.as_path(), last))
}

/// Fills the temporary file, then renames it over `name`; the error names the failed step.
fn write_temp_and_rename(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    temp_name: &OsStr,
    temp_fd: OwnedFd,
    bytes: &[u8],
    mode: Mode,
    owner: Option<(u32, u32)>,
) -> Result<(), (&'static str, Errno)> {
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(
            &temp_fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .map_err(|e| ("set the owner of", e))?;
    }
    // The umask trimmed the mode given to open (and a chown may clear set-ID bits); the
    // descriptor gets the exact one.
    set_mode(&temp_fd, mode.as_raw_mode()).map_err(|e| ("set the mode of", e))?;
    let mut file = File::from(temp_fd);
    file.write_all(bytes)
        .map_err(|e| ("write", Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
    rustix::fs::fsync(&file).map_err(|e| ("sync", e))?;
    drop(file);
    rustix::fs::renameat(dir, temp_name, dir, name).map_err(|e| ("rename over", e))
}

/// Returns true if and only if `name` is a regular file with exactly `bytes` and `mode`, owned
/// by `owner` (uid, gid) when given, else by us. Any doubt answers false, which only costs a
/// rewrite.
fn holds_exactly(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    bytes: &[u8],
    mode: Mode,
    owner: Option<(u32, u32)>,
) -> bool {
    let Ok(fd) = rustix::fs::openat(dir, name, file_flags(OFlags::RDONLY), Mode::empty()) else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
        return false;
    };
    let same_len = u64::try_from(stat.st_size).ok() == u64::try_from(bytes.len()).ok();
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile
        || !same_len
        || Mode::from_raw_mode(stat.st_mode) != mode
        || !match owner {
            Some((uid, gid)) => stat.st_uid == uid && stat.st_gid == gid,
            None => stat.st_uid == rustix::process::geteuid().as_raw(),
        }
    {
        return false;
    }
    let mut current = Vec::with_capacity(bytes.len());
    let limit = u64::try_from(bytes.len())
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    match File::from(fd).take(limit).read_to_end(&mut current) {
        Ok(_) => current == bytes,
        Err(_) => false,
    }
}

/// Gives the object behind `fd` exactly `mode` (permission and set-ID bits), and changes
/// nothing when it already has it: a unit with `RestrictSUIDSGID=yes` refuses any chmod that
/// names a set-ID bit, so a directory that inherited its setgid bit must not be re-moded to it.
/// Returns true if and only if the mode was changed.
pub fn set_mode(fd: impl AsFd, mode: u32) -> Result<bool, Errno> {
    let stat = rustix::fs::fstat(&fd)?;
    if stat.st_mode & 0o7777 == mode & 0o7777 {
        return Ok(false);
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    Ok(true)
}

/// The mode to create an entry with: never a set-ID bit (a `RestrictSUIDSGID=yes` unit refuses
/// those at creation too); a directory inherits setgid from its parent, and [`set_mode`] adds
/// what is still missing.
fn creation_mode(mode: Mode) -> Mode {
    Mode::from_raw_mode(mode.as_raw_mode() & 0o777)
}

fn checked_mode(rel: &RelPath, mode: u32, allowed: u32) -> Result<Mode, FsError> {
    if mode & !allowed != 0 {
        return Err(FsError::InvalidMode {
            path: rel.as_path().to_path_buf(),
            mode,
        });
    }
    Ok(Mode::from_raw_mode(mode))
}

fn metadata_of(stat: &Stat) -> Metadata {
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    };
    Metadata {
        kind,
        mode: Mode::from_raw_mode(stat.st_mode).bits(),
        len: u64::try_from(stat.st_size).unwrap_or(0),
        links: link_count(stat),
        uid: stat.st_uid,
        gid: stat.st_gid,
    }
}

// `st_nlink` is u64 on x86_64 and u32 on other targets; the conversion is only useless on some.
#[allow(clippy::useless_conversion)]
fn link_count(stat: &Stat) -> u64 {
    u64::from(stat.st_nlink)
}

/// [`FsError::NotOwned`] unless this process's user owns what `stat` describes: the daemon's
/// own state in a tree another identity can write is only its own if it made it.
fn own(stat: &rustix::fs::Stat, path: &Path) -> Result<(), FsError> {
    if stat.st_uid == rustix::process::geteuid().as_raw() {
        Ok(())
    } else {
        Err(FsError::NotOwned {
            path: path.to_path_buf(),
        })
    }
}

fn io_err(op: &'static str, path: &Path, errno: Errno) -> FsError {
    FsError::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

fn symlink_refused(path: &Path) -> FsError {
    FsError::SymlinkRefused {
        path: path.to_path_buf(),
    }
}

fn not_regular(path: &Path) -> FsError {
    FsError::NotRegularFile {
        path: path.to_path_buf(),
    }
}
