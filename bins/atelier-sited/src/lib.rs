//! atelier-sited: the engine's site daemon, served on a socket that systemd hands it.
//!
//! The binary's `main` parses arguments into [`Settings`] and calls [`run`]; everything a test
//! needs to drive without systemd — the router, the health payload, the settings — lives here.

mod health;
mod router;
mod settings;

pub use health::{instance_fingerprint, Health};
pub use router::{Router, SERVICE_NAME};
pub use settings::{
    RawSettings, Settings, SettingsError, DEFAULT_BASE_PATH, SERVICE_TOKEN_CREDENTIAL,
};

use std::time::Duration;

use atelier_http::Listener;
use atelier_sd::listen::{ActivatedSocket, NamedSocket};
use atelier_sd::notify::Notifier;

/// How long in-flight requests may run on after SIGTERM before their connections are closed.
/// The unit's `TimeoutStopSec=` is 30 s; 25 s leaves PID 1 no reason to SIGKILL us.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(25);

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// systemd passed sockets we cannot use.
    #[error("socket activation: {0}")]
    Activation(#[from] atelier_sd::listen::ListenError),
    /// systemd passed no socket and no `--listen` path was given.
    #[error("no listening socket: not socket-activated and no --listen path given")]
    NoListener,
    /// systemd passed more than one socket, or one that is not a listener.
    #[error("unexpected activated socket {name:?}: sited takes exactly one listening socket")]
    UnexpectedSocket {
        /// The socket's `FileDescriptorName=`.
        name: String,
    },
    /// The development bind fallback failed.
    #[error("binding the fallback socket: {0}")]
    Bind(#[from] atelier_sd::listen::BindError),
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
    let mut sockets = atelier_sd::listen::listeners_from_env()?;
    let socket = match sockets.len() {
        0 => {
            let path = settings.listen.as_deref().ok_or(RunError::NoListener)?;
            let std_listener = atelier_sd::listen::bind_unix(path, settings::FALLBACK_SOCKET_MODE)?;
            return Listener::try_from(std_listener).map_err(RunError::Register);
        }
        1 => sockets.remove(0),
        _ => {
            let NamedSocket { name, .. } = sockets.remove(1);
            return Err(RunError::UnexpectedSocket { name });
        }
    };
    match socket.socket {
        ActivatedSocket::UnixListener(l) => Listener::try_from(l).map_err(RunError::Register),
        ActivatedSocket::TcpListener(l) => Listener::try_from(l).map_err(RunError::Register),
        _ => Err(RunError::UnexpectedSocket { name: socket.name }),
    }
}
