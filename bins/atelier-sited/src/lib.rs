//! atelier-sited: the engine's site daemon, served on a socket that systemd hands it.
//!
//! The binary's `main` parses arguments into [`Settings`] and calls [`run`]; everything a test
//! needs to drive without systemd — the router, the health payload, the settings — lives here.
//!
//! Sites (issue 4, item 2):
//! - [`slug`], [`domain`]: the grammars; [`actor`]: mutating bodies and their actor.
//! - [`manifest`]: `site.json`; [`templates`]: `templates/<id>/`; [`agents_md`]: the brief.
//! - [`git`]: the workspace repository under a constructed environment.
//! - [`reservations`]: who holds a site, and the busy reason it answers with.
//! - [`site_table`]: the provisioner's `sites.json` and the webspace proof.
//! - [`sites`]: create, get, list, delete and the disk quota; [`problem`]: the one mapping of
//!   every error to its RFC 9457 problem and `reason`.
//! - [`tree`]: descriptor-walked tree operations `atelier-fs` does not offer yet.

pub mod actor;
pub mod agents_md;
pub mod domain;
pub mod git;
mod health;
pub mod manifest;
pub mod problem;
pub mod reservations;
mod router;
mod settings;
pub mod site_table;
pub mod sites;
pub mod slug;
pub mod templates;
pub mod tree;

pub use health::{instance_fingerprint, Health};
pub use router::{Router, MAX_BODY_BYTES, SERVICE_NAME};
pub use settings::{
    RawSettings, Settings, SettingsError, DEFAULT_BASE_PATH, SERVICE_TOKEN_CREDENTIAL,
};
pub use sites::{Sites, SitesConfig};

use std::time::Duration;

use atelier_http::Listener;
use atelier_sd::listen::{sole_listener, SoleListener, SoleListenerError};
use atelier_sd::notify::Notifier;

/// How long in-flight requests may run on after SIGTERM before their connections are closed.
/// The unit's `TimeoutStopSec=` is 30 s; 25 s leaves PID 1 no reason to SIGKILL us.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(25);

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable listening socket: none passed and no `--listen`, or the wrong ones.
    #[error("{0}")]
    Listen(#[from] SoleListenerError),
    /// A socket could not be registered with the runtime.
    #[error("registering the listener: {0}")]
    Register(#[source] std::io::Error),
    /// The server failed.
    #[error("serving: {0}")]
    Serve(#[from] atelier_http::ServeError),
}

/// Serves the site daemon until SIGTERM or SIGINT, then drains and returns.
///
/// Readiness is reported to systemd only once the listener is in hand, and STOPPING as soon as
/// the shutdown signal arrives, so `systemctl` always shows what the daemon is doing.
pub async fn run(settings: Settings, notifier: Notifier) -> Result<(), RunError> {
    let listener = take_listener(&settings)?;
    let router = Router::new(&settings);
    let handler = atelier_http::with_request_log(move |request| {
        let router = router.clone();
        async move { router.handle(request).await }
    });

    let _watchdog = notifier.spawn_watchdog();
    notifier.ready_with_status(&format!("serving instance {}", settings.instance));
    tracing::info!(instance = %settings.instance, "ready");

    let stop_notifier = notifier.clone();
    let shutdown = async move {
        atelier_http::shutdown_signal().await;
        stop_notifier.stopping();
        stop_notifier.status("draining requests");
    };
    let report = atelier_http::serve(listener, handler, shutdown, DRAIN_DEADLINE).await?;
    tracing::info!(
        connections = report.connections_served,
        drained_cleanly = report.drained_cleanly,
        "stopped"
    );
    Ok(())
}

/// Takes the one listening socket systemd passed, or binds `--listen` when not activated.
fn take_listener(settings: &Settings) -> Result<Listener, RunError> {
    match sole_listener(settings.listen.as_deref(), settings::FALLBACK_SOCKET_MODE)? {
        SoleListener::Unix(l) => Listener::try_from(l),
        SoleListener::Tcp(l) => Listener::try_from(l),
    }
    .map_err(RunError::Register)
}
