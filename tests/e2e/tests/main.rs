//! The end-to-end tests as one binary, each journey a module below, so they are linked once
//! rather than once per file. Each test renders its own instance with the real provisioner and
//! serves it with sited's real binary ([`support`]).
//!
//! - [`flips`]: publish and rollback under load serve only whole releases through nginx.
//! - [`publishing`]: a turn built, previewed, published and rolled back through nginx, and the
//!   declared settings reaching sited.
//! - [`sessions`]: the engine's session journey, from pairing to the audit log.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed step must fail the test"
)]

mod flips;
mod publishing;
mod sessions;
mod support;
