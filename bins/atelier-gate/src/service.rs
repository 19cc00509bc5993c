//! The gate as a systemd service: settings checked, plans loaded, named listeners taken,
//! READY, serve until told to stop.
//!
//! The listeners, told apart by the file name of the path each is bound to: one per door
//! (`turn.sock`, `build.sock`), the turn door's relays (`mcp.sock`: the MCP relay, and the
//! model relay when the plan has one), and, optionally, the decisions socket
//! ([`DECISIONS_SOCKET_FILE`]) through which sited subscribes to a door's decisions. The
//! metrics socket, a socket unit of its own, is told apart by its descriptor name
//! ([`METRICS_SOCKET_NAME`](atelier_layout::names::METRICS_SOCKET_NAME)) instead, and is
//! optional too.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use atelier_daemon::problems::Problems;
use atelier_layout::files::{McpRelay, ModelRelay};
use atelier_layout::names::GATE_DECISIONS_SOCKET_FILE as DECISIONS_SOCKET_FILE;
use atelier_layout::names::GATE_MCP_SOCKET_FILE;
use atelier_proto::Door as DoorName;
use atelier_sd::listen::{listeners_from_env, ActivatedSocket, NamedSocket};
use atelier_sd::notify::Notifier;
use prometheus_client::registry::Registry;

use crate::address::Policy;
use crate::decisions::{self, Subscriptions};
use crate::mcp::McpDoor;
use crate::metrics::{self, Metrics};
use crate::model::ModelDoor;
use crate::plan::{load_plan, Plan};
use crate::relay::{self, Relays};
use crate::serve::{serve, DecisionLog, Door};

/// The env key of the deployment, the one sited reads (defined once, in layout).
pub use atelier_layout::services::env::DEPLOYMENT as DEPLOYMENT_ENV;

/// What kind of host the gate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// A provisioned host: nothing widens what counts as public.
    Production,
    /// A laptop or a test lab, which alone may use the test-only options.
    Development,
}

impl Deployment {
    /// Parses the deployment's name, `production` or `development`.
    pub fn parse(value: &str) -> Result<Deployment, SettingsError> {
        match value {
            "production" => Ok(Deployment::Production),
            "development" => Ok(Deployment::Development),
            other => Err(SettingsError::UnknownDeployment(other.to_owned())),
        }
    }
}

/// What the command line and the environment say.
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
    /// The host's deployment ([`DEPLOYMENT_ENV`]).
    pub deployment: Deployment,
}

/// Why the gate refuses to start with these settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// No `--plan`: the gate would serve nothing.
    #[error("no --plan given; the gate would serve nothing")]
    NoPlan,
    /// The deployment is neither `production` nor `development`.
    #[error("unknown deployment {0:?} in {DEPLOYMENT_ENV}: expected production or development")]
    UnknownDeployment(String),
    /// `--allow-benchmark-range` on a production host.
    #[error("benchmark_range_in_production: --allow-benchmark-range counts 198.18.0.0/15 as public and is for lab tests only; it is refused unless {DEPLOYMENT_ENV}=development")]
    BenchmarkRangeInProduction,
}

impl Settings {
    /// Refuses settings the gate must not run with, before anything is loaded, naming every
    /// problem at once.
    pub fn check(&self) -> Result<Policy, Problems<SettingsError>> {
        let mut problems = Problems::new();
        if self.plans.is_empty() {
            problems.push(SettingsError::NoPlan);
        }
        if self.allow_benchmark_range && self.deployment == Deployment::Production {
            problems.push(SettingsError::BenchmarkRangeInProduction);
        }
        problems.into_result()?;
        Ok(Policy {
            allow_benchmark_range: self.allow_benchmark_range,
        })
    }
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

/// Checks the settings, loads every plan, takes each door's listener from systemd (the one
/// bound to `<door>.sock`, and `mcp.sock` for a plan with the MCP relay, which also serves the
/// plan's model relay), the decisions socket and the metrics socket when they were passed,
/// signals READY and serves until SIGTERM or SIGINT. Fails before READY if a setting or a plan
/// is bad, a door's listener or a relay's credential is missing.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let policy = settings.check()?;
    if policy.allow_benchmark_range {
        tracing::warn!("--allow-benchmark-range: 198.18.0.0/15 counts as public (tests only)");
    }
    raise_open_file_limit();
    let mut sockets = listeners_from_env().context("reading the sockets systemd passed")?;
    // Taken by its name before the rest are sorted by file name, which would call it a
    // socket no door uses.
    let metrics_listener =
        atelier_daemon::take_metrics_listener(&mut sockets).context("taking the metrics socket")?;
    let mut sockets = by_file_name(sockets)?;
    let mut registry = Registry::with_prefix(metrics::PREFIX);
    let metrics = Metrics::new(&mut registry);
    let mut tasks = tokio::task::JoinSet::new();
    let mut logs = HashMap::new();
    let mut doors = Vec::new();
    for (door, path) in &settings.plans {
        let plan = load_plan(path, &settings.instance, settings.site, door)
            .with_context(|| format!("loading the {door} plan {}", path.display()))?;
        let Plan {
            door: name,
            socket_file,
            hosts,
            mcp,
            model,
        } = plan;
        let name = door_name(&name)?;
        let listener = tokio_listener(&mut sockets, &socket_file)?;
        let door = Arc::new(Door::new(name, hosts, policy, metrics.clone()));
        // The relay's decisions are the door's: one log, one subscription for both.
        if let Some(relay) = relay_of(mcp.as_ref(), Arc::clone(&door.log))? {
            // The plan check ties a model relay to the MCP relay, whose listener it shares.
            let model = model_relay_of(model.as_ref(), Arc::clone(&door.log), policy)?
                .map(|model| Arc::new(model.with_metrics(metrics.clone())));
            let mcp_listener = tokio_listener(&mut sockets, GATE_MCP_SOCKET_FILE)?;
            let relay = Arc::new(relay.with_metrics(metrics.clone()));
            tracing::info!(upstream = %relay.upstream, "serving the MCP relay");
            for route in model.iter().flat_map(|model| model.routes()) {
                tracing::info!(
                    api = route.api.as_str(),
                    upstream = %route.upstream,
                    "serving the model relay"
                );
            }
            let relays = Relays { mcp: relay, model };
            let served = relay::serve(mcp_listener, relays);
            tasks.spawn(async move { ("mcp".to_owned(), served.await) });
        }
        logs.insert(name, Arc::clone(&door.log));
        doors.push(Arc::clone(&door));
        tracing::info!(door = %name, hosts = door.hosts.len(), "serving");
        tasks.spawn(async move { (name.to_string(), serve(listener, door).await) });
    }
    match optional_listener(&mut sockets, DECISIONS_SOCKET_FILE)? {
        Some(listener) => {
            let subscriptions = Arc::new(Subscriptions::new(logs));
            tracing::info!("serving the decisions socket");
            tasks.spawn(async move {
                let served = decisions::serve(listener, subscriptions).await;
                ("decisions".to_owned(), served)
            });
        }
        None => tracing::info!(
            "no {DECISIONS_SOCKET_FILE} was passed: decisions go to the journal only"
        ),
    }
    for unused in sockets.keys() {
        tracing::warn!(socket = %unused, "a passed socket no door uses");
    }
    let _metrics = atelier_daemon::metrics::spawn(metrics_listener, registry);
    let notifier = Notifier::from_env();
    let open = move || -> Vec<(DoorName, usize)> {
        doors
            .iter()
            .map(|door| (door.name(), door.open.count()))
            .collect()
    };
    let shown = live_status(&open());
    notifier.ready_with_status(&shown);
    let _watchdog = notifier.spawn_watchdog();
    let status = notifier.spawn_status(STATUS_EVERY, shown, move || live_status(&open()));
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
    status.abort();
    notifier.stopping();
    notifier.status("stopping; open tunnels are cut");
    outcome
}

/// How often `STATUS=` is brought up to date with the tunnels open.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// What `systemctl status` shows while the gate serves: its tunnels open now, per door, and
/// the doors it serves.
pub fn live_status(open: &[(DoorName, usize)]) -> String {
    let serving = open
        .iter()
        .map(|(door, _)| door.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let total: usize = open.iter().map(|(_, count)| count).sum();
    let per_door = open
        .iter()
        .map(|(door, count)| format!("{door} {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    match total {
        0 => format!("idle; serving {serving}"),
        1 => format!("1 tunnel open ({per_door}); serving {serving}"),
        n => format!("{n} tunnels open ({per_door}); serving {serving}"),
    }
}

/// The passed unix listeners by the file name of the path each is bound to. systemd gives
/// every descriptor of one socket unit the same `FileDescriptorName=`, so the bound path is
/// what tells a door's listener from another's. Anything else passed is logged and closed.
fn by_file_name(sockets: Vec<NamedSocket>) -> anyhow::Result<BTreeMap<String, UnixListener>> {
    let mut listeners = BTreeMap::new();
    for passed in sockets {
        let ActivatedSocket::UnixListener(listener) = passed.socket else {
            tracing::warn!(name = %passed.name, "a passed socket that is not a unix listener");
            continue;
        };
        let address = listener
            .local_addr()
            .context("reading a passed listener's address")?;
        let Some(file) = address
            .as_pathname()
            .and_then(|path| path.file_name())
            .and_then(|file| file.to_str())
        else {
            tracing::warn!(name = %passed.name, "a passed unix listener bound to no path");
            continue;
        };
        if listeners.insert(file.to_owned(), listener).is_some() {
            anyhow::bail!("two passed listeners are bound to {file}");
        }
    }
    Ok(listeners)
}

/// The passed listener bound to `file`, which must have been passed.
fn tokio_listener(
    sockets: &mut BTreeMap<String, UnixListener>,
    file: &str,
) -> anyhow::Result<tokio::net::UnixListener> {
    optional_listener(sockets, file)?.with_context(|| {
        let passed: Vec<&String> = sockets.keys().collect();
        format!("no listener bound to {file} was passed (passed: {passed:?})")
    })
}

/// The passed listener bound to `file`, if one was passed, ready for tokio.
fn optional_listener(
    sockets: &mut BTreeMap<String, UnixListener>,
    file: &str,
) -> anyhow::Result<Option<tokio::net::UnixListener>> {
    let Some(listener) = sockets.remove(file) else {
        return Ok(None);
    };
    listener
        .set_nonblocking(true)
        .context("making the listener non-blocking")?;
    let listener =
        tokio::net::UnixListener::from_std(listener).context("registering the listener")?;
    Ok(Some(listener))
}

/// The door a plan is for; the git door has no way out, so no gate serves it.
fn door_name(name: &str) -> anyhow::Result<DoorName> {
    let door: DoorName = name.parse().context("the plan's door")?;
    if door == DoorName::Git {
        anyhow::bail!("a plan for the git door: it has no way out, so no gate serves it");
    }
    Ok(door)
}

/// The MCP relay of a plan that has one, recording into `log`, with its credential read from
/// `$CREDENTIALS_DIRECTORY` (`LoadCredential=`): the key lives in the gate alone.
fn relay_of(relay: Option<&McpRelay>, log: Arc<DecisionLog>) -> anyhow::Result<Option<McpDoor>> {
    let Some(relay) = relay else {
        return Ok(None);
    };
    let key = match &relay.credential {
        Some(name) => Some(
            atelier_sd::credentials::read_credential_string(name)
                .with_context(|| format!("reading the MCP relay's credential {name}"))?,
        ),
        None => None,
    };
    let door = McpDoor::new(&relay.upstream, key, log).context("setting up the MCP relay")?;
    Ok(Some(door))
}

/// The model relay of a plan that has one, recording into `log`, with each route's credential
/// read from `$CREDENTIALS_DIRECTORY` (`LoadCredential=`): the provider's key lives in the gate
/// alone, never in the agent's unit. Its upstreams are dialled on the addresses `policy` counts
/// as public only.
fn model_relay_of(
    relay: Option<&ModelRelay>,
    log: Arc<DecisionLog>,
    policy: Policy,
) -> anyhow::Result<Option<ModelDoor>> {
    let Some(relay) = relay else {
        return Ok(None);
    };
    let mut routes = Vec::with_capacity(relay.routes.len());
    for route in &relay.routes {
        let key = match &route.credential {
            Some(name) => Some(
                atelier_sd::credentials::read_credential_string(name).with_context(|| {
                    format!(
                        "reading the model relay's credential {name} (the {} route)",
                        route.api.as_str()
                    )
                })?,
            ),
            None => None,
        };
        routes.push((route.clone(), key));
    }
    let door = ModelDoor::new(routes, log, policy).context("setting up the model relay")?;
    Ok(Some(door))
}

/// Raises the soft open-file limit to the hard one: 128 tunnels hold a client socket, an
/// upstream socket and two pipes each, past systemd's default soft limit of 1024 with the
/// relay's connections. Failure only means the cap is reached sooner; it is logged.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(error) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(%error, "could not raise the open-file limit");
        }
    }
}

#[cfg(test)]
mod tests;
