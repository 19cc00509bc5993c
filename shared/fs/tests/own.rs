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
