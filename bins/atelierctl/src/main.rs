//! atelierctl's entry point: parse the command line and run it (`atelierctl --help`).

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    atelierctl::cli::run(atelierctl::cli::Cli::parse())
}
