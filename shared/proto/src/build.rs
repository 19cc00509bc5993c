//! The build door's protocol: what crosses between sited and atelier-build, defined once for
//! both ends.
//!
//! sited reads and validates the site manifest (the workspace is agent-writable, so
//! atelier-build never reads `site.json`) and passes a [`BuildPlan`] as `--plan <json>`
//! ([`BuildPlan::to_argv`]). atelier-build's stdout, relayed by the shim as `O` frame payloads,
//! is itself a frame stream: `T` frames carrying [`BuildEvent`](crate::BuildEvent)s and `O`/`E`
//! frames carrying the steps' output. sited reads it back with [`EventReader`] and folds it
//! with [`BuildReport`]; a build without output ends with one of [`BuildFailure`]'s strings.
//!
//! Parts:
//! - [`plan`]: [`BuildPlan`], [`split_command`] (the manifest's whitespace rule).
//! - [`failure`]: [`BuildFailure`], every failure's contract string and exit code.
//! - [`reader`]: sited's side of the stream: [`EventReader`], [`BuildReport`], [`BuildLog`].

pub mod failure;
pub mod plan;
pub mod reader;

pub use failure::BuildFailure;
pub use plan::{split_command, BuildPlan, PlanError, PLAN_FLAG};
pub use reader::{log_bytes, BuildItem, BuildLog, BuildReport, EventReader, ReadError};

/// What a proved output directory holds: the counts atelier-build sends in `output_verified`
/// and sited records as the build's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedOutput {
    /// Regular files in it, at any depth.
    pub files: u64,
    /// Their total size, in bytes.
    pub bytes: u64,
}
