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

use atelier_daemon::{DaemonError, DaemonSocket};
use atelier_sd::notify::Notifier;

use crate::chat::TurnRunner;
use crate::store::{Store, StoreError};

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The database could not be opened or migrated.
    #[error("opening the database: {0}")]
    Store(#[from] StoreError),
    /// The listener or the server failed.
    #[error("{0}")]
    Daemon(#[from] DaemonError),
}

/// Serves chatd until SIGTERM or SIGINT, then drains and returns; turns are run by `runner`.
pub async fn run(
    settings: Settings,
    runner: Arc<dyn TurnRunner>,
    notifier: Notifier,
) -> Result<(), RunError> {
    let store = Arc::new(Store::open(&settings.database)?);
    let listener = atelier_daemon::take_listener(DaemonSocket {
        fallback: settings.listen.as_deref(),
        fallback_mode: settings::FALLBACK_SOCKET_MODE,
    })?;
    let router = Router::new(&settings, store, runner);
    let handler = move |request| {
        let router = router.clone();
        async move { router.handle(request).await }
    };
    atelier_daemon::serve(
        listener,
        handler,
        notifier,
        &format!("serving {}", settings.database.display()),
    )
    .await?;
    Ok(())
}
