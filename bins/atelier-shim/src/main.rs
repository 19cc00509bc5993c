//! atelier-shim's entry point: parse the one flag, hand the rest to the library.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser};

/// The shim of every Atelier door run.
///
/// systemd starts it for each accepted connection to a door socket
/// (`atelier-<inst>-s<k>-<door>.socket`, `Accept=yes`), with the connection as stdin and
/// stdout and the unit's environment: ATELIER_DOOR (turn, build or git), ATELIER_UNIT_WORKDIR,
/// HOME, git's configuration on the git door, ATELIER_GATE_SOCKET on turn and build,
/// ATELIER_MCP_SOCKET on turn. It sends the hello, takes one spec from atelier-sited, proves
/// the unit's private network namespace, forwards 127.0.0.1:3128 (and :3129 on turn) to the
/// gate, runs the spec's argv in the workdir and relays its output, ending with an exit
/// record.
///
/// Exit codes: the program's own (128+n for signal n); 64 the unit states no door or workdir
/// (or stdin/stdout is not a socket or pipe); 65 bad spec; 70 internal failure; 71 cannot
/// listen; 74 the daemon hung up; 78 the network namespace is not in effect; 127 the program
/// could not be started. A refusal writes one line to stderr and runs nothing.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Skip the network-namespace proof and the gate forwards. Only for atelier-sited's
    /// `none` confinement mode (a laptop or CI), where sited starts the shim itself over a
    /// socketpair and there is no gate. This flag is the only way to skip them, and no unit
    /// ever renders it.
    #[arg(long)]
    unconfined: bool,
}

fn main() -> ExitCode {
    if let Some(done) =
        atelier_clidocs::generate_if_asked(Args::command, atelier_clidocs::Docs::Manual)
    {
        return atelier_clidocs::exit_code(done);
    }
    let args = Args::parse();
    ExitCode::from(atelier_shim::run_on_stdio(args.unconfined))
}
