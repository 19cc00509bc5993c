//! `Root::open_append`: appends land at the end of the tree's own regular file; a planted
//! link, hard link or directory is refused before anything is written.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use atelier_fs::Root;

#[test]
fn appends_create_with_the_mode_and_keep_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path()).unwrap();
    root.open_append("log", 0o600)
        .unwrap()
        .write_all(b"one\n")
        .unwrap();
    root.open_append("log", 0o600)
        .unwrap()
        .write_all(b"two\n")
        .unwrap();
    let path = dir.path().join("log");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn planted_entries_are_refused_and_nothing_outside_changes() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::write(&outside, "secret\n").unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
    std::fs::hard_link(&outside, tree.join("hard")).unwrap();
    std::fs::create_dir(tree.join("dir")).unwrap();
    std::os::unix::fs::symlink(dir.path(), tree.join("up")).unwrap();
    let root = Root::open(&tree).unwrap();
    let cases = [
        ("symlink to a file outside", "link", "symlink_refused"),
        ("hard link to a file outside", "hard", "hard_link_refused"),
        ("a directory", "dir", "not_regular_file"),
        (
            "through a linked directory",
            "up/outside",
            "symlink_refused",
        ),
    ];
    for (name, rel, reason) in cases {
        let err = root.open_append(rel, 0o600).unwrap_err();
        assert_eq!(err.reason(), reason, "case {name}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
}
