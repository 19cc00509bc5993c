//! One `apply` or `remove` of an instance at a time. Two at once (the certificate renewal
//! hook's apply beside an operator's) would each plan from a host the other is changing, and
//! the one that ended first would clear the marker of follow-up steps the other still owed:
//! a reload owed by a run killed after that would never happen. The lock is an exclusive
//! `flock(2)` on a file beside that marker; the kernel drops it when its holder exits, killed
//! or not, so a stale lock cannot outlive its run.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use atelier_layout::names::InstanceName;
use rustix::fs::{flock, FlockOperation};

/// The lock files' folder's mode: root's alone, as the marker's.
const LOCK_DIR_MODE: u32 = 0o700;

/// A lock file's mode.
const LOCK_MODE: u32 = 0o600;

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
    pub source: io::Error,
}

impl InstanceLock {
    /// Takes `inst`'s lock, `<dir>/<inst>.lock`, creating the folder and the file as needed.
    /// When another run holds it, `waiting` is told the lock file once, and the call waits
    /// until that run ends.
    pub fn take(
        dir: &Path,
        inst: &InstanceName,
        waiting: impl FnOnce(&Path),
    ) -> Result<Self, LockError> {
        let path = dir.join(format!("{inst}.lock"));
        let failed = |source| LockError {
            path: path.clone(),
            source,
        };
        DirBuilder::new()
            .recursive(true)
            .mode(LOCK_DIR_MODE)
            .create(dir)
            .map_err(failed)?;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(LOCK_MODE)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(failed)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                waiting(&path);
                flock(&file, FlockOperation::LockExclusive).map_err(|e| failed(e.into()))?;
            }
            Err(e) => return Err(failed(e.into())),
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
        let locks = dir.path().join("atelier-provision");
        let first = InstanceLock::take(&locks, &instance("example"), |_| panic!("free")).unwrap();
        // Another instance's lock is its own.
        let other = InstanceLock::take(&locks, &instance("other"), |_| panic!("free")).unwrap();
        drop(other);

        let (told, heard) = mpsc::channel();
        let (taken, took) = mpsc::channel();
        let second = std::thread::spawn({
            let locks = locks.clone();
            move || {
                let lock = InstanceLock::take(&locks, &instance("example"), |path| {
                    told.send(path.to_owned()).unwrap();
                })
                .unwrap();
                taken.send(()).unwrap();
                lock
            }
        });
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
        assert!(InstanceLock::take(&locks, &instance("example"), |_| {}).is_ok());
        let mode = std::fs::metadata(&locks).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            LOCK_DIR_MODE
        );
    }

    #[test]
    fn a_link_in_place_of_the_lock_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "kept").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("example.lock")).unwrap();
        let err = InstanceLock::take(dir.path(), &instance("example"), |_| {}).unwrap_err();
        assert_eq!(err.path, dir.path().join("example.lock"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
    }
}
