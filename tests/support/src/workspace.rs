//! Where a running test finds what the workspace builds and ships: the binaries `cargo build
//! --workspace --bins` leaves beside the test executable, and the site templates in the
//! repository.

use std::path::{Path, PathBuf};

/// A binary the workspace builds (`cargo build --workspace --bins`), found beside this test's
/// own executable (`target/<profile>/deps/<test>` → `target/<profile>/<name>`); a missing one
/// fails the test with the command that builds it.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build --workspace --bins` first (scripts/test does)",
        bin.display()
    );
    bin
}

/// The shipped site templates (`templates/` at the repository's root).
pub fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../templates")
        .canonicalize()
        .expect("templates/")
}
