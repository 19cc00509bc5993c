//! atelierctl's entry point: parse the command line and run it (`atelierctl --help`).

#![forbid(unsafe_code)]

use clap::CommandFactory as _;

fn main() -> std::process::ExitCode {
    if let Some(done) = atelier_clidocs::generate_if_asked(
        atelierctl::cli::Cli::command,
        atelier_clidocs::Docs::ManualAndCompletions,
    ) {
        return atelier_clidocs::exit_code(done);
    }
    atelierctl::cli::run_args(std::env::args_os())
}
