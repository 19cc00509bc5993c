//! `Root::read_own_limited`: the daemon's own state is read only when the daemon owns it.

use atelier_fs::{FsError, Root};

#[test]
fn own_files_are_read_foreign_planted_and_missing_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path()).unwrap();
    std::fs::write(dir.path().join("mine.json"), b"{}").unwrap();
    assert_eq!(
        root.read_own_limited("mine.json", 16).unwrap().unwrap(),
        b"{}"
    );
    assert_eq!(root.read_own_limited("absent.json", 16).unwrap(), None);
    std::os::unix::fs::symlink(dir.path().join("mine.json"), dir.path().join("link.json")).unwrap();
    assert!(
        root.read_own_limited("link.json", 16).is_err(),
        "a link is refused"
    );
    assert!(matches!(
        root.read_own_limited("mine.json", 1),
        Err(FsError::TooLarge { .. })
    ));
    // A file owned by someone else (needs root to make; the suite runs as root).
    if rustix::process::geteuid().is_root() {
        let foreign = dir.path().join("foreign.json");
        std::fs::write(&foreign, b"{}").unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        assert!(matches!(
            root.read_own_limited("foreign.json", 16),
            Err(FsError::NotOwned { .. })
        ));
    }
}

#[test]
fn apply_modes_changes_only_what_this_process_owns() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/mine"), b"x").unwrap();
    std::fs::write(dir.path().join("sub/theirs"), b"x").unwrap();
    let mode = |p: &str| {
        std::fs::metadata(dir.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    std::fs::set_permissions(
        dir.path().join("sub/theirs"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let foreign = rustix::process::geteuid().is_root();
    if foreign {
        std::os::unix::fs::chown(dir.path().join("sub/theirs"), Some(65534), Some(65534)).unwrap();
    }
    let root = Root::open(dir.path()).unwrap();
    atelier_fs::tree::apply_modes(&root, 0o750, 0o640, &[]).unwrap();
    assert_eq!(mode("sub"), 0o750);
    assert_eq!(mode("sub/mine"), 0o640);
    if foreign {
        assert_eq!(
            mode("sub/theirs"),
            0o600,
            "another identity's file is left alone"
        );
    }
}
