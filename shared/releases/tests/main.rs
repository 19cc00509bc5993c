//! The releases store's integration tests as one binary, so the crate links a single test
//! executable: each former test file is a module here, and `support` is what they share (a
//! webspace in a temporary directory, tree snapshots); the real nginx is `atelier-test-support`'s.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed step must fail the test"
)]

mod support;

mod crash;
mod nginx;
mod releases;
