//! Accepting HTTP/1.1 connections on injected listeners, and draining them on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::FutureExt;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::{JoinError, JoinSet};

use crate::{Request, Response};

/// How long a client may take to send a request head. hyper's own default, made explicit:
/// it bounds slow-header clients and closes keep-alive connections idle for this long. It
/// does not apply while a response (an SSE stream, say) is being written.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause after an accept failure that is about the process, not the connection (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM): retrying at once would spin while nothing has been freed.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A listening socket handed to [`serve`]; the crate never binds one itself.
#[derive(Debug)]
pub enum Listener {
    /// A unix stream socket (the daemons' normal case, from systemd).
    Unix(UnixListener),
    /// A TCP socket (development, or a surface that listens on loopback).
    Tcp(TcpListener),
}

/// Who is at the other end of a connection. [`serve`] and [`serve_connection`] insert it into
/// every request's extensions: `request.extensions().get::<Peer>()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A unix socket peer.
    Unix {
        /// The peer's credentials as the kernel recorded them at `connect()` (`SO_PEERCRED`);
        /// `None` if they could not be read.
        cred: Option<PeerCred>,
    },
    /// A TCP peer.
    Tcp {
        /// The peer's address.
        addr: SocketAddr,
    },
}

/// The credentials of a unix socket peer (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's effective user id.
    pub uid: u32,
    /// The peer's effective group id.
    pub gid: u32,
    /// The peer's process id, when the kernel provides it.
    pub pid: Option<i32>,
}

/// What [`serve`] did, returned once it has stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeReport {
    /// Connections accepted over the whole run.
    pub connections_served: u64,
    /// True if and only if every connection finished before the drain deadline; false means
    /// the remaining ones (long streams, slow handlers) were closed at the deadline.
    pub drained_cleanly: bool,
}

/// Why serving stopped other than by a requested shutdown.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener itself is unusable (for example it is not listening); connections that
    /// were already open were drained before this was returned.
    #[error("the listening socket cannot accept connections")]
    Accept(#[source] io::Error),
    /// The single connection given to [`serve_connection`] failed (client gone mid-request,
    /// malformed HTTP, header read timeout).
    #[error("the HTTP connection failed")]
    Connection(#[source] hyper::Error),
}

// === impl Listener ===

impl Listener {
    async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Listener::Unix(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok(Accepted::Unix(stream))
            }
            Listener::Tcp(listener) => {
                let (stream, addr) = listener.accept().await?;
                Ok(Accepted::Tcp(stream, addr))
            }
        }
    }
}

/// Takes over a listening socket (from systemd, say) and sets it non-blocking. Fails with
/// `InvalidInput` if the socket is not listening (a connected `Accept=yes` socket, say), and
/// outside a tokio runtime (instead of panicking).
impl TryFrom<std::os::unix::net::UnixListener> for Listener {
    type Error = io::Error;

    fn try_from(listener: std::os::unix::net::UnixListener) -> io::Result<Self> {
        require_runtime()?;
        require_listening(&listener)?;
        listener.set_nonblocking(true)?;
        Ok(Listener::Unix(UnixListener::from_std(listener)?))
    }
}

/// Takes over a listening socket and sets it non-blocking. Fails with `InvalidInput` if the
/// socket is not listening, and outside a tokio runtime (instead of panicking).
impl TryFrom<std::net::TcpListener> for Listener {
    type Error = io::Error;

    fn try_from(listener: std::net::TcpListener) -> io::Result<Self> {
        require_runtime()?;
        require_listening(&listener)?;
        listener.set_nonblocking(true)?;
        Ok(Listener::Tcp(TcpListener::from_std(listener)?))
    }
}

impl From<UnixListener> for Listener {
    fn from(listener: UnixListener) -> Self {
        Listener::Unix(listener)
    }
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Self {
        Listener::Tcp(listener)
    }
}

/// tokio's `from_std` panics outside a runtime; turn that into an error.
fn require_runtime() -> io::Result<()> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|error| {
            io::Error::other(format!(
                "no tokio runtime to register the listener with: {error}"
            ))
        })
}

/// A socket that is not listening never becomes readable, so serving it would hang silently.
fn require_listening(socket: impl std::os::fd::AsFd) -> io::Result<()> {
    if rustix::net::sockopt::socket_acceptconn(socket)? {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket handed over as a listener is not listening",
        ))
    }
}

enum Accepted {
    Unix(UnixStream),
    Tcp(TcpStream, SocketAddr),
}

// === impl Peer ===

impl Peer {
    fn of_unix(stream: &UnixStream) -> Self {
        let cred = match stream.peer_cred() {
            Ok(cred) => Some(PeerCred {
                uid: cred.uid(),
                gid: cred.gid(),
                pid: cred.pid(),
            }),
            Err(error) => {
                tracing::debug!(%error, "failed to read the peer credentials of a connection");
                None
            }
        };
        Peer::Unix { cred }
    }
}

/// Serves HTTP/1.1 on `listener` with `handler` until `shutdown` resolves, then drains.
///
/// Each request carries the connection's [`Peer`] in its extensions. Accept failures that
/// concern one connection are skipped; resource exhaustion (EMFILE and the like) is logged and
/// retried after a short pause; only a listener that cannot accept at all ends serving with
/// [`ServeError::Accept`].
///
/// Draining, once `shutdown` resolves: the listener is closed at once (new connections are
/// refused; under socket activation PID 1 holds its own copy of the socket, so they wait in
/// the backlog for the next activation instead), idle keep-alive connections are closed,
/// requests in flight run to completion and their connections close after the response.
/// Whatever is still open `drain_deadline` later (an endless SSE stream, a stuck handler) is
/// closed, and the report says the drain was not clean.
pub async fn serve<H, F>(
    listener: Listener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain_deadline: Duration,
) -> Result<ServeReport, ServeError>
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    serve_at_most(listener, usize::MAX, handler, shutdown, drain_deadline).await
}

/// [`serve`], with at most `max_connections` connections open at once. While that many are
/// open, no more is accepted: the next ones wait in the listener's backlog (and once it is
/// full the kernel refuses them) until one closes. For a listener whose client could otherwise
/// open connections until the process runs out of memory or descriptors.
pub async fn serve_at_most<H, F>(
    listener: Listener,
    max_connections: usize,
    handler: H,
    shutdown: impl Future<Output = ()>,
    drain_deadline: Duration,
) -> Result<ServeReport, ServeError>
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    enum Event {
        Shutdown,
        Finished(Result<(), JoinError>),
        Accepted(io::Result<Accepted>),
    }

    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut connections_served = 0_u64;
    let mut listener_failure = None;
    let mut shutdown = std::pin::pin!(shutdown);

    loop {
        let event = tokio::select! {
            biased;
            () = &mut shutdown => Event::Shutdown,
            Some(finished) = connections.join_next() => Event::Finished(finished),
            // A finished connection is joined (above) before this is looked at again.
            accepted = listener.accept(), if connections.len() < max_connections => {
                Event::Accepted(accepted)
            }
        };
        match event {
            Event::Shutdown => break,
            Event::Finished(finished) => log_join_failure(finished),
            Event::Accepted(Ok(accepted)) => {
                connections_served += 1;
                let watcher = graceful.watcher();
                match accepted {
                    Accepted::Unix(stream) => {
                        let peer = Peer::of_unix(&stream);
                        let connection = connection(stream, peer, handler.clone());
                        connections.spawn(log_connection_end(watcher.watch(connection)));
                    }
                    Accepted::Tcp(stream, addr) => {
                        let connection = connection(stream, Peer::Tcp { addr }, handler.clone());
                        connections.spawn(log_connection_end(watcher.watch(connection)));
                    }
                }
            }
            Event::Accepted(Err(error)) => match AcceptFailure::of(&error) {
                AcceptFailure::Connection => {
                    tracing::debug!(%error, "skipping a connection that failed while accepted");
                }
                AcceptFailure::Listener => {
                    tracing::error!(%error, "the listener cannot accept; stopping");
                    listener_failure = Some(error);
                    break;
                }
                AcceptFailure::Process => {
                    tracing::warn!(
                        %error,
                        pause_ms = ACCEPT_ERROR_PAUSE.as_millis(),
                        "accepting a connection failed; retrying after a pause"
                    );
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
                    }
                }
            },
        }
    }

    // Stop accepting now: with our copy of the socket closed, new connections are refused
    // (or, under socket activation, left queued for the next instance).
    drop(listener);
    tracing::info!(
        open_connections = connections.len(),
        deadline_ms = drain_deadline.as_millis(),
        "draining connections"
    );
    let drained_cleanly = tokio::time::timeout(drain_deadline, graceful.shutdown())
        .await
        .is_ok();
    if drained_cleanly {
        while let Some(finished) = connections.join_next().await {
            log_join_failure(finished);
        }
    } else {
        tracing::warn!(
            closing = connections.len(),
            "drain deadline passed; closing the remaining connections"
        );
        connections.shutdown().await;
    }

    match listener_failure {
        Some(error) => Err(ServeError::Accept(error)),
        None => Ok(ServeReport {
            connections_served,
            drained_cleanly,
        }),
    }
}

/// Serves one already-accepted connection until the client closes it (systemd `Accept=yes`).
///
/// Requests carry a [`Peer::Unix`] in their extensions. To stop early, drop the future (for
/// example by racing it against [`shutdown_signal`]): the connection is then closed.
pub async fn serve_connection<H, F>(stream: UnixStream, handler: H) -> Result<(), ServeError>
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let peer = Peer::of_unix(&stream);
    connection(stream, peer, handler)
        .await
        .map_err(ServeError::Connection)
}

/// Resolves when the process receives SIGTERM or SIGINT.
///
/// The handlers are installed on the first poll, so poll it early (spawn it, or keep it in a
/// `select!`). If a handler cannot be installed the failure is logged and that signal keeps
/// its default action (terminating the process).
pub async fn shutdown_signal() {
    let terminate = install(SignalKind::terminate(), "SIGTERM");
    let interrupt = install(SignalKind::interrupt(), "SIGINT");
    let name = tokio::select! {
        () = delivered(terminate) => "SIGTERM",
        () = delivered(interrupt) => "SIGINT",
    };
    tracing::info!(signal = name, "shutdown requested");
}

fn install(kind: SignalKind, name: &'static str) -> Option<Signal> {
    signal(kind)
        .map_err(
            |error| tracing::error!(%error, signal = name, "failed to install a signal handler"),
        )
        .ok()
}

async fn delivered(signal: Option<Signal>) {
    if let Some(mut signal) = signal {
        if signal.recv().await.is_some() {
            return;
        }
    }
    // No handler (or the signal driver is gone): this signal can no longer be observed.
    std::future::pending::<()>().await;
}

fn connection<I, H, F>(io: I, peer: Peer, handler: H) -> http1::Connection<TokioIo<I>, Handler<H>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), Handler { handler, peer })
}

/// The caller's handler as a hyper service for one connection.
///
/// A named type rather than `service_fn`, so the `Send`-ness of the handler's future stays
/// visible to `tokio::spawn` through the connection type.
struct Handler<H> {
    handler: H,
    peer: Peer,
}

type Infallibly = fn(Response) -> Result<Response, Infallible>;

impl<H, F> hyper::service::Service<Request> for Handler<H>
where
    H: Fn(Request) -> F,
    F: Future<Output = Response>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = futures_util::future::Map<F, Infallibly>;

    fn call(&self, mut request: Request) -> Self::Future {
        request.extensions_mut().insert(self.peer.clone());
        (self.handler)(request).map(Ok as Infallibly)
    }
}

async fn log_connection_end(connection: impl Future<Output = Result<(), hyper::Error>>) {
    if let Err(error) = connection.await {
        // Client-caused (went away, malformed request, too slow): not the server's failure.
        tracing::debug!(%error, "connection ended with an error");
    }
}

fn log_join_failure(finished: Result<(), JoinError>) {
    if let Err(error) = finished {
        if error.is_panic() {
            tracing::error!(%error, "a connection task panicked");
        }
    }
}

/// What an accept failure says about the listener.
#[derive(Debug, PartialEq, Eq)]
enum AcceptFailure {
    /// Only the connection being accepted is affected; accept the next one.
    Connection,
    /// The process is short of something (descriptors, memory) that may be freed soon.
    Process,
    /// The listener is not a usable listening socket; accepting again cannot help.
    Listener,
}

impl AcceptFailure {
    fn of(error: &io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::TimedOut => AcceptFailure::Connection,
            // EINVAL: the socket is not listening.
            io::ErrorKind::InvalidInput => AcceptFailure::Listener,
            _ => AcceptFailure::Process,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::time::Instant;

    use futures_util::stream;
    use http_body_util::BodyExt;
    use hyper::StatusCode;

    use super::*;
    use crate::test_support::{
        collect, connect, connect_io, get, next_data, request_empty, TestServer,
    };
    use crate::{full_body, sse_response, SseKeepAlive};

    async fn describe_peer(request: Request) -> Response {
        Response::new(full_body(format!(
            "{:?}",
            request.extensions().get::<Peer>()
        )))
    }

    #[tokio::test]
    async fn serves_a_unix_listener_and_tells_the_peer() {
        let server = TestServer::start(describe_peer);
        let response = get(&server.path, "/").await;
        assert_eq!(response.status(), StatusCode::OK);
        let uid = std::fs::metadata(server.dir.path()).unwrap().uid();
        let gid = std::fs::metadata(server.dir.path()).unwrap().gid();
        let expected = Peer::Unix {
            cred: Some(PeerCred {
                uid,
                gid,
                pid: Some(i32::try_from(std::process::id()).unwrap()),
            }),
        };
        assert_eq!(collect(response).await, format!("{:?}", Some(expected)));
    }

    /// At the cap, a further connection waits in the backlog, unanswered, until an open one
    /// closes; then it is served.
    #[tokio::test]
    async fn no_more_than_the_cap_of_connections_is_served_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("capped.sock");
        let listener = Listener::Unix(UnixListener::bind(&path).unwrap());
        tokio::spawn(serve_at_most(
            listener,
            2,
            describe_peer,
            std::future::pending(),
            Duration::from_secs(1),
        ));
        let mut open = Vec::new();
        for _ in 0..2 {
            let mut client = connect(&path).await;
            let response = client.send_request(request_empty("/")).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            open.push(client);
        }
        let third = tokio::spawn({
            let path = path.clone();
            async move {
                let mut client = connect(&path).await;
                client
                    .send_request(request_empty("/"))
                    .await
                    .unwrap()
                    .status()
            }
        });
        // It cannot be answered while both are open; this only waits a little to see that.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!third.is_finished(), "a third connection was served");
        drop(open.pop());
        let status = tokio::time::timeout(Duration::from_secs(10), third)
            .await
            .expect("served once one closed")
            .unwrap();
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn serves_a_tcp_listener() {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std_listener.local_addr().unwrap();
        let listener = Listener::try_from(std_listener).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve(
            listener,
            describe_peer,
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(5),
        ));

        let stream = TcpStream::connect(addr).await.unwrap();
        let client_addr = stream.local_addr().unwrap();
        let mut client = connect_io(stream).await;
        let response = client.send_request(request_empty("/")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            collect(response).await,
            format!("{:?}", Some(Peer::Tcp { addr: client_addr }))
        );
        drop(client);

        stop.send(()).unwrap();
        let report = served.await.unwrap().unwrap();
        assert_eq!(
            report,
            ServeReport {
                connections_served: 1,
                drained_cleanly: true
            }
        );
    }

    #[test]
    fn listener_conversion_outside_a_runtime_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let std_listener = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        assert!(Listener::try_from(std_listener).is_err());
    }

    #[test]
    fn accept_failures_table() {
        // Linux errno values, as accept(2) reports them.
        let cases = [
            ("ECONNABORTED", 103, AcceptFailure::Connection),
            ("EINTR", 4, AcceptFailure::Connection),
            ("EPERM (firewall)", 1, AcceptFailure::Connection),
            ("EMFILE", 24, AcceptFailure::Process),
            ("ENFILE", 23, AcceptFailure::Process),
            ("ENOBUFS", 105, AcceptFailure::Process),
            ("ENOMEM", 12, AcceptFailure::Process),
            ("EINVAL (not listening)", 22, AcceptFailure::Listener),
        ];
        for (name, errno, expected) in cases {
            assert_eq!(
                AcceptFailure::of(&io::Error::from_raw_os_error(errno)),
                expected,
                "{name}"
            );
        }
    }

    /// A connected socket where a listening one was expected (an `Accept=yes` fd, say).
    fn connected_socket() -> (
        std::os::unix::net::UnixListener,
        std::os::unix::net::UnixStream,
    ) {
        let (connected, peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let as_listener =
            std::os::unix::net::UnixListener::from(std::os::fd::OwnedFd::from(connected));
        (as_listener, peer)
    }

    #[tokio::test]
    async fn a_socket_that_is_not_listening_is_refused_on_handover() {
        let (not_listening, _peer) = connected_socket();
        let error = Listener::try_from(not_listening).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn an_accept_failure_of_the_listener_itself_ends_serving_with_an_error() {
        let (not_listening, mut peer) = connected_socket();
        not_listening.set_nonblocking(true).unwrap();
        let listener = Listener::from(UnixListener::from_std(not_listening).unwrap());
        // Readable at last, so the accept is attempted, and fails with EINVAL.
        std::io::Write::write_all(&mut peer, b"x").unwrap();
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            serve(
                listener,
                describe_peer,
                std::future::pending(),
                Duration::from_secs(1),
            ),
        )
        .await
        .expect("a listener failure is not retried forever");
        match result {
            Err(ServeError::Accept(error)) => {
                assert_eq!(error.kind(), io::ErrorKind::InvalidInput)
            }
            other => panic!("expected an accept error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn idle_keep_alive_connections_do_not_hold_the_drain() {
        let server = TestServer::start(describe_peer);
        let mut first = connect(&server.path).await;
        let mut second = connect(&server.path).await;
        for client in [&mut first, &mut second] {
            let response = client.send_request(request_empty("/")).await.unwrap();
            collect(response).await;
        }
        // Both connections stay open and idle while the server stops.
        let started = Instant::now();
        let report = server.stop().await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            report,
            ServeReport {
                connections_served: 2,
                drained_cleanly: true
            }
        );
    }

    #[tokio::test]
    async fn in_flight_request_completes_during_the_drain_and_new_connections_are_refused() {
        let (entered_tx, entered) = tokio::sync::mpsc::channel::<()>(1);
        let (release, released) = tokio::sync::watch::channel(false);
        let mut server = TestServer::start(move |_request: Request| {
            let entered_tx = entered_tx.clone();
            let mut released = released.clone();
            async move {
                entered_tx.send(()).await.unwrap();
                released.wait_for(|released| *released).await.unwrap();
                Response::new(full_body("slow but done"))
            }
        });
        let mut entered = entered;
        let mut client = connect(&server.path).await;
        let in_flight = tokio::spawn(client.send_request(request_empty("/slow")));
        entered.recv().await.unwrap();

        let path = server.path.clone();
        server.trigger_shutdown();
        let stopping = tokio::spawn(server.finish());
        // The listener closes promptly even though a request is still running.
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                // Until the listener is closed a connect may still land in its backlog (and
                // be reset when it closes); after that it is refused outright.
                match UnixStream::connect(&path).await {
                    Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => break,
                    _ => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        })
        .await
        .expect("new connections are refused once shutdown starts");
        assert!(
            !stopping.is_finished(),
            "the drain waits for the in-flight request"
        );

        release.send(true).unwrap();
        let response = in_flight.await.unwrap().unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // The connection is not kept alive past the drain.
        assert_eq!(response.headers()["connection"], "close");
        assert_eq!(collect(response).await, "slow but done");
        let report = stopping.await.unwrap().unwrap();
        assert!(report.drained_cleanly);
        // The refused attempts were never accepted.
        assert_eq!(report.connections_served, 1);
    }

    #[tokio::test]
    async fn endless_sse_stream_is_cut_at_the_drain_deadline() {
        const DEADLINE: Duration = Duration::from_millis(300);
        let server = TestServer::start_with_deadline(DEADLINE, |_request: Request| async {
            sse_response(
                stream::pending::<crate::SseEvent>(),
                SseKeepAlive::new(Duration::from_millis(50)),
            )
        });
        let response = get(&server.path, "/events").await;
        let mut body = response.into_body();
        assert_eq!(
            next_data(&mut body).await.as_deref(),
            Some(&b": keep-alive\n\n"[..])
        );

        let started = Instant::now();
        let report = tokio::time::timeout(Duration::from_secs(5), server.stop())
            .await
            .expect("serve returns soon after the deadline")
            .unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed >= DEADLINE, "returned after {elapsed:?}");
        assert_eq!(
            report,
            ServeReport {
                connections_served: 1,
                drained_cleanly: false
            }
        );
        // The client sees the stream end abruptly (no final chunk), after the keep-alives.
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match body.frame().await {
                    Some(Ok(_)) => continue,
                    Some(Err(_)) => break true,
                    None => break false,
                }
            }
        })
        .await
        .expect("the cut connection ends the body");
        assert!(
            ended,
            "an unterminated chunked body is an error for the client"
        );
    }

    #[tokio::test]
    async fn serve_connection_serves_one_accepted_stream() {
        let (server_side, client_side) = UnixStream::pair().unwrap();
        let served = tokio::spawn(serve_connection(server_side, describe_peer));
        let mut client = connect_io(client_side).await;
        for _ in 0..2 {
            let response = client.send_request(request_empty("/")).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert!(collect(response)
                .await
                .starts_with("Some(Unix { cred: Some("));
        }
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("ends when the client closes")
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn shutdown_signal_resolves_on_sigterm() {
        let signal = shutdown_signal();
        let mut signal = std::pin::pin!(signal);
        // First poll installs the handlers; SIGTERM must not be sent before that.
        assert!(futures_util::FutureExt::now_or_never(signal.as_mut()).is_none());
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(5), signal)
            .await
            .expect("SIGTERM resolves the shutdown signal");
    }
}
