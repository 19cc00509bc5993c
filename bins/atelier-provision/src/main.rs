//! `atelier-provision`: the thin entry point; everything is in the library.

use std::process::ExitCode;

use atelier_provision::{cli, verbs};

fn main() -> ExitCode {
    let exit = cli::run(
        std::env::args_os(),
        &verbs::render_artifacts,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    ExitCode::from(exit.code())
}
