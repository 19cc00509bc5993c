//! atelier-build's entry point: parse the plan argument, run it, exit with its status.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser};

/// Runs a site's install and build steps in the current directory (the workspace) and proves
/// the output directory. Started by atelier-shim in the site's build door with the plan sited
/// read from the manifest; stdout is a frame stream (T events, O/E step output), not text.
///
/// Exit status: 0 output verified; 20 install timed out; 21 install failed; 22 build timed
/// out; 23 build failed; 24 interrupted; 30-37 output refused (missing, symlink, not a
/// directory, outside the workspace, through a symlink, contains a symlink, a special file, a
/// hard link); 64 bad plan; 70 build error.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The build plan as JSON: {"install":[argv],"build":[argv],"output":"dist",
    /// "install_timeout_ms":N,"build_timeout_ms":N,"lifecycle_scripts":false}.
    #[arg(long)]
    plan: String,
}

fn main() -> ExitCode {
    if let Some(done) =
        atelier_clidocs::generate_if_asked(Args::command, atelier_clidocs::Docs::Manual)
    {
        return atelier_clidocs::exit_code(done);
    }
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                atelier_build::EXIT_USAGE
            } else {
                0
            });
        }
    };
    ExitCode::from(atelier_build::run_main(&args.plan))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        super::Args::command().debug_assert();
    }
}
