//! atelier-chatd: the CMS editor's AI chat runtime, served on a socket that systemd hands it,
//! with conversations in SQLite.
//!
//! The binary's `main` parses arguments into [`Settings`] and calls [`run`]; everything a test
//! drives without systemd — the router, the bridge, the chat stream, the settings — lives here.
//!
//! - [`router`]: the bearer gate, the Origin check, the route table, [`ApiError`].
//! - [`auth`]: the service token and the acting user's headers.
//! - [`conversations`]: conversations CRUD and the wire views.
//! - [`bridge`]: browser tools run through the editor.
//! - [`chat`]: the NDJSON chat stream and its persistence.
//! - [`runtime`]: the production turn runner over the shared tool loop.
//! - [`store`]: SQLite, history healing and the single-writer lease.

pub mod auth;
pub mod bridge;
pub mod chat;
pub mod conversations;
mod ids;
pub mod router;
pub mod runtime;
mod settings;
pub mod store;

pub use router::{ApiError, Router};
pub use settings::{
    normalize_origin, RawSettings, Settings, SettingsError, DEFAULT_DATABASE,
    SERVICE_TOKEN_CREDENTIAL,
};

use std::sync::Arc;
use std::time::Duration;

use atelier_http::Listener;
use atelier_sd::listen::{sole_listener, SoleListener, SoleListenerError};
use atelier_sd::notify::Notifier;

use crate::chat::TurnRunner;
use crate::store::{Store, StoreError};

/// How long in-flight requests may run on after SIGTERM before their connections are closed.
/// A chat turn can wait 90 s on a browser tool; the unit's `TimeoutStopSec=` is 30 s, and
/// 25 s leaves PID 1 no reason to SIGKILL us (an unfinished turn heals on the next load).
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(25);

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The database could not be opened or migrated.
    #[error("opening the database: {0}")]
    Store(#[from] StoreError),
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

/// Serves chatd until SIGTERM or SIGINT, then drains and returns; turns are run by `runner`.
pub async fn run(
    settings: Settings,
    runner: Arc<dyn TurnRunner>,
    notifier: Notifier,
) -> Result<(), RunError> {
    let store = Arc::new(Store::open(&settings.database)?);
    let listener = take_listener(&settings)?;
    let router = Router::new(&settings, store, runner);
    let handler = atelier_http::with_request_log(move |request| {
        let router = router.clone();
        async move { router.handle(request).await }
    });

    let _watchdog = notifier.spawn_watchdog();
    notifier.ready_with_status("serving");
    tracing::info!(database = %settings.database.display(), "ready");

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
