//! atelier-sited: the engine's site daemon, served on a socket that systemd hands it.
//!
//! The binary's `main` parses arguments into [`Settings`] and calls [`run`]; everything a test
//! needs to drive without systemd — the router, the health payload, the settings — lives here.
//!
//! Sites:
//! - [`requests`]: the edge where a mutating body becomes its typed request.
//! - [`domain`]: the domain grammar (slugs, ids and every wire body are `atelier-site-api`'s); [`actor`]: mutating bodies and their actor.
//! - [`manifest`]: `site.json`; [`templates`]: `templates/<id>/`; [`agents_md`]: the brief.
//! - [`git`]: the workspace repository under a constructed environment.
//! - [`reservations`]: who holds a site, and the busy reason it answers with.
//! - [`site_table`]: the provisioner's `sites.json` and the webspace proof.
//! - [`sites`]: create, get, list, delete and the disk quota; [`listing`]: the site list kept
//!   while nothing it was read from changes; [`problem`]: the one mapping of
//!   every error to its RFC 9457 problem and machine `reason` (the closed list of reasons is
//!   `atelier-site-api`'s).
//! - [`dates`]: the timestamp format every record carries.
//!
//! Sessions and runs:
//! - [`session_log`]: the JSONL event log with its `seq`, and `SessionMeta`;
//!   [`live_session`]: a session's log writer and its fan-out to live followers.
//! - [`sessions`]: live sessions, listing, admission, stop, the boot sweep and the SSE follow;
//!   [`turns`]: one turn from plan to `turn_end`, what it is given to run with, the turn slots
//!   and the running turns; [`turn_fault`]: the faults a turn ends with, the `error` event
//!   (reason, retriable, message) of each, and the state a turn ends in.
//! - [`drivers`]: the configured agent CLIs, their probes and plans (`atelier-agents`).
//! - [`runs`]: the confinement seam every turn, build and git command goes through.
//! - [`audit`]: the append-only audit log; [`metrics`]: the counters the metrics socket serves.
//!
//! Builds and publishing: [`builds`] (the build door, the log, the promote),
//! [`build_record`] (a build's record on disk) and [`publishing`] (preview, publish, releases,
//! rollback).

pub mod actor;
pub mod agents_md;
pub mod audit;
pub mod build_record;
pub mod builds;
pub mod dates;
pub mod domain;
pub mod drivers;
pub mod git;
mod health;
pub mod listing;
pub mod live_session;
pub mod manifest;
pub mod metrics;
pub mod problem;
pub mod publishing;
pub mod requests;
pub mod reservations;
mod router;
pub mod runs;
pub mod session_log;
pub mod sessions;
mod settings;
pub mod site_table;
pub mod sites;
pub mod templates;
pub mod turn_fault;
pub mod turns;

pub use health::{instance_fingerprint, Health};
pub use router::{BootError, Router, MAX_BODY_BYTES, ROUTES, SERVICE_NAME};
pub use settings::{
    AgentCredentials, AgentSettings, Confinement, RawSettings, Settings, SettingsError,
    DEFAULT_BASE_PATH, SERVICE_TOKEN_CREDENTIAL,
};
pub use sites::{Sites, SitesConfig};

use std::time::Duration;

use atelier_daemon::{DaemonError, DaemonSocket, Listeners};
use atelier_sd::notify::Notifier;
use prometheus_client::registry::Registry;

/// The prefix of every metric sited serves.
pub const METRICS_PREFIX: &str = "atelier_sited";

/// How often `STATUS=` is brought up to date with the runs in progress.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// How long shutdown waits for interrupted turns to commit and write their `turn_end`.
const TURN_WIND_DOWN: Duration = Duration::from_secs(20);

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A root or the site table failed the boot preflight.
    #[error("[preflight] {0}")]
    Preflight(String),
    /// The services could not be put together.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// The listener or the server failed.
    #[error("{0}")]
    Daemon(#[from] DaemonError),
}

/// Serves the site daemon until SIGTERM or SIGINT, then winds down and returns.
///
/// Boot: the roots preflight, the instance claim (the listener: a live socket already served
/// refuses the boot), the sweep of sessions a dead process left, then READY. Shutdown: new runs
/// are refused and live turns interrupted the moment the signal arrives (their streams then end
/// with `turn_end`), requests drain, and the turns' commits are waited for.
pub async fn run(settings: Settings, notifier: Notifier) -> Result<(), RunError> {
    preflight(&settings)?;
    let Listeners {
        api: listener,
        metrics: metrics_listener,
    } = atelier_daemon::take_listeners(DaemonSocket {
        fallback: settings.listen.as_deref(),
        fallback_mode: settings::FALLBACK_SOCKET_MODE,
    })?;
    let mut registry = Registry::with_prefix(METRICS_PREFIX);
    let metrics = metrics::Metrics::new(&mut registry);
    let router = Router::with_metrics(&settings, metrics)?;
    // Served for the daemon's whole run: the handle stops the server when dropped.
    let _metrics_server = atelier_daemon::metrics::spawn(metrics_listener, registry);
    if let Some(doors) = router.sessions().runner().systemd_doors() {
        notifier.status("reconciling the sites' runs with PID 1");
        let quarantined = doors.reconcile().await;
        tracing::info!(quarantined, "boot reconciliation with PID 1 done");
        // Off the start's path: the first connection waits for none of it.
        let doors = doors.clone();
        tokio::spawn(async move {
            let refused = doors.boot_check().await;
            tracing::info!(refused, "boot check of every site's doors done");
        });
    }
    let sites = router.sites().clone();
    let unfinished = tokio::task::spawn_blocking(move || sites.remove_unfinished_creates())
        .await
        .unwrap_or_default();
    for slug in unfinished {
        tracing::warn!(site = %slug, "removed a workspace whose create a previous run did not finish");
    }
    notifier.status("sweeping sessions left by a previous run");
    let (swept, recoveries) = router.sessions().sweep().await;
    let builds = router.builds().clone();
    let interrupted_builds = tokio::task::spawn_blocking(move || builds.sweep())
        .await
        .unwrap_or(0);
    tracing::info!(
        sessions = swept.sessions,
        recovered = swept.recovered,
        pending = swept.pending,
        interrupted_builds,
        "boot sweep done"
    );
    let sites = router.sites().clone();
    tokio::task::spawn_blocking(move || {
        let removed = sites.remove_deleted_leftovers();
        if removed > 0 {
            tracing::info!(
                removed,
                "deleted workspaces a cut-short delete left removed"
            );
        }
    });
    let sessions = router.sessions().clone();
    // The door a recovery commit goes through is started by PID 1 only once sited is ready;
    // the sites stay held `site_recovering` until then.
    tokio::spawn(sessions.clone().commit_recoveries(recoveries));
    let reservations = router.sites().reservations().clone();
    let instance = settings.instance.as_str().to_owned();
    let serving = live_status(&instance, &reservations);
    let status = notifier.spawn_status(STATUS_EVERY, serving.clone(), move || {
        live_status(&instance, &reservations)
    });
    let on_signal = {
        let sessions = sessions.clone();
        move || {
            // From here on STATUS= tells of the shutdown.
            status.abort();
            sessions.runner().refuse_new_runs();
            sessions.interrupt_all();
        }
    };
    let handler = move |request| {
        let router = router.clone();
        async move { router.handle(request).await }
    };
    atelier_daemon::serve_with_stop_hook(listener, handler, notifier, &serving, on_signal).await?;
    if !sessions.wait_idle(TURN_WIND_DOWN).await {
        tracing::warn!("some turns had not ended when sited stopped; the next boot recovers them");
    }
    Ok(())
}

/// What `systemctl status` shows while sited serves: the turns and builds running now.
pub fn live_status(instance: &str, reservations: &reservations::Reservations) -> String {
    let count = |hold, one: &str, many: &str| match reservations.count(hold) {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    };
    format!(
        "serving instance {instance}: {} and {} running",
        count(reservations::Hold::Session, "turn", "turns"),
        count(reservations::Hold::Build, "build", "builds"),
    )
}

/// The boot preflight: not root (outside development), the sites root marked for this
/// instance, the audit log appendable, the site table readable and verified.
fn preflight(settings: &Settings) -> Result<(), RunError> {
    let refuse = |msg: String| Err(RunError::Preflight(msg));
    let instance = settings.instance.as_str();
    if rustix::process::geteuid().is_root() && !settings.development {
        return refuse("sited must not run as root".to_owned());
    }
    let sites_root = &settings.sites.sites_root;
    let marker = sites_root.join(atelier_layout::paths::INSTANCE_MARKER_FILE);
    match std::fs::read_to_string(&marker) {
        Ok(text) if text.trim() == instance => {}
        Ok(text) => {
            return refuse(format!(
                "{} names instance {:?}, not {instance}",
                marker.display(),
                text.trim()
            ))
        }
        Err(e) => {
            return refuse(format!(
                "{} is not provisioned for instance {instance}: {e}",
                sites_root.display()
            ))
        }
    }
    if let Err(e) = audit::Audit::new(&settings.audit_dir).probe() {
        return refuse(format!("the audit log cannot be appended to: {e}"));
    }
    if let Err(e) = site_table::SiteTable::read(&settings.sites.site_table_file, instance) {
        return refuse(format!("the site table: {e}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reservations::{Hold, Reservations};

    #[test]
    fn the_live_status_counts_the_turns_and_builds_running() {
        let reservations = Reservations::new();
        assert_eq!(
            live_status("example", &reservations),
            "serving instance example: 0 turns and 0 builds running"
        );
        let turn = reservations.reserve("alpha", Hold::Session);
        let build = reservations.reserve("beta", Hold::Build);
        let other = reservations.reserve("gamma", Hold::Session);
        let _git = reservations.reserve("delta", Hold::Git);
        assert_eq!(
            live_status("example", &reservations),
            "serving instance example: 2 turns and 1 build running"
        );
        drop((turn, build, other));
        assert_eq!(
            live_status("example", &reservations),
            "serving instance example: 0 turns and 0 builds running"
        );
    }
}
