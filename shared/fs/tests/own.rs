//! `Root::read_own_limited`, `Root::read_own_tail` and `Root::create_own_dir_all`: the daemon's
//! own state is read, and its own folder used, only when the daemon owns it.

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

/// The tail of a large own file: whole when it fits, else its end from the first whole line,
/// with how much was left out; refused like any read when planted or foreign.
#[test]
fn an_own_file_s_tail_starts_at_a_whole_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path()).unwrap();
    std::fs::write(dir.path().join("log"), b"one\ntwo\nthree\n").unwrap();
    let tail = |max| root.read_own_tail("log", max).unwrap().unwrap();
    assert_eq!(tail(64), (b"one\ntwo\nthree\n".to_vec(), 0), "it fits");
    assert_eq!(tail(14), (b"one\ntwo\nthree\n".to_vec(), 0), "it just fits");
    assert_eq!(tail(12), (b"two\nthree\n".to_vec(), 4), "cut inside a line");
    assert_eq!(
        tail(10),
        (b"two\nthree\n".to_vec(), 4),
        "cut at a line's start"
    );
    assert_eq!(tail(3), (Vec::new(), 14), "no whole line fits");
    assert_eq!(root.read_own_tail("absent", 8).unwrap(), None);
    std::os::unix::fs::symlink(dir.path().join("log"), dir.path().join("link")).unwrap();
    assert!(root.read_own_tail("link", 8).is_err(), "a link is refused");
    if rustix::process::geteuid().is_root() {
        let foreign = dir.path().join("foreign");
        std::fs::write(&foreign, b"x\n").unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        assert!(matches!(
            root.read_own_tail("foreign", 8),
            Err(FsError::NotOwned { .. })
        ));
    }
}

#[test]
fn an_own_folder_is_created_or_found_and_a_planted_one_refused() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let dir = tempfile::tempdir().unwrap();
    let root = Root::open(dir.path()).unwrap();
    assert!(root
        .create_own_dir_all("state", 0o710)
        .unwrap()
        .is_changed());
    assert!(!root
        .create_own_dir_all("state", 0o710)
        .unwrap()
        .is_changed());
    let mode = std::fs::metadata(dir.path().join("state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o710);
    std::os::unix::fs::symlink(dir.path().join("state"), dir.path().join("link")).unwrap();
    assert!(matches!(
        root.create_own_dir_all("link", 0o710),
        Err(FsError::SymlinkRefused { .. })
    ));
    // A folder someone else made where the daemon's goes (needs root to make; the suite runs
    // as root): refused, and left as it was.
    if rustix::process::geteuid().is_root() {
        let planted = dir.path().join("planted");
        std::fs::create_dir(&planted).unwrap();
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        assert!(matches!(
            root.create_own_dir_all("planted", 0o710),
            Err(FsError::NotOwned { .. })
        ));
        assert_eq!(std::fs::metadata(&planted).unwrap().uid(), 65534);
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
