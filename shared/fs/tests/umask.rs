//! Modes are set on the descriptor: under a restrictive umask, created files and directories
//! still get exactly the requested mode. A test binary of its own, because the umask is
//! process-wide and no other test may run under it.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed setup step must fail the test"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use atelier_fs::Root;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn modes_ignore_a_restrictive_umask() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let tmp = tempfile::tempdir().unwrap();
    let root = Root::open(tmp.path()).unwrap();

    root.create_dir_all("a/b", 0o755).unwrap();
    assert_eq!(mode(&tmp.path().join("a")), 0o755);
    assert_eq!(mode(&tmp.path().join("a/b")), 0o755);

    root.write_atomic("a/b/atomic", b"x", 0o640).unwrap();
    assert_eq!(mode(&tmp.path().join("a/b/atomic")), 0o640);

    root.write_in_place("a/b/in_place", b"x", 0o644).unwrap();
    assert_eq!(mode(&tmp.path().join("a/b/in_place")), 0o644);
}
