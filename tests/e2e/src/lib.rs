//! Cross-binary end-to-end tests: sited, the shim, atelier-build and the test agent driven with
//! atelierctl over real sockets, served by a real nginx.
//!
//! The crate has no library code; its tests are one binary, `tests/main.rs`, with a module
//! for each journey in `tests/`:
//! - `sessions.rs`: the engine's session journey through the atelierctl library and binary.
//! - `publishing.rs`: build, publish and rollback through nginx, and the env file's limits
//!   reaching sited.
//! - `flips.rs`: 100 publish/rollback flips under continuous nginx load.
//!
//! Each test renders a small declaration with `atelier-provision render`, installs what lives
//! in the instance's own trees into a temporary directory, and runs `atelier-sited`'s binary
//! on it in `none` confinement (`tests/support/instance.rs`). They need root (nginx's workers
//! read the 0700 temporary trees as root), the Debian packages `nginx` and `git`, and the
//! workspace's binaries: run `cargo build --workspace --bins` first (`scripts/test` does).
