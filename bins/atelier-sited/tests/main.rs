//! sited's integration tests, linked as one binary: each former test file is a module here,
//! sharing one `support` module (an instance's settings in `none` confinement, a socket to call
//! it on). `ctl` drives sited as its operator does, through `atelier-site-client` and the
//! atelierctl binary.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions panic on broken fixtures by design"
)]

mod bad_input;
mod builds;
mod contract;
mod ctl;
mod sessions;
mod sited;
mod support;
mod turns;
