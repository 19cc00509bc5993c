//! The confined filesystem's integration tests as one binary, so the crate links a single test
//! executable: each former test file is a module here.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed setup step must fail the test"
)]

mod append;
mod confinement;
mod own;
mod ownership;
mod umask;
