//! The gate as a systemd service: plans loaded, named listeners taken, READY, serve until told
//! to stop.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use atelier_sd::listen::{listeners_from_env, take_unix_listener};
use atelier_sd::notify::Notifier;

use crate::address::Policy;
use crate::plan::load_plan;
use crate::serve::{serve, Door};

/// What the command line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The instance the plans were rendered for.
    pub instance: String,
    /// The site number.
    pub site: u32,
    /// Each door with its plan file; the door also names its listening socket.
    pub plans: Vec<(String, PathBuf)>,
    /// Test only: treat 198.18.0.0/15 as public. The provisioner never renders it.
    pub allow_benchmark_range: bool,
}

/// Parses one `--plan <door>=<path>` value.
pub fn parse_plan_arg(value: &str) -> Result<(String, PathBuf), String> {
    match value.split_once('=') {
        Some((door, path)) if !door.is_empty() && !path.is_empty() => {
            Ok((door.to_owned(), PathBuf::from(path)))
        }
        _ => Err(format!("expected <door>=<path>, got {value:?}")),
    }
}

/// Loads every plan, takes each door's listener from systemd (`FileDescriptorName=<door>`),
/// signals READY and serves until SIGTERM or SIGINT. Fails before READY if a plan is bad or
/// a listener is missing.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    if settings.plans.is_empty() {
        anyhow::bail!("no --plan given; the gate would serve nothing");
    }
    let policy = Policy {
        allow_benchmark_range: settings.allow_benchmark_range,
    };
    if policy.allow_benchmark_range {
        tracing::warn!("--allow-benchmark-range: 198.18.0.0/15 counts as public (tests only)");
    }
    let mut sockets = listeners_from_env().context("reading the sockets systemd passed")?;
    let mut tasks = tokio::task::JoinSet::new();
    for (door, path) in &settings.plans {
        let plan = load_plan(path, &settings.instance, settings.site, door)
            .with_context(|| format!("loading the {door} plan {}", path.display()))?;
        let listener = take_unix_listener(&mut sockets, door)
            .with_context(|| format!("taking the listener named {door}"))?;
        listener
            .set_nonblocking(true)
            .context("making the listener non-blocking")?;
        let listener =
            tokio::net::UnixListener::from_std(listener).context("registering the listener")?;
        let door = Arc::new(Door::new(&plan.door, plan.hosts, policy));
        tracing::info!(door = %door.name, hosts = door.hosts.len(), "serving");
        tasks.spawn(async move {
            let name = door.name.clone();
            (name, serve(listener, door).await)
        });
    }
    for unused in &sockets {
        tracing::warn!(name = %unused.name, "a passed socket no door uses");
    }
    let notifier = Notifier::from_env();
    notifier.ready();
    let _watchdog = notifier.spawn_watchdog();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let outcome = tokio::select! {
        _ = terminate.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        Some(ended) = tasks.join_next() => match ended {
            Ok((door, Err(error))) => Err(anyhow::anyhow!("the {door} listener failed: {error}")),
            Ok((door, Ok(()))) => Err(anyhow::anyhow!("the {door} listener stopped")),
            Err(error) => Err(anyhow::anyhow!("a listener task failed: {error}")),
        },
    };
    notifier.stopping();
    outcome
}

#[cfg(test)]
mod tests;
