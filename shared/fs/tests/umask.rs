//! Modes are set on the descriptor: under a restrictive umask, created files and directories
//! still get exactly the requested mode. The umask is process-wide and the other tests run on
//! threads of the same process, so the test runs itself again as a child process of its own and
//! sets the umask only there.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use atelier_fs::Root;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Set in the child process: this test's body runs there, under the umask.
const CHILD_ENV: &str = "ATELIER_FS_UMASK_CHILD";

#[test]
fn modes_ignore_a_restrictive_umask() {
    if std::env::var_os(CHILD_ENV).is_some() {
        under_a_restrictive_umask();
        return;
    }
    // Only this test runs in the child: the libtest filter names it exactly.
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "umask::modes_ignore_a_restrictive_umask",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the child failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A filter that matched nothing would pass without running the body.
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}"
    );
}

fn under_a_restrictive_umask() {
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
