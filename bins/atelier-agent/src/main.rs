//! atelier-agent's entry point: parse the command line and run one turn (`atelier-agent --help`).

use clap::CommandFactory as _;

fn main() -> std::process::ExitCode {
    if let Some(done) = atelier_clidocs::generate_if_asked(
        atelier_agent::cli::Cli::command,
        atelier_clidocs::Docs::Manual,
    ) {
        return atelier_clidocs::exit_code(done);
    }
    atelier_agent::run_args(std::env::args_os())
}
