//! atelier-lab-model's entry point: parse the command line and serve (`--help`).

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    match atelier_lab_model::run(atelier_lab_model::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("atelier-lab-model: {error}");
            ExitCode::FAILURE
        }
    }
}
