//! Owned writes and owner/mode reconciliation: the owner is on the file before it has its final
//! name, an existing right file is left alone, and links are refused.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use atelier_fs::{FsError, Outcome, Root};

/// Root may give a file to anyone; anyone else may only "give" it to themselves. Either way the
/// test checks the owner it asked for.
fn target_owner() -> (u32, u32) {
    let me = std::fs::metadata("/proc/self").unwrap();
    if me.uid() == 0 {
        (65534, 65534)
    } else {
        (me.uid(), me.gid())
    }
}

#[test]
fn write_atomic_owned_sets_owner_and_mode_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Root::open(tmp.path()).unwrap();
    let (uid, gid) = target_owner();

    let first = root
        .write_atomic_owned("f.conf", b"one\n", 0o640, uid, gid)
        .unwrap();
    assert_eq!(first, Outcome::Changed);
    let meta = std::fs::metadata(tmp.path().join("f.conf")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    let ino = meta.ino();

    let again = root
        .write_atomic_owned("f.conf", b"one\n", 0o640, uid, gid)
        .unwrap();
    assert_eq!(again, Outcome::Unchanged);
    assert_eq!(
        std::fs::metadata(tmp.path().join("f.conf")).unwrap().ino(),
        ino
    );

    let changed = root
        .write_atomic_owned("f.conf", b"two\n", 0o640, uid, gid)
        .unwrap();
    assert_eq!(changed, Outcome::Changed);
    assert_eq!(std::fs::read(tmp.path().join("f.conf")).unwrap(), b"two\n");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "f.conf")
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn set_owner_and_mode_reconciles_dirs_and_files_and_refuses_links() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("d")).unwrap();
    std::fs::set_permissions(tmp.path().join("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(tmp.path().join("d/f"), b"x").unwrap();
    symlink("d", tmp.path().join("link")).unwrap();
    let root = Root::open(tmp.path()).unwrap();
    let (uid, gid) = target_owner();

    assert_eq!(
        root.set_owner_and_mode("d", uid, gid, 0o2750).unwrap(),
        Outcome::Changed
    );
    let meta = std::fs::metadata(tmp.path().join("d")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));
    assert_eq!(meta.permissions().mode() & 0o7777, 0o2750);
    assert_eq!(
        root.set_owner_and_mode("d", uid, gid, 0o2750).unwrap(),
        Outcome::Unchanged
    );

    assert_eq!(
        root.set_owner_and_mode("d/f", uid, gid, 0o600).unwrap(),
        Outcome::Changed
    );
    let meta = std::fs::metadata(tmp.path().join("d/f")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);

    let err = root
        .set_owner_and_mode("link", uid, gid, 0o700)
        .unwrap_err();
    assert!(matches!(err, FsError::SymlinkRefused { .. }), "{err:?}");
    assert!(matches!(
        root.set_owner_and_mode("d/f", uid, gid, 0o4755)
            .unwrap_err(),
        FsError::InvalidMode { .. }
    ));
    assert!(matches!(
        root.set_owner_and_mode("absent", uid, gid, 0o700)
            .unwrap_err(),
        FsError::NotFound { .. }
    ));
}
