//! atelier-provision's integration tests as one binary, each area a module below, so the
//! crate's tests are linked once rather than once per file.
//!
//! - [`canary`]: no credential's value reaches any rendered artifact.
//! - [`cli`]: the command line's verbs, exit codes and reasons, run in process.
//! - [`examples`]: the committed rendered trees are exactly what the renderer produces.
//! - [`systemd_analyze`]: every rendered unit passes `systemd-analyze verify` and scores
//!   within its `security` bound.
//! - [`webserver_configtest`]: the rendered vhosts pass `nginx -t` and `apache2 -t`.
//! - [`common`]: the committed example declaration, rendered with fixed facts.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test]: a failure is the test failing"
)]

mod canary;
mod cli;
mod common;
mod examples;
mod systemd_analyze;
mod webserver_configtest;
