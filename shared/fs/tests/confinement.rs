//! Confinement tests: every refusal is checked against a snapshot of the whole temp tree
//! (`root/` and its sibling `outside/`), so a refused operation that wrote, truncated, created
//! or re-moded anything anywhere fails.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use atelier_fs::{FileKind, FsError, Outcome, Root};

const INSIDE: &[u8] = b"inside original";
const OUTSIDE_FILE: &[u8] = b"outside file";
const SECRET: &[u8] = b"outside secret";

/// A fresh temp dir holding `root/` and a populated sibling `outside/`.
///
/// `outside/` mirrors the tail of the test paths, so a write through a link that points at
/// `outside` would land on an existing file there: `a -> outside` makes `a/b/c/file` into
/// `outside/b/c/file`, `a/b -> outside` makes it `outside/c/file`, and so on.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().to_path_buf();
        let f = Fixture { _tmp: tmp, base };
        std::fs::create_dir(f.root()).unwrap();
        for dir in ["b/c", "c"] {
            std::fs::create_dir_all(f.outside().join(dir)).unwrap();
        }
        for (rel, content) in [
            ("file", OUTSIDE_FILE),
            ("c/file", OUTSIDE_FILE),
            ("b/c/file", OUTSIDE_FILE),
            ("secret", SECRET),
        ] {
            std::fs::write(f.outside().join(rel), content).unwrap();
        }
        std::fs::set_permissions(
            f.outside().join("secret"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        f
    }

    fn root(&self) -> PathBuf {
        self.base.join("root")
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    fn open(&self) -> Root {
        Root::open(self.root()).unwrap()
    }

    fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.root().join(rel)).unwrap();
    }

    fn write(&self, rel: &str, content: &[u8]) {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Plants a symlink at `rel` (inside root) pointing at `target` (taken as is).
    fn link(&self, rel: &str, target: impl AsRef<Path>) {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    fn link_out(&self, rel: &str, outside_rel: &str) {
        self.link(rel, self.outside().join(outside_rel));
    }

    fn mode(&self, rel: &str) -> u32 {
        std::fs::symlink_metadata(self.root().join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }
}

#[derive(Debug, PartialEq)]
enum Entry {
    File { mode: u32, content: Vec<u8> },
    Dir { mode: u32 },
    Symlink { target: PathBuf },
    Other { mode: u32 },
}

/// Every entry below `dir` with its type, mode, content or link target.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Entry> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let rel = path.strip_prefix(base).unwrap().to_path_buf();
            let ty = meta.file_type();
            let item = if ty.is_symlink() {
                Entry::Symlink {
                    target: std::fs::read_link(&path).unwrap(),
                }
            } else if ty.is_dir() {
                walk(base, &path, out);
                Entry::Dir { mode }
            } else if ty.is_file() {
                Entry::File {
                    mode,
                    content: std::fs::read(&path).unwrap(),
                }
            } else {
                Entry::Other { mode }
            };
            out.insert(rel, item);
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn snapshot_diff(before: &BTreeMap<PathBuf, Entry>, after: &BTreeMap<PathBuf, Entry>) -> String {
    let mut diff = String::new();
    for (path, entry) in before {
        match after.get(path) {
            None => diff += &format!("  removed {}: {entry:?}\n", path.display()),
            Some(now) if now != entry => {
                diff += &format!("  changed {}: {entry:?} -> {now:?}\n", path.display())
            }
            Some(_) => {}
        }
    }
    for (path, entry) in after {
        if !before.contains_key(path) {
            diff += &format!("  added {}: {entry:?}\n", path.display());
        }
    }
    diff
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// One refusal: a fresh fixture is set up, the operation must fail with `reason`, and the whole
/// temp tree must be exactly as before.
struct Case {
    name: &'static str,
    setup: fn(&Fixture),
    op: fn(&Root) -> Result<(), FsError>,
    reason: &'static str,
}

// Setups for the four-level path `a/b/c/file` with a link planted at one level.
fn inside_tree(f: &Fixture) {
    f.write("a/b/c/file", INSIDE);
}
fn link_at_a(f: &Fixture) {
    f.link_out("a", "");
}
fn link_at_b(f: &Fixture) {
    f.mkdir("a");
    f.link_out("a/b", "");
}
fn link_at_c(f: &Fixture) {
    f.mkdir("a/b");
    f.link_out("a/b/c", "");
}
fn link_at_file(f: &Fixture) {
    f.mkdir("a/b/c");
    f.link_out("a/b/c/file", "file");
}
fn link_at_d(f: &Fixture) {
    f.mkdir("a/b/c");
    f.link_out("a/b/c/d", "");
}
fn dangling_link_at_file(f: &Fixture) {
    // Following it with O_CREAT would create outside/new.
    f.mkdir("a/b/c");
    f.link_out("a/b/c/file", "new");
}
fn hard_link_to_secret(f: &Fixture) {
    std::fs::hard_link(f.outside().join("secret"), f.root().join("x")).unwrap();
}
fn link_to_parent(f: &Fixture) {
    f.link("up", "..");
}
fn link_to_slash(f: &Fixture) {
    f.link("slash", "/");
}
fn link_inside_dir(f: &Fixture) {
    f.write("real/file", INSIDE);
    f.link("alias", "real");
}
fn link_inside_file(f: &Fixture) {
    f.write("real/file", INSIDE);
    f.link("link", "real/file");
}
fn dir_at_target(f: &Fixture) {
    f.write("target/kept", INSIDE);
}
fn fifo_at_target(f: &Fixture) {
    mkfifo(&f.root().join("fifo"));
}
fn file_in_the_way(f: &Fixture) {
    f.write("a/b", INSIDE);
}
fn large_file(f: &Fixture) {
    f.write("big", b"0123456789");
}
fn nothing(_: &Fixture) {}

fn cases() -> Vec<Case> {
    const P: &str = "a/b/c/file";
    let write_atomic = |r: &Root| r.write_atomic(P, b"new", 0o644).map(drop);
    let write_in_place = |r: &Root| r.write_in_place(P, b"new", 0o644);
    let read = |r: &Root| r.read(P).map(drop);
    let open_read = |r: &Root| r.open_read(P).map(drop);
    let create_dirs = |r: &Root| r.create_dir_all("a/b/c/d", 0o755).map(drop);
    vec![
        // Symlink at each level of a write path, pointing outside.
        Case {
            name: "write_atomic: link at a",
            setup: link_at_a,
            op: write_atomic,
            reason: "symlink_refused",
        },
        Case {
            name: "write_atomic: link at b",
            setup: link_at_b,
            op: write_atomic,
            reason: "symlink_refused",
        },
        Case {
            name: "write_atomic: link at c",
            setup: link_at_c,
            op: write_atomic,
            reason: "symlink_refused",
        },
        Case {
            name: "write_atomic: link at file",
            setup: link_at_file,
            op: write_atomic,
            reason: "symlink_refused",
        },
        Case {
            name: "write_atomic: dangling link at file",
            setup: dangling_link_at_file,
            op: write_atomic,
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: link at a",
            setup: link_at_a,
            op: write_in_place,
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: link at b",
            setup: link_at_b,
            op: write_in_place,
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: link at c",
            setup: link_at_c,
            op: write_in_place,
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: link at file",
            setup: link_at_file,
            op: write_in_place,
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: dangling link at file",
            setup: dangling_link_at_file,
            op: write_in_place,
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: link as single name",
            setup: |f| f.link_out("x", "secret"),
            op: |r| r.write_in_place("x", b"new", 0o644),
            reason: "symlink_refused",
        },
        Case {
            name: "create_dir_all: link at a",
            setup: link_at_a,
            op: create_dirs,
            reason: "symlink_refused",
        },
        Case {
            name: "create_dir_all: link at b",
            setup: link_at_b,
            op: create_dirs,
            reason: "symlink_refused",
        },
        Case {
            name: "create_dir_all: link at c",
            setup: link_at_c,
            op: create_dirs,
            reason: "symlink_refused",
        },
        Case {
            name: "create_dir_all: link at d",
            setup: link_at_d,
            op: create_dirs,
            reason: "symlink_refused",
        },
        // Symlink at each level of a read path.
        Case {
            name: "read: link at a",
            setup: link_at_a,
            op: read,
            reason: "symlink_refused",
        },
        Case {
            name: "read: link at b",
            setup: link_at_b,
            op: read,
            reason: "symlink_refused",
        },
        Case {
            name: "read: link at c",
            setup: link_at_c,
            op: read,
            reason: "symlink_refused",
        },
        Case {
            name: "read: link at file",
            setup: link_at_file,
            op: read,
            reason: "symlink_refused",
        },
        Case {
            name: "open_read: link at a",
            setup: link_at_a,
            op: open_read,
            reason: "symlink_refused",
        },
        Case {
            name: "open_read: link at b",
            setup: link_at_b,
            op: open_read,
            reason: "symlink_refused",
        },
        Case {
            name: "open_read: link at c",
            setup: link_at_c,
            op: open_read,
            reason: "symlink_refused",
        },
        Case {
            name: "open_read: link at file",
            setup: link_at_file,
            op: open_read,
            reason: "symlink_refused",
        },
        // Other entry points walk the same way.
        Case {
            name: "remove_file: link at a",
            setup: link_at_a,
            op: |r| r.remove_file("a/file").map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "rename_file: link at b",
            setup: link_at_b,
            op: |r| r.rename_file("a/b/c/file", "a/b/c/moved"),
            reason: "symlink_refused",
        },
        Case {
            name: "rename_file: link at file",
            setup: link_at_file,
            op: |r| r.rename_file("a/b/c/file", "a/b/c/moved"),
            reason: "not_regular_file",
        },
        Case {
            name: "metadata: link at b",
            setup: link_at_b,
            op: |r| r.metadata("a/b/c/file").map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "open_dir: link at c",
            setup: link_at_c,
            op: |r| r.open_dir("a/b/c").map(drop),
            reason: "symlink_refused",
        },
        // Hard link to a file outside.
        Case {
            name: "write_in_place: hard link to outside/secret",
            setup: hard_link_to_secret,
            op: |r| r.write_in_place("x", b"pwned", 0o644),
            reason: "hard_link_refused",
        },
        Case {
            name: "read: hard link to outside/secret",
            setup: hard_link_to_secret,
            op: |r| r.read("x").map(drop),
            reason: "hard_link_refused",
        },
        Case {
            name: "open_read: hard link to outside/secret",
            setup: hard_link_to_secret,
            op: |r| r.open_read("x").map(drop),
            reason: "hard_link_refused",
        },
        // Lexical escapes.
        Case {
            name: "write_atomic: ../outside/file",
            setup: inside_tree,
            op: |r| r.write_atomic("../outside/file", b"new", 0o644).map(drop),
            reason: "parent_component",
        },
        Case {
            name: "write_in_place: a/../../outside/file",
            setup: inside_tree,
            op: |r| r.write_in_place("a/../../outside/file", b"new", 0o644),
            reason: "parent_component",
        },
        Case {
            name: "create_dir_all: ../outside/new",
            setup: inside_tree,
            op: |r| r.create_dir_all("../outside/new", 0o755).map(drop),
            reason: "parent_component",
        },
        Case {
            name: "remove_file: ../outside/secret",
            setup: inside_tree,
            op: |r| r.remove_file("../outside/secret").map(drop),
            reason: "parent_component",
        },
        Case {
            name: "rename_file: onto ../outside/secret",
            setup: inside_tree,
            op: |r| r.rename_file("a/b/c/file", "../outside/secret"),
            reason: "parent_component",
        },
        Case {
            name: "read: /etc/passwd",
            setup: inside_tree,
            op: |r| r.read("/etc/passwd").map(drop),
            reason: "absolute_path",
        },
        Case {
            name: "write_atomic: absolute path into outside",
            setup: inside_tree,
            op: |r| {
                r.write_atomic("/tmp/atelier-fs-must-not-exist", b"new", 0o644)
                    .map(drop)
            },
            reason: "absolute_path",
        },
        Case {
            name: "write_atomic: empty path",
            setup: inside_tree,
            op: |r| r.write_atomic("", b"new", 0o644).map(drop),
            reason: "empty_path",
        },
        // Escapes through a link in the middle.
        Case {
            name: "write_atomic: through link to ..",
            setup: link_to_parent,
            op: |r| r.write_atomic("up/outside/file", b"new", 0o644).map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: through link to ..",
            setup: link_to_parent,
            op: |r| r.write_in_place("up/outside/secret", b"new", 0o644),
            reason: "symlink_refused",
        },
        Case {
            name: "create_dir_all: through link to ..",
            setup: link_to_parent,
            op: |r| r.create_dir_all("up/outside/new", 0o755).map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "read: through link to /",
            setup: link_to_slash,
            op: |r| r.read("slash/etc/passwd").map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "open_read: through link to /",
            setup: link_to_slash,
            op: |r| r.open_read("slash/etc/passwd").map(drop),
            reason: "symlink_refused",
        },
        // Links pointing inside the root are refused too.
        Case {
            name: "read: inside link as directory",
            setup: link_inside_dir,
            op: |r| r.read("alias/file").map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "write_in_place: inside link as directory",
            setup: link_inside_dir,
            op: |r| r.write_in_place("alias/file", b"new", 0o644),
            reason: "symlink_refused",
        },
        Case {
            name: "read: inside link as file",
            setup: link_inside_file,
            op: |r| r.read("link").map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "write_atomic: inside link as file",
            setup: link_inside_file,
            op: |r| r.write_atomic("link", b"new", 0o644).map(drop),
            reason: "symlink_refused",
        },
        Case {
            name: "create_dir_all: inside link as directory",
            setup: link_inside_dir,
            op: |r| r.create_dir_all("alias/sub", 0o755).map(drop),
            reason: "symlink_refused",
        },
        // Wrong entry types.
        Case {
            name: "write_atomic: directory at target",
            setup: dir_at_target,
            op: |r| r.write_atomic("target", b"new", 0o644).map(drop),
            reason: "not_regular_file",
        },
        Case {
            name: "write_in_place: directory at target",
            setup: dir_at_target,
            op: |r| r.write_in_place("target", b"new", 0o644),
            reason: "not_regular_file",
        },
        Case {
            name: "read: directory at target",
            setup: dir_at_target,
            op: |r| r.read("target").map(drop),
            reason: "not_regular_file",
        },
        Case {
            name: "remove_file: directory at target",
            setup: dir_at_target,
            op: |r| r.remove_file("target").map(drop),
            reason: "not_regular_file",
        },
        Case {
            name: "read: FIFO does not hang",
            setup: fifo_at_target,
            op: |r| r.read("fifo").map(drop),
            reason: "not_regular_file",
        },
        Case {
            name: "write_in_place: FIFO does not hang",
            setup: fifo_at_target,
            op: |r| r.write_in_place("fifo", b"new", 0o644),
            reason: "not_regular_file",
        },
        Case {
            name: "write_atomic: FIFO at target",
            setup: fifo_at_target,
            op: |r| r.write_atomic("fifo", b"new", 0o644).map(drop),
            reason: "not_regular_file",
        },
        Case {
            name: "create_dir_all: file in the way",
            setup: file_in_the_way,
            op: |r| r.create_dir_all("a/b/c", 0o755).map(drop),
            reason: "not_directory",
        },
        Case {
            name: "write_atomic: file as a parent",
            setup: file_in_the_way,
            op: |r| r.write_atomic("a/b/c", b"new", 0o644).map(drop),
            reason: "not_directory",
        },
        // Limits, modes, missing parents.
        Case {
            name: "read_limited: over the limit",
            setup: large_file,
            op: |r| r.read_limited("big", 9).map(drop),
            reason: "too_large",
        },
        Case {
            name: "write_atomic: set-user-ID mode",
            setup: nothing,
            op: |r| r.write_atomic("f", b"new", 0o4755).map(drop),
            reason: "invalid_mode",
        },
        Case {
            name: "write_in_place: sticky mode",
            setup: nothing,
            op: |r| r.write_in_place("f", b"new", 0o1644),
            reason: "invalid_mode",
        },
        Case {
            name: "create_dir_all: set-user-ID mode",
            setup: nothing,
            op: |r| r.create_dir_all("d", 0o4755).map(drop),
            reason: "invalid_mode",
        },
        Case {
            name: "write_atomic: missing parent is not created",
            setup: nothing,
            op: |r| r.write_atomic("no/such/f", b"new", 0o644).map(drop),
            reason: "not_found",
        },
    ]
}

#[test]
fn refusals_change_nothing() {
    let mut failures = Vec::new();
    for case in cases() {
        let f = Fixture::new();
        (case.setup)(&f);
        let before = snapshot(&f.base);
        let root = f.open();
        let got = (case.op)(&root);
        let after = snapshot(&f.base);
        match got {
            Err(e) if e.reason() == case.reason => {
                // The message names the refusal in prose too.
                assert!(!e.to_string().is_empty());
            }
            Err(e) => failures.push(format!(
                "{}: expected {}, got {} ({e})",
                case.name,
                case.reason,
                e.reason()
            )),
            Ok(()) => failures.push(format!("{}: expected {}, got Ok", case.name, case.reason)),
        }
        let diff = snapshot_diff(&before, &after);
        if !diff.is_empty() {
            failures.push(format!("{}: the tree changed:\n{diff}", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn refusal_messages_name_the_offending_level() {
    let f = Fixture::new();
    link_at_b(&f);
    let err = f
        .open()
        .write_atomic("a/b/c/file", b"x", 0o644)
        .unwrap_err();
    assert!(
        matches!(&err, FsError::SymlinkRefused { path } if path == Path::new("a/b")),
        "{err:?}"
    );
    assert!(err.to_string().contains("a/b"), "{err}");
}

#[test]
fn write_atomic_replaces_content_and_mode_without_leftovers() {
    let f = Fixture::new();
    f.write("d/f", b"old content that is longer");
    let root = f.open();
    assert_eq!(
        root.write_atomic("d/f", b"new", 0o640).unwrap(),
        Outcome::Changed
    );
    assert_eq!(std::fs::read(f.root().join("d/f")).unwrap(), b"new");
    assert_eq!(f.mode("d/f"), 0o640);
    // 0o666 survives only if the mode is set on the descriptor, not by a umask-trimmed open.
    assert_eq!(
        root.write_atomic("d/g", b"fresh", 0o666).unwrap(),
        Outcome::Changed
    );
    assert_eq!(f.mode("d/g"), 0o666);
    let names: Vec<_> = std::fs::read_dir(f.root().join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(names, ["f", "g"]);
}

#[test]
fn write_atomic_skips_identical_content() {
    let f = Fixture::new();
    let root = f.open();
    assert!(root.write_atomic("f", b"same", 0o644).unwrap().is_changed());
    let ino = std::fs::metadata(f.root().join("f")).unwrap().ino();
    assert_eq!(
        root.write_atomic("f", b"same", 0o644).unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(std::fs::metadata(f.root().join("f")).unwrap().ino(), ino);
    // A different mode or content is a change.
    assert_eq!(
        root.write_atomic("f", b"same", 0o600).unwrap(),
        Outcome::Changed
    );
    assert_eq!(f.mode("f"), 0o600);
    assert_eq!(
        root.write_atomic("f", b"Same", 0o600).unwrap(),
        Outcome::Changed
    );
    assert_eq!(std::fs::read(f.root().join("f")).unwrap(), b"Same");
}

#[test]
fn write_atomic_over_a_hard_link_leaves_the_other_name_alone() {
    let f = Fixture::new();
    hard_link_to_secret(&f);
    let outside_before = snapshot(&f.outside());
    let root = f.open();
    assert_eq!(
        root.write_atomic("x", b"replaced", 0o644).unwrap(),
        Outcome::Changed
    );
    assert_eq!(std::fs::read(f.root().join("x")).unwrap(), b"replaced");
    assert_eq!(std::fs::read(f.outside().join("secret")).unwrap(), SECRET);
    assert_eq!(snapshot_diff(&outside_before, &snapshot(&f.outside())), "");
}

#[test]
fn write_in_place_keeps_the_inode_and_truncates() {
    let f = Fixture::new();
    f.write("f", b"a long original content");
    std::fs::set_permissions(f.root().join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let ino = std::fs::metadata(f.root().join("f")).unwrap().ino();
    let root = f.open();
    root.write_in_place("f", b"short", 0o644).unwrap();
    assert_eq!(std::fs::read(f.root().join("f")).unwrap(), b"short");
    assert_eq!(std::fs::metadata(f.root().join("f")).unwrap().ino(), ino);
    // An existing file keeps its mode.
    assert_eq!(f.mode("f"), 0o600);
    // A new one gets exactly the requested mode.
    root.write_in_place("new", b"n", 0o666).unwrap();
    assert_eq!(f.mode("new"), 0o666);
    assert_eq!(std::fs::read(f.root().join("new")).unwrap(), b"n");
}

#[test]
fn create_dir_all_modes_new_levels_and_never_existing_ones() {
    let f = Fixture::new();
    f.mkdir("d");
    std::fs::set_permissions(f.root().join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = f.open();
    assert_eq!(
        root.create_dir_all("d/sub/deeper", 0o755).unwrap(),
        Outcome::Changed
    );
    assert_eq!(f.mode("d"), 0o700);
    assert_eq!(f.mode("d/sub"), 0o755);
    assert_eq!(f.mode("d/sub/deeper"), 0o755);
    assert_eq!(
        root.create_dir_all("d/sub/deeper", 0o711).unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(f.mode("d/sub/deeper"), 0o755);
    // 0o777 survives only if set on the descriptor; set-group-ID is allowed on directories.
    root.create_dir_all("wide", 0o777).unwrap();
    assert_eq!(f.mode("wide"), 0o777);
    root.create_dir_all("shared", 0o2770).unwrap();
    assert_eq!(f.mode("shared"), 0o2770);
}

#[test]
fn read_and_open_read_return_inside_content() {
    let f = Fixture::new();
    inside_tree(&f);
    let root = f.open();
    assert_eq!(root.read("a/b/c/file").unwrap(), INSIDE);
    assert_eq!(root.read("./a/./b/c/file").unwrap(), INSIDE);
    let limit = u64::try_from(INSIDE.len()).unwrap();
    assert_eq!(root.read_limited("a/b/c/file", limit).unwrap(), INSIDE);
    let mut content = Vec::new();
    root.open_read("a/b/c/file")
        .unwrap()
        .read_to_end(&mut content)
        .unwrap();
    assert_eq!(content, INSIDE);
    let sub = root.open_dir("a/b").unwrap();
    assert_eq!(sub.read("c/file").unwrap(), INSIDE);
    assert_eq!(sub.path(), f.root().join("a/b"));
    assert_eq!(root.read("a/missing").unwrap_err().reason(), "not_found");
}

#[test]
fn remove_file_reports_whether_it_removed() {
    let f = Fixture::new();
    inside_tree(&f);
    f.link_out("link", "secret");
    let root = f.open();
    assert!(root.remove_file("a/b/c/file").unwrap());
    assert!(!root.remove_file("a/b/c/file").unwrap());
    assert!(!root.remove_file("no/such/parent").unwrap());
    // A link is removed itself; its target stays.
    assert!(root.remove_file("link").unwrap());
    assert!(!f.root().join("link").exists());
    assert_eq!(std::fs::read(f.outside().join("secret")).unwrap(), SECRET);
}

#[test]
fn metadata_does_not_follow() {
    let f = Fixture::new();
    inside_tree(&f);
    f.link_out("link", "secret");
    mkfifo(&f.root().join("fifo"));
    let root = f.open();
    let file = root.metadata("a/b/c/file").unwrap();
    assert_eq!(file.kind, FileKind::File);
    assert_eq!(file.len, u64::try_from(INSIDE.len()).unwrap());
    assert_eq!(file.links, 1);
    assert_eq!(file.mode, f.mode("a/b/c/file"));
    assert_eq!(root.metadata("a").unwrap().kind, FileKind::Dir);
    assert_eq!(root.metadata("link").unwrap().kind, FileKind::Symlink);
    assert_eq!(root.metadata("fifo").unwrap().kind, FileKind::Other);
    assert_eq!(root.metadata("nope").unwrap_err().reason(), "not_found");
}

#[test]
fn root_that_is_a_symlink_is_refused_by_default() {
    let f = Fixture::new();
    inside_tree(&f);
    let alias = f.base.join("alias");
    symlink(f.root(), &alias).unwrap();
    let err = Root::open(&alias).unwrap_err();
    assert_eq!(err.reason(), "symlink_refused", "{err}");
    let root = Root::open_following_symlink(&alias).unwrap();
    assert_eq!(root.read("a/b/c/file").unwrap(), INSIDE);
    let err = Root::open(f.root().join("a/b/c/file")).unwrap_err();
    assert_eq!(err.reason(), "not_directory", "{err}");
    let err = Root::open(f.base.join("missing")).unwrap_err();
    assert_eq!(err.reason(), "not_found", "{err}");
}

/// A racer keeps swapping `d` between a real directory and a link to `outside` (atomically,
/// with `RENAME_EXCHANGE`) while we read and write through `d`. Every operation must either
/// act inside the root or be refused; `outside/` must end byte-identical.
#[test]
fn racing_renames_never_reach_outside() {
    let f = Fixture::new();
    f.write("d/file", INSIDE);
    f.link_out("alt", "");
    let outside_before = snapshot(&f.outside());
    let root = f.open();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, swaps, base) = (stop.clone(), swaps.clone(), f.root());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    base.join("d"),
                    rustix::fs::CWD,
                    base.join("alt"),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut done, mut refused) = (0u32, 0u32);
    for i in 0..2000 {
        let result = match i % 4 {
            0 => root
                .read("d/file")
                .map(|content| assert_eq!(content, INSIDE)),
            1 => root.write_in_place("d/file", INSIDE, 0o644),
            2 => root.write_atomic("d/file", INSIDE, 0o644).map(drop),
            _ => root.create_dir_all("d/c/sub", 0o755).map(drop),
        };
        match result {
            Ok(()) => done += 1,
            Err(e) => {
                assert_eq!(e.reason(), "symlink_refused", "{e}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 0);
    assert_eq!(done + refused, 2000);
    assert_eq!(snapshot_diff(&outside_before, &snapshot(&f.outside())), "");
}

#[test]
fn rename_file_moves_within_the_tree_and_never_replaces() {
    let f = Fixture::new();
    f.write("a/file", INSIDE);
    f.write("a/taken", b"keep");
    let root = Root::open(f.root()).unwrap();
    let refused = root.rename_file("a/file", "a/taken").unwrap_err();
    assert_eq!(refused.reason(), "io_error", "{refused}");
    assert_eq!(std::fs::read(f.root().join("a/taken")).unwrap(), b"keep");
    root.rename_file("a/file", "a/moved").unwrap();
    assert_eq!(std::fs::read(f.root().join("a/moved")).unwrap(), INSIDE);
    assert!(!f.root().join("a/file").exists());
    let missing = root.rename_file("a/file", "a/again").unwrap_err();
    assert_eq!(missing.reason(), "not_found", "{missing}");
}
