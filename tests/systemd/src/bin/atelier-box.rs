//! atelier-box: boots a throw-away systemd (PID 1) on an overlay of this host's root, installs
//! files, runs one script inside once the system is up, prints its output and exits with its
//! status. The demo and anyone debugging a unit by hand use it; the tests use the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use atelier_systemd_tests::SystemdBox;
use clap::Parser;

/// Run a bash script inside a fresh systemd container.
#[derive(Debug, Parser)]
struct Args {
    /// Copy a host file or folder into the container: SRC:DEST.
    #[arg(long, value_name = "SRC:DEST")]
    copy: Vec<String>,
    /// The bash script to run inside.
    #[arg(long)]
    script: PathBuf,
    /// Print the whole journal of the boot after the output.
    #[arg(long)]
    journal: bool,
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let mut sbox = SystemdBox::new();
    for copy in &args.copy {
        let (source, dest) = copy
            .split_once(':')
            .with_context(|| format!("--copy {copy:?} is not SRC:DEST"))?;
        sbox = sbox.copy(source, dest);
    }
    let script = std::fs::read_to_string(&args.script)
        .with_context(|| format!("reading {}", args.script.display()))?;
    let run = sbox.run(&script).context("running the container")?;
    print!("{}", run.output);
    if args.journal || run.status != 0 {
        eprintln!(
            "--- journal ---\n{}",
            run.journal_tail(if args.journal { usize::MAX } else { 80 })
        );
    }
    Ok(ExitCode::from(u8::try_from(run.status).unwrap_or(1)))
}
