//! atelier-gate's entry point: parse arguments, start logging, call the library.

use std::path::PathBuf;

use anyhow::Context as _;
use atelier_gate::service::{parse_plan_arg, run, Deployment, Settings};
use clap::Parser;

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    atelier_sd::logging::init("info").context("starting logging")?;
    run(Settings {
        instance: args.instance,
        site: args.site,
        plans: args.plans,
        allow_benchmark_range: args.allow_benchmark_range,
        deployment: args.deployment,
    })
    .await
}
