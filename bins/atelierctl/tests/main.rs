//! atelierctl's integration tests as one binary, each area a module below, so the crate's
//! tests are linked once rather than once per file. Each test serves a real sited `Router` on
//! a socket of its own ([`support`]) and drives it through the library or the binary.
//!
//! - [`follow`]: following a session's stream, live and after the fact.
//! - [`pairing`]: the `/health` fingerprint checked before any other byte is sent.
//! - [`publishing`]: builds, preview, publish, releases and rollback through the binary.
//! - [`sites`]: sites through the library and the binary, and every failure under `--json`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test]: a failure is the test failing"
)]

mod follow;
mod pairing;
mod publishing;
mod sites;
mod support;
