//! atelier-agent: Atelier's own coding agent, run in the turn door like the agent CLIs.
//!
//! One process is one turn: the model named on the command line, reached through the shared
//! provider drivers and tool loop, edits the workspace (the current directory) with file tools
//! that cannot leave it, and every step is written to stdout as a JSON line. Nothing is
//! started, and nothing is contacted but the provider (through the proxy the environment
//! names) and, when one is named, an MCP server whose tools the model is offered too (directly:
//! in the turn door, the gate's relay on loopback).
//!
//! Parts:
//! - [`cli`]: the command line and the turn's [`cli::Settings`] (the API key comes from
//!   `AGENT_API_KEY`, never an argument).
//! - [`events`]: the output lines, documented in one place, and [`events::Output`].
//! - [`tools`]: the [`tools::Tools`] registry, the workspace's file tools and an MCP
//!   server's tools.
//! - [`mcp`]: the MCP client those are called through.
//! - [`prompt`]: the system prompt and the brief (`AGENTS.md`).
//! - [`conversation`]: resume tokens and the conversations kept between turns.
//! - [`turn`]: one turn from setup to its last line.

pub mod cli;
pub mod conversation;
pub mod events;
pub mod mcp;
pub mod prompt;
pub mod tools;
pub mod turn;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser as _;

use crate::cli::{Cli, ProcessEnvironment, Settings};
use crate::events::{FailureReason, Output};
use crate::turn::{Ended, Failure};

/// Exit code of a turn that failed (its `error` line says why).
const EXIT_FAILED: u8 = 1;

/// Parses `args` (program name first), runs the turn in the current directory and returns
/// the exit code: 0 for a `result` line, 1 for an `error` line, 2 for a usage error (clap's).
pub fn run_args(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
    let started = Instant::now();
    let cli = Cli::parse_from(args);
    let output = Arc::new(Output::stdout());
    let ended = match Settings::from_cli(cli, &ProcessEnvironment) {
        Ok(settings) => run_turn(settings, Path::new("."), Arc::clone(&output), started),
        Err(error) => Ended::Failed(Failure {
            reason: FailureReason::Usage,
            message: error.to_string(),
            resume: None,
        }),
    };
    match ended {
        Ended::Done => ExitCode::SUCCESS,
        Ended::Failed(failure) => {
            // Nothing else can be said if stdout is gone too.
            let _ = output.line(&failure.line());
            ExitCode::from(EXIT_FAILED)
        }
        Ended::OutputClosed => ExitCode::from(EXIT_FAILED),
    }
}

/// Runs one turn on a runtime of its own: one thread, since the turn does one thing at a time
/// and a second thread would only cost memory.
fn run_turn(settings: Settings, workspace: &Path, output: Arc<Output>, started: Instant) -> Ended {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return Ended::Failed(Failure {
                reason: FailureReason::Usage,
                message: format!("the runtime: {e}"),
                resume: None,
            })
        }
    };
    runtime.block_on(turn::run(settings, workspace, output, started))
}
