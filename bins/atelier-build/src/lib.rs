//! Runs a site's install and build steps as argv inside the build door, reporting step events
//! as frames.
//!
//! atelier-build runs in the workspace (its working directory, set by the shim) the
//! [`BuildPlan`] sited passed as `--plan <json>`, and its stdout is a frame stream: `T` frames
//! carrying [`BuildEvent`](atelier_proto::BuildEvent)s and `O`/`E` frames carrying the steps'
//! output. What crosses the door (the plan, the failures' strings, sited's reader of the
//! stream) is the protocol's, in [`atelier_proto::build`]; this crate is the door's side only.
//!
//! Parts:
//! - [`scripts`]: what "lifecycle scripts off" adds to a step.
//! - [`runner`]: [`run`]: the steps, their process groups and deadlines, the leftover sweep.
//! - [`output`]: [`verify_output`], the output directory's proof and count.

pub mod output;
pub mod runner;
pub mod scripts;

use atelier_proto::build::{BuildFailure, BuildPlan, PlanError};

pub use output::{verify_output, OutputRefusal};
pub use runner::run;

/// The exit status of a command line atelier-build cannot use (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// Runs `plan_json` (the `--plan` value) in the current directory on a single-threaded runtime,
/// writing the frame stream to stdout, and returns the exit status: 0 for a verified output,
/// [`BuildFailure::exit_code`] for a failure, [`EXIT_USAGE`] for a plan that does not parse.
pub fn run_main(plan_json: &str) -> u8 {
    // The steps run as this process's user: unless this process is not dumpable, a step could
    // open its stdout (/proc/<ppid>/fd/1) and write frames of its own, a verified output's
    // size among them, or trace it. A step's own execve makes it dumpable again.
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        eprintln!("atelier-build: cannot make itself not dumpable: {e}");
        return BuildFailure::BuildError.exit_code();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("atelier-build: cannot start the runtime: {e}");
            return BuildFailure::BuildError.exit_code();
        }
    };
    runtime.block_on(async {
        let stdout = tokio::io::stdout();
        let plan = match BuildPlan::from_json(plan_json) {
            Ok(plan) => plan,
            Err(e) => {
                refuse_plan(stdout, &e).await;
                return EXIT_USAGE;
            }
        };
        let workspace = match std::env::current_dir() {
            Ok(dir) => dir,
            Err(e) => {
                eprintln!("atelier-build: cannot read the working directory: {e}");
                return BuildFailure::BuildError.exit_code();
            }
        };
        match run(&plan, &workspace, stdout).await {
            Ok(_) => 0,
            Err(failure) => failure.exit_code(),
        }
    })
}

/// Tells sited, in the stream, that its plan was refused: one diagnostic line and
/// `refused: build error`.
async fn refuse_plan(mut out: tokio::io::Stdout, error: &PlanError) {
    let note = atelier_proto::Frame::stderr(format!("atelier-build: {error}\n"));
    let refused = atelier_proto::BuildEvent::Refused {
        reason: BuildFailure::BuildError.as_str().into_owned(),
    };
    let _ = atelier_proto::write_frame(&mut out, &note).await;
    if let Ok(frame) = refused.to_frame() {
        let _ = atelier_proto::write_frame(&mut out, &frame).await;
    }
}
