//! The life of a socket-activated Atelier daemon, one way for all of them: take the one
//! listener systemd passed (or bind the development fallback), report READY with a status,
//! keep the watchdog fed, and on SIGTERM or SIGINT report STOPPING and drain within a deadline.
//! Beside it, the daemon's [`metrics`] socket when systemd passed one, and the [`problems`]
//! its settings are refused with, all at once.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use atelier_http::{Listener, Request, Response, ServeReport};
use atelier_layout::names::METRICS_SOCKET_NAME;
use atelier_sd::listen::{
    listeners_from_env, pick_sole_listener, take_unix_listener, ListenError, NamedSocket,
    SoleListener, SoleListenerError,
};
use atelier_sd::notify::Notifier;

pub mod metrics;
pub mod problems;

/// How long in-flight requests may run on after SIGTERM before their connections are closed.
/// The units' `TimeoutStopSec=` is 30 s; 25 s leaves PID 1 no reason to SIGKILL a daemon.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(25);

/// Why a daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// No usable listening socket: none passed and no fallback path, or the wrong ones.
    #[error("{0}")]
    Listen(#[from] SoleListenerError),
    /// The socket could not be registered with the async runtime.
    #[error("registering the listener: {0}")]
    Register(#[source] std::io::Error),
    /// The server failed.
    #[error("serving: {0}")]
    Serve(#[from] atelier_http::ServeError),
}

/// Where a daemon listens and how it reports itself.
#[derive(Debug, Clone, Copy)]
pub struct DaemonSocket<'a> {
    /// The unix socket bound when systemd passed none (development only).
    pub fallback: Option<&'a Path>,
    /// The fallback socket's mode.
    pub fallback_mode: u32,
}

/// The listeners systemd passed a daemon.
#[derive(Debug)]
pub struct Listeners {
    /// The daemon's own surface.
    pub api: Listener,
    /// Its metrics socket, when one was passed (named [`METRICS_SOCKET_NAME`]).
    pub metrics: Option<Listener>,
}

/// Takes the daemon's listener and its metrics socket, if one was passed; must run inside a
/// tokio runtime.
pub fn take_listeners(socket: DaemonSocket<'_>) -> Result<Listeners, DaemonError> {
    let mut sockets = listeners_from_env().map_err(SoleListenerError::Activation)?;
    let metrics = take_metrics_listener(&mut sockets)?;
    let api = match pick_sole_listener(sockets, socket.fallback, socket.fallback_mode)? {
        SoleListener::Unix(l) => Listener::try_from(l),
        SoleListener::Tcp(l) => Listener::try_from(l),
    }
    .map_err(DaemonError::Register)?;
    Ok(Listeners { api, metrics })
}

/// Takes the metrics socket out of `sockets`, if systemd passed one (named
/// [`METRICS_SOCKET_NAME`]); for a daemon that tells its other listeners apart itself.
pub fn take_metrics_listener(
    sockets: &mut Vec<NamedSocket>,
) -> Result<Option<Listener>, DaemonError> {
    match take_unix_listener(sockets, METRICS_SOCKET_NAME) {
        Ok(listener) => Listener::try_from(listener)
            .map(Some)
            .map_err(DaemonError::Register),
        Err(ListenError::NotPassed { .. }) => Ok(None),
        Err(error) => Err(SoleListenerError::Activation(error).into()),
    }
}

/// Serves `handler` (wrapped in the request log) on `listener` until SIGTERM or SIGINT, then
/// drains. READY is sent with `status` only now that the listener is in hand, and STOPPING as
/// soon as the signal arrives, so `systemctl status` always shows what the daemon is doing.
pub async fn serve<H, F>(
    listener: Listener,
    handler: H,
    notifier: Notifier,
    status: &str,
) -> Result<ServeReport, DaemonError>
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    serve_with_stop_hook(listener, handler, notifier, status, || {}).await
}

/// [`serve`], calling `on_signal` the moment SIGTERM or SIGINT arrives, before the drain: a
/// daemon refuses new work there and ends long-running work whose requests the drain waits on.
pub async fn serve_with_stop_hook<H, F, S>(
    listener: Listener,
    handler: H,
    notifier: Notifier,
    status: &str,
    on_signal: S,
) -> Result<ServeReport, DaemonError>
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
    S: FnOnce() + Send + 'static,
{
    let _watchdog = notifier.spawn_watchdog();
    notifier.ready_with_status(status);
    tracing::info!("ready: {status}");
    let shutdown = async move {
        atelier_http::shutdown_signal().await;
        notifier.stopping();
        on_signal();
        notifier.status("draining requests");
    };
    let handler = atelier_http::with_request_log(handler);
    let report = atelier_http::serve(listener, handler, shutdown, DRAIN_DEADLINE).await?;
    tracing::info!(
        connections = report.connections_served,
        drained_cleanly = report.drained_cleanly,
        "stopped"
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_daemon_without_a_socket_or_fallback_refuses_by_name() {
        let err = take_listeners(DaemonSocket {
            fallback: None,
            fallback_mode: 0o600,
        })
        .unwrap_err();
        assert!(
            matches!(err, DaemonError::Listen(SoleListenerError::NoListener)),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn the_fallback_is_bound_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let listeners = take_listeners(DaemonSocket {
            fallback: Some(&path),
            fallback_mode: 0o660,
        })
        .unwrap();
        assert!(matches!(listeners.api, Listener::Unix(_)));
        assert!(listeners.metrics.is_none());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
    }
}
