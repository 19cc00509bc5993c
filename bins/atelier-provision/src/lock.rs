//! One `apply` or `remove` of an instance at a time. Two at once (the certificate renewal
//! hook's apply beside an operator's) would each plan from a host the other is changing, and
//! the one that ended first would clear the marker of follow-up steps the other still owed:
//! a reload owed by a run killed after that would never happen. The lock is an exclusive
//! `flock(2)` on a file beside that marker; the kernel drops it when its holder exits, killed
//! or not, so a stale lock cannot outlive its run.

use std::fs::File;
use std::path::{Path, PathBuf};

use atelier_fs::{FsError, Root};
use atelier_layout::names::InstanceName;
use atelier_layout::paths::provision_lock_path;
use rustix::fs::{flock, FlockOperation};

use crate::host::under_root;
use crate::owed::{MARKER_DIR_MODE, MARKER_MODE};

/// An instance's lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

/// The lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[error("could not lock {}: {source}", .path.display())]
pub struct LockError {
    /// The lock file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: FsError,
}

impl InstanceLock {
    /// Takes `inst`'s lock ([`provision_lock_path`]) below `root`, creating its folder and
    /// file as the owed marker's are (root's alone; a link in their place is refused). When
    /// another run holds it, `waiting` is told the lock file once, and the call waits until
    /// that run ends.
    pub fn take(
        root: &Path,
        inst: &InstanceName,
        waiting: impl FnOnce(&Path),
    ) -> Result<Self, LockError> {
        let lock = provision_lock_path(inst);
        let path = under_root(root, &lock);
        let failed = |source| LockError {
            path: path.clone(),
            source,
        };
        let rel = lock.strip_prefix("/").unwrap_or(&lock);
        let host = Root::open(root).map_err(failed)?;
        if let Some(dir) = rel.parent() {
            host.create_dir_all(dir, MARKER_DIR_MODE).map_err(failed)?;
        }
        let file = host.open_append(rel, MARKER_MODE).map_err(failed)?;
        let unlocked = |errno: rustix::io::Errno| {
            failed(FsError::Io {
                op: "lock",
                path: lock.clone(),
                source: errno.into(),
            })
        };
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                waiting(&path);
                flock(&file, FlockOperation::LockExclusive).map_err(unlocked)?;
            }
            Err(errno) => return Err(unlocked(errno)),
        }
        Ok(InstanceLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn instance(name: &str) -> InstanceName {
        InstanceName::new(name).unwrap()
    }

    #[test]
    fn a_second_run_waits_for_the_first_and_another_instance_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let first = InstanceLock::take(&root, &instance("example"), |_| panic!("free")).unwrap();
        // Another instance's lock is its own.
        let other = InstanceLock::take(&root, &instance("other"), |_| panic!("free")).unwrap();
        drop(other);

        let (told, heard) = mpsc::channel();
        let (taken, took) = mpsc::channel();
        let second = std::thread::spawn({
            let root = root.clone();
            move || {
                let lock = InstanceLock::take(&root, &instance("example"), |path| {
                    told.send(path.to_owned()).unwrap();
                })
                .unwrap();
                taken.send(()).unwrap();
                lock
            }
        });
        let locks = root.join("run/atelier-provision");
        assert_eq!(heard.recv().unwrap(), locks.join("example.lock"));
        assert!(
            took.recv_timeout(Duration::from_millis(200)).is_err(),
            "the second run waits while the first holds the lock"
        );
        drop(first);
        took.recv().unwrap();
        drop(second.join().unwrap());
        // Free again. (Not asserted without waiting: a process another test forks meanwhile
        // holds a copy of the descriptor, and so the lock, until it execs.)
        assert!(InstanceLock::take(&root, &instance("example"), |_| {}).is_ok());
        let mode = std::fs::metadata(&locks).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            MARKER_DIR_MODE
        );
    }

    #[test]
    fn a_link_in_place_of_the_lock_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "kept").unwrap();
        let locks = dir.path().join("run/atelier-provision");
        std::fs::create_dir_all(&locks).unwrap();
        std::os::unix::fs::symlink(&target, locks.join("example.lock")).unwrap();
        let err = InstanceLock::take(dir.path(), &instance("example"), |_| {}).unwrap_err();
        assert_eq!(err.path, locks.join("example.lock"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
    }
}
