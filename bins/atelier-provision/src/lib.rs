//! atelier-provision: one declaration (`instance.json`) rendered into every host artifact, and
//! the verbs that plan, apply, check, verify and remove them.
//!
//! Parts:
//! - [`artifact`]: the rendered file type and its stamp (instance, kind, sha256 of the body).
//! - [`identities`]: site identities with the host's account files as the ledger.
//! - [`host`]: observing the host (accounts, paths, systemd, web server).
//! - [`plan`]: the pure planner; [`apply`]: the executor; [`check`]: the drift report.
//! - [`owed`]: the follow-up steps (reloads, restarts) an apply owes until they succeed.
//! - [`remove`]: decommissioning (unlink only what is stamped ours, archive, lock).
//! - [`verify`]: the serving proof.
//! - [`verbs`]: the verbs' shared pipeline; [`cli`]: the command line and exit codes.
//! - [`render`]: every host artifact of an instance, rendered from its declaration.

pub mod apply;
pub mod artifact;
pub mod check;
pub mod cli;
pub mod host;
pub mod identities;
pub mod lock;
pub mod owed;
pub mod plan;
pub mod remove;
pub mod render;
#[cfg(test)]
mod test_support;
pub mod verbs;
pub mod verify;
