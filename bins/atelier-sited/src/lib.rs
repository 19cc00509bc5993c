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
//!
//! Sessions (issue 4, item 3, without drivers yet):
//! - [`session_log`]: the JSONL event log with its `seq`, and `SessionMeta`.
//! - [`sessions`]: live sessions and their fan-out, listing, admission, and the SSE follow.
//!

pub mod actor;
pub mod agents_md;
pub mod domain;
pub mod git;
mod health;
pub mod manifest;
pub mod problem;
pub mod reservations;
mod router;
pub mod session_log;
pub mod sessions;
mod settings;
pub mod site_table;
pub mod sites;
pub mod slug;
pub mod templates;

pub use health::{instance_fingerprint, Health};
pub use router::{Router, MAX_BODY_BYTES, SERVICE_NAME};
pub use settings::{
    RawSettings, Settings, SettingsError, DEFAULT_BASE_PATH, SERVICE_TOKEN_CREDENTIAL,
};
pub use sites::{Sites, SitesConfig};

use atelier_daemon::{DaemonError, DaemonSocket};
use atelier_sd::notify::Notifier;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The listener or the server failed.
    #[error("{0}")]
    Daemon(#[from] DaemonError),
}

/// Serves the site daemon until SIGTERM or SIGINT, then drains and returns.
///
/// Readiness is reported to systemd only once the listener is in hand, and STOPPING as soon as
/// the shutdown signal arrives, so `systemctl` always shows what the daemon is doing.
pub async fn run(settings: Settings, notifier: Notifier) -> Result<(), RunError> {
    let listener = atelier_daemon::take_listener(DaemonSocket {
        fallback: settings.listen.as_deref(),
        fallback_mode: settings::FALLBACK_SOCKET_MODE,
    })?;
    let router = Router::new(&settings);
    let handler = move |request| {
        let router = router.clone();
        async move { router.handle(request).await }
    };
    atelier_daemon::serve(
        listener,
        handler,
        notifier,
        &format!("serving instance {}", settings.instance),
    )
    .await?;
    Ok(())
}
