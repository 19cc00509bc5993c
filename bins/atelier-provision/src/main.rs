//! `atelier-provision`: the thin entry point; everything is in the library.

use std::process::ExitCode;

use atelier_provision::{cli, verbs};
use clap::CommandFactory as _;

fn main() -> ExitCode {
    if let Some(done) = atelier_clidocs::generate_if_asked(
        cli::Cli::command,
        atelier_clidocs::Docs::ManualAndCompletions,
    ) {
        return atelier_clidocs::exit_code(done);
    }
    let exit = cli::run_showing(
        std::env::args_os(),
        &verbs::render_artifacts,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
        atelier_clidocs::progress::ProgressLine::for_stderr(),
    );
    ExitCode::from(exit.code())
}
