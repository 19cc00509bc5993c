//! Change watches on directories opened through [`Root`]: whatever was read below a set of
//! watched directories stays true exactly as long as [`Changes::seen`] says nothing that
//! counts happened in any of them since its watch was added.
//!
//! A watch is added on the directory a [`Root`] holds open (through its descriptor), never on a
//! path that could be swapped between the open and the watch. The kernel queues an event
//! during the system call that makes the change, so a change completed before `seen` is asked
//! is always seen: a cache checked this way is never stale, only sometimes rebuilt when nothing
//! it holds has changed (a file written and rewritten the same).
//!
//! A watch may count only some entries of its directory ([`Changes::watch_entries`]): a reader
//! that opens one named file of a busy directory (a manifest beside the files an agent is
//! writing) is not made to read again for every write beside it. Changes to the directory
//! itself, events of a watch not known, and a queue the kernel overflowed always count.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::Root;

/// Room for a few events at a time; one event with the longest name takes 272 bytes.
const READ_BUFFER: usize = 4096;

/// A set of watched directories and whether anything that counts changed in them.
#[derive(Debug)]
pub struct Changes {
    inotify: OwnedFd,
    /// Each watch's entries whose changes count; `None`: every entry.
    counted: HashMap<i32, Option<Vec<OsString>>>,
    /// A counted change was read off the queue: once seen, always seen.
    changed: bool,
}

// === impl Changes ===

impl Changes {
    /// An empty set.
    pub fn new() -> std::io::Result<Changes> {
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        Ok(Changes {
            inotify,
            counted: HashMap::new(),
            changed: false,
        })
    }

    /// Watches the directory `dir` holds: an entry created, removed or renamed in or out, a
    /// file in it written or its attributes changed, and the directory itself changed, moved or
    /// removed. Fails when the kernel refuses another watch (the per-user limit).
    pub fn watch(&mut self, dir: &Root) -> std::io::Result<()> {
        self.add(dir, None)
    }

    /// Watches the directory `dir` holds as [`Changes::watch`] does, counting only what
    /// happens to the entries `names` (and to the directory itself). A directory watched
    /// twice counts what either watch counts.
    pub fn watch_entries(&mut self, dir: &Root, names: &[&OsStr]) -> std::io::Result<()> {
        self.add(dir, Some(names.iter().map(|&n| n.to_owned()).collect()))
    }

    fn add(&mut self, dir: &Root, names: Option<Vec<OsString>>) -> std::io::Result<()> {
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
        let wd = inotify::add_watch(&self.inotify, own, events)?;
        // The kernel keeps one watch per directory: a second add returns the first's number.
        let counted = self.counted.entry(wd).or_insert_with(|| Some(Vec::new()));
        match (counted.as_mut(), names) {
            (Some(counted), Some(names)) => counted.extend(names),
            (Some(_), None) => *counted = None,
            (None, _) => {}
        }
        Ok(())
    }

    /// Whether anything that counts changed in a watched directory since its watch was added
    /// (a queue overflow and an unanswerable question count as a change).
    pub fn seen(&mut self) -> bool {
        if !self.changed {
            self.changed = self.read_counted();
        }
        self.changed
    }

    /// Reads the queued events until one counts or none is left.
    fn read_counted(&self) -> bool {
        let mut buffer = [MaybeUninit::<u8>::uninit(); READ_BUFFER];
        let mut events = inotify::Reader::new(&self.inotify, &mut buffer);
        loop {
            match events.next() {
                Ok(event) if self.counts(&event) => return true,
                Ok(_) | Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return false,
                Err(_) => return true,
            }
        }
    }

    fn counts(&self, event: &inotify::Event<'_>) -> bool {
        if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
            return true;
        }
        match (self.counted.get(&event.wd()), event.file_name()) {
            (Some(Some(names)), Some(name)) => names
                .iter()
                .any(|counted| counted.as_bytes() == name.to_bytes()),
            // A watch of every entry, the directory itself, or a watch not known.
            _ => true,
        }
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
            let mut changes = Changes::new().unwrap();
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
        let mut changes = Changes::new().unwrap();
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
        let mut changes = Changes::new().unwrap();
        changes.watch(&Root::open(tmp.path()).unwrap()).unwrap();
        std::fs::write(tmp.path().join("sub/file"), b"x").unwrap();
        assert!(!changes.seen());
    }

    /// A watch of two entries: each change to another entry, which must not count, and each
    /// change to a counted entry or to the directory itself, which must.
    #[test]
    fn a_watch_of_some_entries_counts_exactly_those_and_the_directory() {
        let beside: &[(&str, Change)] = &[
            ("another file created", |d| {
                std::fs::write(d.join("index.html"), b"x").unwrap()
            }),
            ("another file written in place", |d| {
                std::fs::write(d.join("other"), b"changed").unwrap()
            }),
            ("another file replaced by rename", |d| {
                std::fs::write(d.join("tmp"), b"y").unwrap();
                std::fs::rename(d.join("tmp"), d.join("other")).unwrap();
            }),
            ("another file's mode changed", |d| {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::Permissions::from_mode(0o600);
                std::fs::set_permissions(d.join("other"), mode).unwrap();
            }),
            ("another file removed", |d| {
                std::fs::remove_file(d.join("other")).unwrap()
            }),
            ("a file whose name starts like a counted one", |d| {
                std::fs::write(d.join("site.json.tmp"), b"x").unwrap()
            }),
            ("another directory created", |d| {
                std::fs::create_dir(d.join("src")).unwrap()
            }),
        ];
        let counted: &[(&str, Change)] = &[
            ("the counted file written in place", |d| {
                std::fs::write(d.join("site.json"), b"other").unwrap()
            }),
            ("the counted file replaced by rename", |d| {
                std::fs::write(d.join("tmp"), b"y").unwrap();
                std::fs::rename(d.join("tmp"), d.join("site.json")).unwrap();
            }),
            ("the counted file renamed away", |d| {
                std::fs::rename(d.join("site.json"), d.join("gone")).unwrap()
            }),
            ("the counted file removed", |d| {
                std::fs::remove_file(d.join("site.json")).unwrap()
            }),
            ("the counted file's mode changed", |d| {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::Permissions::from_mode(0o600);
                std::fs::set_permissions(d.join("site.json"), mode).unwrap();
            }),
            ("a symlink planted as the counted file", |d| {
                std::fs::remove_file(d.join("site.json")).unwrap();
                std::os::unix::fs::symlink("/etc/passwd", d.join("site.json")).unwrap();
            }),
            ("a hard link made as the counted file", |d| {
                std::fs::remove_file(d.join("site.json")).unwrap();
                std::fs::hard_link(d.join("other"), d.join("site.json")).unwrap();
            }),
            ("the second counted entry created", |d| {
                std::fs::create_dir(d.join(".builder")).unwrap()
            }),
            ("the directory's own mode changed", |d| {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::Permissions::from_mode(0o700);
                std::fs::set_permissions(d, mode).unwrap();
            }),
            ("the directory itself renamed", |d| {
                std::fs::rename(d, d.with_extension("moved")).unwrap()
            }),
            ("the directory itself removed", |d| {
                std::fs::remove_dir_all(d).unwrap()
            }),
        ];
        for (name, change) in counted {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("watched");
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("site.json"), b"x").unwrap();
            std::fs::write(dir.join("other"), b"x").unwrap();
            let mut changes = Changes::new().unwrap();
            let root = Root::open(&dir).unwrap();
            changes
                .watch_entries(&root, &[OsStr::new("site.json"), OsStr::new(".builder")])
                .unwrap();
            for (other, unrelated) in beside {
                unrelated(&dir);
                assert!(!changes.seen(), "{name}: {other} was counted");
                // Put back what the next case changes.
                std::fs::write(dir.join("other"), b"x").unwrap();
                assert!(!changes.seen(), "{name}: {other} (put back) was counted");
            }
            change(&dir);
            assert!(changes.seen(), "{name}: not seen");
            assert!(changes.seen(), "{name}: seen once, then forgotten");
        }
    }

    #[test]
    fn a_directory_watched_twice_counts_what_either_watch_counts() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        let mut changes = Changes::new().unwrap();
        changes.watch_entries(&root, &[OsStr::new("a")]).unwrap();
        changes.watch_entries(&root, &[OsStr::new("b")]).unwrap();
        std::fs::write(tmp.path().join("c"), b"x").unwrap();
        assert!(!changes.seen(), "neither watch counts c");
        std::fs::write(tmp.path().join("b"), b"x").unwrap();
        assert!(changes.seen(), "the second watch counts b");

        let mut changes = Changes::new().unwrap();
        changes.watch_entries(&root, &[OsStr::new("a")]).unwrap();
        changes.watch(&root).unwrap();
        changes.watch_entries(&root, &[OsStr::new("b")]).unwrap();
        std::fs::write(tmp.path().join("c"), b"y").unwrap();
        assert!(changes.seen(), "the watch of every entry counts c");
    }

    /// More events than the kernel queues: what was dropped cannot be known, so it counts.
    #[test]
    fn an_overflowed_queue_counts_as_a_change() {
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mut changes = Changes::new().unwrap();
        changes
            .watch_entries(&Root::open(tmp.path()).unwrap(), &[OsStr::new("counted")])
            .unwrap();
        // Each new file queues two events (created, closed after writing).
        for i in 0..=max / 2 {
            std::fs::File::create(tmp.path().join(format!("f{i}"))).unwrap();
        }
        assert!(changes.seen());
    }
}
