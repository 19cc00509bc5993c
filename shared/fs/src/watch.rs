//! Change watches on directories opened through [`Root`]: whatever was read below a set of
//! watched directories stays true exactly as long as [`Changes::seen`] says nothing happened
//! in any of them since its watch was added.
//!
//! A watch is added on the directory a [`Root`] holds open (through its descriptor), never on a
//! path that could be swapped between the open and the watch. The kernel queues an event
//! during the system call that makes the change, so a change completed before `seen` is asked
//! is always seen: a cache checked this way is never stale, only sometimes rebuilt when nothing
//! it holds has changed (a file written and rewritten the same, an unrelated entry).

use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use crate::Root;

/// A set of watched directories and whether anything changed in them.
#[derive(Debug)]
pub struct Changes {
    inotify: OwnedFd,
}

// === impl Changes ===

impl Changes {
    /// An empty set.
    pub fn new() -> std::io::Result<Changes> {
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        Ok(Changes { inotify })
    }

    /// Watches the directory `dir` holds: an entry created, removed or renamed in or out, a
    /// file in it written or its attributes changed, and the directory itself changed, moved or
    /// removed. Fails when the kernel refuses another watch (the per-user limit).
    pub fn watch(&self, dir: &Root) -> std::io::Result<()> {
        // The descriptor's own link in /proc names the very directory opened, whatever
        // happened to its path since.
        let own = format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd());
        let events = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::MODIFY
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::ATTRIB
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        inotify::add_watch(&self.inotify, own, events)?;
        Ok(())
    }

    /// Whether anything changed in a watched directory since its watch was added (a queue
    /// overflow and an unanswerable question count as a change).
    pub fn seen(&self) -> bool {
        !matches!(rustix::io::ioctl_fionread(&self.inotify), Ok(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Change = fn(&std::path::Path);

    /// Each change below a watched directory, and the one beside it that must not count.
    #[test]
    fn every_kind_of_change_in_a_watched_directory_is_seen() {
        let cases: &[(&str, Change)] = &[
            ("file created", |d| {
                std::fs::write(d.join("new"), b"x").unwrap()
            }),
            ("file removed", |d| {
                std::fs::remove_file(d.join("file")).unwrap()
            }),
            ("file written in place", |d| {
                std::fs::write(d.join("file"), b"other").unwrap()
            }),
            ("file replaced by rename", |d| {
                std::fs::write(d.join("tmp"), b"y").unwrap();
                std::fs::rename(d.join("tmp"), d.join("file")).unwrap();
            }),
            ("mode changed", |d| {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::Permissions::from_mode(0o600);
                std::fs::set_permissions(d.join("file"), mode).unwrap();
            }),
            ("symlink planted", |d| {
                std::os::unix::fs::symlink("/etc/passwd", d.join("link")).unwrap()
            }),
            ("subdirectory created", |d| {
                std::fs::create_dir(d.join("sub")).unwrap()
            }),
            ("directory itself renamed", |d| {
                std::fs::rename(d, d.with_extension("moved")).unwrap()
            }),
            ("directory itself removed", |d| {
                std::fs::remove_dir_all(d).unwrap()
            }),
        ];
        for (name, change) in cases {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("watched");
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("file"), b"x").unwrap();
            let changes = Changes::new().unwrap();
            changes.watch(&Root::open(&dir).unwrap()).unwrap();
            assert!(!changes.seen(), "{name}: seen before any change");
            // Beside the watched directory and below a subdirectory of it: not watched.
            std::fs::write(tmp.path().join("beside"), b"x").unwrap();
            assert!(!changes.seen(), "{name}: a change beside it was seen");
            change(&dir);
            assert!(changes.seen(), "{name}: not seen");
        }
    }

    #[test]
    fn the_watch_follows_the_opened_directory_not_its_old_path() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("watched");
        std::fs::create_dir(&dir).unwrap();
        let opened = Root::open(&dir).unwrap();
        // The path now names another directory; the watch is on the one opened.
        std::fs::rename(&dir, tmp.path().join("elsewhere")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        let changes = Changes::new().unwrap();
        changes.watch(&opened).unwrap();
        std::fs::write(dir.join("in-the-new-one"), b"x").unwrap();
        assert!(!changes.seen());
        std::fs::write(tmp.path().join("elsewhere/in-the-opened-one"), b"x").unwrap();
        assert!(changes.seen());
    }

    #[test]
    fn a_change_below_a_subdirectory_is_not_the_watched_directory_s() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("sub")).unwrap();
        let changes = Changes::new().unwrap();
        changes.watch(&Root::open(tmp.path()).unwrap()).unwrap();
        std::fs::write(tmp.path().join("sub/file"), b"x").unwrap();
        assert!(!changes.seen());
    }
}
