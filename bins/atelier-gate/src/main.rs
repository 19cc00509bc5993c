//! atelier-gate's entry point: parse arguments, start logging, call the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use atelier_gate::service::{parse_plan_arg, run, Deployment, Settings};
use atelier_layout::services;
use clap::{CommandFactory as _, Parser};

/// One site's egress gate. systemd starts it from `atelier-<inst>-s<k>-gate.socket`, which
/// passes one unix listener per door (`turn.sock`, `build.sock`) and the turn door's MCP relay
/// (`mcp.sock`), told apart by the path each is bound to; each door's plan file lists the hosts
/// CONNECT may reach.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The instance the plans were rendered for.
    #[arg(long)]
    instance: String,
    /// The site number.
    #[arg(long)]
    site: u32,
    /// `<door>=<path>`: the door's plan file; repeat for each door.
    #[arg(long = "plan", value_parser = parse_plan_arg, required = true)]
    plans: Vec<(String, PathBuf)>,
    /// TEST ONLY: count 198.18.0.0/15 (RFC 2544 benchmarking) as public, for lab-network
    /// tests. The provisioner never renders this flag into a unit, and it is refused unless
    /// the deployment is `development`.
    #[arg(long)]
    allow_benchmark_range: bool,
    /// `production` (the default: what every provisioned host is) or `development`.
    #[arg(long, env = atelier_gate::service::DEPLOYMENT_ENV, default_value = "production", value_parser = |v: &str| Deployment::parse(v))]
    deployment: Deployment,
}

/// The exit status of settings the gate must not run with (sysexits' `EX_CONFIG`): its unit
/// does not restart on it, as only an operator's change helps.
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    if let Some(done) =
        atelier_clidocs::generate_if_asked(Args::command, atelier_clidocs::Docs::Manual)
    {
        return atelier_clidocs::exit_code(done);
    }
    let args = Args::parse();
    if let Err(error) = atelier_sd::logging::init("info") {
        eprintln!("atelier-gate: starting logging: {error:#}");
        return ExitCode::FAILURE;
    }
    let settings = Settings {
        instance: args.instance,
        site: args.site,
        plans: args.plans,
        allow_benchmark_range: args.allow_benchmark_range,
        deployment: args.deployment,
    };
    // Logged at error priority (`journalctl -p err`), not only printed to stderr.
    if let Err(error) = settings.check() {
        tracing::error!("{error}; nothing was started");
        return ExitCode::from(EXIT_CONFIG);
    }
    // A thread per CPU of a large host would not fit the unit's TasksMax.
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(services::GATE_WORKER_THREADS_MAX);
    let served = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .max_blocking_threads(services::GATE_BLOCKING_THREADS_MAX)
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| runtime.block_on(run(settings)));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("atelier-gate failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}
