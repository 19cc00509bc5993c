//! Shared helpers for the workspace's integration tests, so two crates that need the same
//! fixture use one copy of it rather than each keeping its own. Only test targets depend on
//! this crate (as a dev-dependency); nothing shipped links it.
//!
//! - [`bulk`]: the bulk-throughput protocol of the tunnel benchmarks, both ends, and the median
//!   of rounds they report.
//! - [`nginx`]: a real nginx on a free loopback port, serving either a root the way the
//!   provisioner's vhost does or the provisioner's rendered vhosts themselves, with its access
//!   log and a keep-alive HTTP/1.1 client.
//! - [`process`]: ending a child process with a graceful signal, a bounded wait, then SIGKILL.
//! - [`provider`]: a scripted model provider on loopback (OpenAI chat completions) for the
//!   tests that run the real atelier-agent.
//! - [`workspace`]: the workspace's built binaries and shipped templates, as a test finds them.

#![expect(
    clippy::expect_used,
    reason = "test support: a failed setup step must fail the test that asked for it"
)]

pub mod bulk;
pub mod nginx;
pub mod process;
pub mod provider;
pub mod workspace;
