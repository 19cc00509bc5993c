//! atelier-chatd: the CMS editor's AI chat runtime, served on a socket that systemd hands it,
//! with conversations in SQLite.
//!
//! The binary's `main` parses arguments into [`Settings`] and calls [`run`]; everything a test
//! drives without systemd — the router, the bridge, the chat stream, the settings — lives here.
//!
//! - [`router`]: the bearer gate, the Origin check, the route table; it matches and dispatches.
//! - `state`: what every handler shares — the application state, the route prefix, and
//!   store calls run off the async threads.
//! - [`error`]: [`ApiError`], every way a request fails, and its one mapping to status and body.
//! - [`auth`]: the service token, the Origin allowlist, and the CMS's answer about a session
//!   cookie, cached.
//! - [`caller`]: the acting user, the capabilities routes require, and the session cookie.
//! - [`cms`]: the CMS on loopback: its session check, the tool results for its bridges, and
//!   its content read as the chatting user.
//! - [`conversations`]: conversations CRUD and the wire views.
//! - [`bridge`]: browser tools run through the editor.
//! - [`turn`]: what the chat stream hands a turn runner and what the runner answers.
//! - [`chat`]: the NDJSON chat stream and its persistence.
//! - [`images`]: user images checked, decoded and re-encoded.
//! - [`runtime`]: the turn runner over the shared tool loop.
//! - [`provider_ids`]: the provider ids and the providers they name.
//! - [`providers`]: stored credentials resolved into drivers; the production providers.
//! - [`master_key`]: AES-256-GCM sealing of provider secrets.
//! - [`credentials`], [`defaults`], [`catalogue`]: the AI settings routes.
//! - [`pricing`]: the pricing memo and its durable copy.
//! - [`tools`]: the site and content tool catalogues, their checks and server-side reads.
//! - [`prompts`]: the per-scope system prompts.
//! - [`metrics`]: the turn, provider, latency, token and cost metrics.
//! - [`audit`]: usage rollups in the viewer's time zone; the audit log's writes and reads.
//! - [`store`]: SQLite, history healing and the single-writer lease.
//! - `limits`, `encode`, `ids`: the body limit the chat and the bridge share, percent-encoding
//!   for ids in URL paths, and fresh ids.
//!
//! The modules import each other without circles. This file wires [`Router`], and no other
//! module imports [`router`]. The router imports the handler modules (`audit`, `bridge`,
//! `chat`, `conversations`, `credentials`, `defaults`, `catalogue`); they and the router take
//! what they share from `state` and fail with [`error`]. `state` holds the authenticator, the
//! bridge registry, the turn runner, the providers and the metrics, but imports no handler:
//! the handlers take from it, never the other way. Below `state`, [`turn`] is the contract the
//! chat stream and [`runtime`] meet at, so neither imports the other's implementation;
//! [`providers`] implements the runtime's providers; [`metrics`] reads only [`provider_ids`]
//! and the store. [`auth`] asks [`cms`], which takes the [`caller`] types and fails with
//! [`error`]'s CMS problems; [`error`] imports only the store's error type, and nothing below
//! the handlers imports `settings`.

pub mod audit;
pub mod auth;
pub mod bridge;
pub mod caller;
pub mod catalogue;
pub mod chat;
pub mod cms;
pub mod conversations;
pub mod credentials;
pub mod defaults;
mod encode;
pub mod error;
mod ids;
pub mod images;
mod limits;
pub mod master_key;
pub mod metrics;
pub mod pricing;
pub mod prompts;
pub mod provider_ids;
pub mod providers;
pub mod router;
pub mod runtime;
mod settings;
mod state;
pub mod store;
pub mod tools;
pub mod turn;

pub use auth::normalize_origin;
pub use error::ApiError;
pub use router::Router;
pub use settings::{
    RawSettings, Settings, SettingsError, DEFAULT_DATABASE, SERVICE_TOKEN_CREDENTIAL,
};

use std::sync::Arc;
use std::time::Duration;

use atelier_daemon::{DaemonError, DaemonSocket, Listeners};
use atelier_sd::notify::Notifier;
use prometheus_client::registry::Registry;

use crate::metrics::Metrics;
use crate::providers::{Services, StoredProviders};
use crate::runtime::LoopRunner;
use crate::store::{Store, StoreError};
use crate::turn::TurnRunner;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The database could not be opened or migrated.
    #[error("opening the database: {0}")]
    Store(#[from] StoreError),
    /// The listener or the server failed.
    #[error("{0}")]
    Daemon(#[from] DaemonError),
    /// The providers' HTTP client could not be built.
    #[error("building the providers' HTTP client: {0}")]
    HttpClient(#[from] reqwest::Error),
}

/// Serves chatd until SIGTERM or SIGINT, then drains and returns. Turns run on each
/// conversation's stored credential.
pub async fn run(settings: Settings, notifier: Notifier) -> Result<(), RunError> {
    let store = Arc::new(Store::open(&settings.database)?);
    // No turn can hold a lease yet: every call still open is a dead process's.
    let closed = store.finalize_interrupted_calls()?;
    if closed > 0 {
        tracing::info!(
            closed,
            "tool calls left open by an earlier process closed as interrupted"
        );
    }
    let unended = store.close_interrupted_turns()?;
    if unended > 0 {
        tracing::info!(
            unended,
            "chat turns left without an end by an earlier process recorded as failed"
        );
    }
    let services = router::services(&settings, Arc::clone(&store))?;
    let runner = LoopRunner::new(
        Arc::new(StoredProviders::new(services.clone())),
        tools::catalogue(),
    );
    run_with(settings, services, Arc::new(runner), notifier).await
}

/// Serves chatd over `services` with turns run by `runner`.
pub async fn run_with(
    settings: Settings,
    services: Services,
    runner: Arc<dyn TurnRunner>,
    notifier: Notifier,
) -> Result<(), RunError> {
    let Listeners { api, metrics } = atelier_daemon::take_listeners(DaemonSocket {
        fallback: settings.listen.as_deref(),
        fallback_mode: settings::FALLBACK_SOCKET_MODE,
    })?;
    let mut registry = Registry::with_prefix("atelier_chatd");
    let router = Router::with_metrics(&settings, services, runner, Metrics::new(&mut registry));
    // Served for the daemon's whole run; dropped with it.
    let _metrics = atelier_daemon::metrics::spawn(metrics, registry);
    let serving = format!("serving {}", settings.database.display());
    let status = {
        let (leases, serving) = (router.leases().clone(), serving.clone());
        notifier.spawn_status(STATUS_EVERY, serving.clone(), move || {
            live_status(leases.count(), &serving)
        })
    };
    let bridges = router.bridges().clone();
    let leases = router.leases().clone();
    let handler = move |request| {
        let router = router.clone();
        async move { router.handle(request).await }
    };
    // From the stop signal on, STATUS= tells of the drain, and turns waiting on a browser
    // result (which would come on a connection no longer accepted) end; the turns still
    // running end a while before the drain's deadline would cut their streams.
    let stop_reporting = status.abort_handle();
    atelier_daemon::serve_with_stop_hook(api, handler, notifier, &serving, move || {
        stop_reporting.abort();
        bridges.close();
        tokio::spawn(async move {
            tokio::time::sleep(TURN_GRACE).await;
            bridges.end_turns();
        });
    })
    .await?;
    status.abort();
    // A turn's task outlives its connection: it stores its text and records its end (each
    // holds its conversation's lease until then), which the process must not cut short.
    let finished = tokio::time::timeout(TURNS_FINISH, async {
        while leases.count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if finished.is_err() {
        tracing::warn!(turns = leases.count(), "turns still running as chatd stops");
    }
    Ok(())
}

/// How long a stopping chatd lets its turns run: their streams end (with a line saying why)
/// this long before the drain's deadline.
const TURN_GRACE: Duration = atelier_daemon::DRAIN_DEADLINE.saturating_sub(Duration::from_secs(5));

/// How long a stopped chatd waits for its turns to record their ends, within the unit's
/// `TimeoutStopSec` (30 s) after the drain's deadline (25 s).
const TURNS_FINISH: Duration = Duration::from_secs(3);

/// How often `STATUS=` is brought up to date with the turns in flight.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// What `systemctl status` shows while chatd serves: the turns in flight, then what it serves.
pub fn live_status(turns: usize, serving: &str) -> String {
    match turns {
        0 => format!("idle; {serving}"),
        1 => format!("1 turn in flight; {serving}"),
        n => format!("{n} turns in flight; {serving}"),
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn the_status_counts_the_turns_in_flight() {
        let leases = store::Leases::default();
        let serving = "serving /var/lib/atelier-chatd-example/chat.sqlite3";
        assert_eq!(
            live_status(leases.count(), serving),
            "idle; serving /var/lib/atelier-chatd-example/chat.sqlite3"
        );
        let one = leases.try_acquire("c-1");
        assert!(live_status(leases.count(), serving).starts_with("1 turn in flight; "));
        let two = leases.try_acquire("c-2");
        assert!(live_status(leases.count(), serving).starts_with("2 turns in flight; "));
        drop((one, two));
        assert!(live_status(leases.count(), serving).starts_with("idle; "));
    }
}
