//! The serving half: one door's CONNECT listener, from the head to the spliced tunnel.
//!
//! Per accepted connection, in order: read the head ([`MAX_HEAD`], head timeout → 408), parse
//! it and check the door's plan; resolve once through the [`Resolver`] (in production, one
//! lookup's answers serve a host's connections for a second: [`KeptAnswers`]); refuse if any
//! answer is not public under the door's [`Policy`]; dial the vetted addresses in resolver
//! order through the [`Dialer`] until one connects; reply `200 Connection Established`; buffer the client's
//! first flight until its [`FirstFlightReader`] decides; only after it accepts a ClientHello
//! naming the CONNECT host do the buffered bytes go upstream, then bytes move both ways
//! ([`atelier_relay`]: `splice(2)` through a pipe toward the client, a copy toward upstream).
//!
//! Every decision is recorded in the door's [`DecisionLog`] before the client hears of it: a
//! refusal or failure before its reply, `allowed` (the tunnel's address) before the 200, and a
//! refused first flight before the tunnel is closed. So a subscriber that ends its subscription
//! after the client saw its answer has that decision. Each decision is counted in the door's
//! [`Metrics`] where it is recorded, and a tunnel's bytes as they move.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::time::{timeout, Instant};

use atelier_proto::egress::Verdict as Decided;
use atelier_proto::Door as DoorName;

use crate::address::{listed, AnswersRefused, Policy};
use crate::client_hello::{
    check_server_name, FirstFlight, FirstFlightReader, HelloRefusal, MAX_FIRST_FLIGHT,
};
use crate::connect::{
    check_plan, head_may_end, parse_head, ConnectRefusal, ConnectTarget, EGRESS_PORT, MAX_HEAD,
};
use crate::metrics::{EarlyClose, Failure, Metrics, Refusal};

mod decision_log;
mod kept;

pub use atelier_relay::Mode;
pub use decision_log::{
    printable, DecisionLog, Subscription, SubscriptionEnd, MAX_LOG_LINES, MAX_LOG_TEXT,
};
pub use kept::{KeptAnswers, ANSWER_LIFETIME};

/// The reply that opens a tunnel.
pub const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// The reply to a connection over the cap.
pub const OVER_CAP: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// The reply when resolving or every dial failed.
pub const BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// The reply when an answer is not public (or there is none).
pub const FORBIDDEN: &[u8] =
    b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// A boxed, sendable future, the return type of [`Resolver`] and [`Dialer`] methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Turns a planned hostname into addresses, once per connection, in the resolver's order.
pub trait Resolver: Send + Sync {
    /// Every address `host` resolves to (an empty list is refused by the caller).
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;

    /// Told when no address of `host`'s last answer could be dialled: a resolver that keeps
    /// answers drops this host's, so the next connection asks again.
    fn forget(&self, _host: &str) {}
}

/// Opens the upstream TCP connection to a vetted address.
pub trait Dialer: Send + Sync {
    /// Connects to `addr` (a vetted address on port 443). The caller bounds the time.
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// The system resolver (`getaddrinfo` through [`tokio::net::lookup_host`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let answers = tokio::net::lookup_host((host, EGRESS_PORT)).await?;
            Ok(answers.map(|addr| addr.ip()).collect())
        })
    }
}

/// Dials the address itself, with Nagle's algorithm off: the client already chose how its
/// bytes are cut into writes (TLS records), and holding a small one back until the previous is
/// acknowledged would only add a round trip to every exchange that ends in one.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpDialer;

impl Dialer for TcpDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(async move {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    }
}

/// The bounds of one door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long the head may take to arrive (then 408).
    pub head_timeout: Duration,
    /// How long the name's lookup may take (a hung resolver holds the connection's slot).
    pub lookup_timeout: Duration,
    /// How long each dial may take.
    pub dial_timeout: Duration,
    /// How long the first flight may take to be decided.
    pub first_flight_timeout: Duration,
    /// Connections open at once, from accept to close; one more gets 503.
    pub max_connections: usize,
}

impl Default for Limits {
    /// The reference's bounds: 5 s head, 10 s per dial, 5 s first flight, 128 connections;
    /// and 10 s for the lookup.
    fn default() -> Self {
        Limits {
            head_timeout: Duration::from_secs(5),
            lookup_timeout: Duration::from_secs(10),
            dial_timeout: Duration::from_secs(10),
            first_flight_timeout: Duration::from_secs(5),
            max_connections: 128,
        }
    }
}

/// Everything one door's listener needs.
pub struct Door {
    /// The hosts on the door's plan.
    pub hosts: Vec<String>,
    /// What counts as a public address.
    pub policy: Policy,
    /// The door's bounds.
    pub limits: Limits,
    /// Resolves planned hosts.
    pub resolver: Arc<dyn Resolver>,
    /// Dials vetted addresses.
    pub dialer: Arc<dyn Dialer>,
    /// The door's decisions; its door names this one (`turn`, `build`) in every log line.
    pub log: Arc<DecisionLog>,
    /// How open tunnels move their bytes.
    pub mode: Mode,
    /// The door's tunnels open now, for the gate's `STATUS=` and its metrics.
    pub open: OpenTunnels,
    /// Where the door counts its decisions and relayed bytes.
    pub metrics: Metrics,
}

/// How many of a door's tunnels are open: each counted from its 200 to its close. The count
/// is the door's `tunnels_open` gauge itself, so `STATUS=` and a scrape read the same number.
#[derive(Debug, Default)]
pub struct OpenTunnels(Gauge);

impl OpenTunnels {
    /// Counts into `gauge` ([`Metrics::tunnels_open`]).
    pub fn new(gauge: Gauge) -> OpenTunnels {
        OpenTunnels(gauge)
    }

    /// The tunnels open now.
    pub fn count(&self) -> usize {
        usize::try_from(self.0.get()).unwrap_or(0)
    }

    /// Counts one tunnel until the guard is dropped, however its task ends.
    fn enter(&self) -> OpenTunnel<'_> {
        self.0.inc();
        OpenTunnel(&self.0)
    }
}

/// One counted tunnel; dropping it uncounts it.
struct OpenTunnel<'a>(&'a Gauge);

impl Drop for OpenTunnel<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Door {
    /// A production door: the system resolver (each answer kept for [`ANSWER_LIFETIME`]),
    /// direct dials, default limits, a new log, counting into `metrics`.
    pub fn new(name: DoorName, hosts: Vec<String>, policy: Policy, metrics: Metrics) -> Door {
        Door {
            hosts,
            policy,
            limits: Limits::default(),
            resolver: Arc::new(KeptAnswers::new(Arc::new(SystemResolver), ANSWER_LIFETIME)),
            dialer: Arc::new(TcpDialer),
            log: Arc::new(DecisionLog::new(name)),
            mode: Mode::Measured,
            open: OpenTunnels::new(metrics.tunnels_open(name)),
            metrics,
        }
    }

    /// The door's name, its log's door.
    pub fn name(&self) -> DoorName {
        self.log.door()
    }

    /// Records a decision about a CONNECT whose head parsed.
    fn record(&self, target: &ConnectTarget, verdict: Decided, reason: &str) {
        self.log
            .record(target.host(), Some(target.port()), verdict, reason);
    }

    /// Records and counts the refusal of a CONNECT whose head parsed; `detail`, when given,
    /// follows the reason's name in the log.
    fn refuse(&self, target: &ConnectTarget, refusal: Refusal, detail: Option<&str>) {
        self.record(
            target,
            Decided::Refused,
            &with_detail(refusal.as_str(), detail),
        );
        self.metrics.connect_refused(self.name(), refusal);
    }

    /// Records and counts the refusal of a connection whose head did not parse (or was not
    /// read): `raw` stands for the target (as the client wrote it, or `-`).
    fn refuse_unparsed(&self, raw: &str, refusal: Refusal, detail: Option<&str>) {
        let reason = with_detail(refusal.as_str(), detail);
        self.log.record(raw, None, Decided::Refused, &reason);
        self.metrics.connect_refused(self.name(), refusal);
    }

    /// Records and counts a CONNECT that found no way to its planned host.
    fn fail(&self, target: &ConnectTarget, failure: Failure, detail: &str) {
        let reason = with_detail(failure.as_str(), Some(detail));
        self.record(target, Decided::Failed, &reason);
        self.metrics.connect_failed(self.name(), failure);
    }
}

/// A decision's reason: the stable name, then what the operator needs to know about it.
fn with_detail(name: &str, detail: Option<&str>) -> String {
    match detail {
        Some(detail) => format!("{name}: {detail}"),
        None => name.to_owned(),
    }
}

/// Accepts connections on `listener` forever, each served on its own task, at most
/// [`Limits::max_connections`] at once. Returns only if accepting fails for good.
pub async fn serve(listener: UnixListener, door: Arc<Door>) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(door.limits.max_connections));
    let what = format!("a {} door connection", door.name());
    loop {
        let stream = accept(&listener, &what).await?;
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                let door = Arc::clone(&door);
                tokio::spawn(async move {
                    handle(stream, &door).await;
                    drop(slot);
                });
            }
            Err(_) => {
                door.refuse_unparsed(
                    "-",
                    Refusal::OverCap,
                    Some(&format!(
                        "this door already holds {}",
                        door.limits.max_connections
                    )),
                );
                refuse_over_cap(stream);
            }
        }
    }
}

/// The next connection on `listener`. A failure that leaves the listener usable (out of
/// descriptors, a connection reset before accept) is logged and waited out; any other ends
/// the listener.
pub(crate) async fn accept(listener: &UnixListener, what: &str) -> io::Result<UnixStream> {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return Ok(stream),
            Err(error) if is_transient(&error) => {
                tracing::warn!(%error, "accepting {what} failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Returns true if and only if `error` from `accept` leaves the listener usable.
fn is_transient(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc_errno::EMFILE | libc_errno::ENFILE | libc_errno::ENOBUFS | libc_errno::ENOMEM)
    ) || matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// The errno values `accept` may return that do not end the listener (Linux numbering).
mod libc_errno {
    pub const ENOMEM: i32 = 12;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
    pub const ENOBUFS: i32 = 105;
}

/// Answers 503 without a task: the reply fits any fresh socket's send buffer, so one
/// non-blocking write either sends it whole or the client is gone. Closing follows on drop.
fn refuse_over_cap(stream: UnixStream) {
    if let Ok(stream) = stream.into_std() {
        let _ = std::io::Write::write_all(&mut &stream, OVER_CAP);
    }
}

/// Writes a reply and closes the write side; errors mean the client left, which ends the
/// connection anyway.
async fn reply(stream: &mut UnixStream, bytes: &[u8]) {
    if stream.write_all(bytes).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// Serves one accepted connection to its end.
pub async fn handle(mut client: UnixStream, door: &Door) {
    let mut buf = Vec::with_capacity(4096);
    let head = match timeout(door.limits.head_timeout, read_head(&mut client, &mut buf)).await {
        Err(_) => Err(ConnectRefusal::HeadTimeout),
        Ok(Ok(Some(parsed))) => Ok(parsed),
        // The client left before finishing its head: nothing was decided.
        Ok(Ok(None)) => return,
        Ok(Err(refusal)) => Err(refusal),
    };
    let (target, head_len) = match head {
        Ok((target, len)) => match check_plan(&target, &door.hosts) {
            Ok(()) => (target, len),
            Err(refusal) => {
                door.refuse(&target, Refusal::Connect(refusal), None);
                reply(&mut client, &refusal.reply()).await;
                return;
            }
        },
        Err(refusal) => {
            door.refuse_unparsed(&requested_target(&buf), Refusal::Connect(refusal), None);
            reply(&mut client, &refusal.reply()).await;
            return;
        }
    };
    let Some((upstream, address)) = open_upstream(&mut client, door, &target).await else {
        return;
    };
    // The original daemon's order: the tunnel's address is the decision, recorded before the
    // 200; a first flight refused later is a second decision, recorded before the close.
    door.record(&target, Decided::Allowed, &format!("via {address}"));
    door.metrics.connect_allowed(door.name());
    if client.write_all(ESTABLISHED).await.is_err() {
        return;
    }
    let _open = door.open.enter();
    buf.drain(..head_len);
    match read_first_flight(&mut client, &mut buf, door.limits.first_flight_timeout).await {
        Ok(sni) => match check_server_name(target.host(), &sni) {
            Ok(()) => pass_through(client, upstream, &buf, door).await,
            Err(refusal) => close_tunnel(door, &target, EarlyClose::Hello(refusal)),
        },
        Err(why) => close_tunnel(door, &target, why),
    }
}

/// Records and counts why the tunnel is closed unused; the caller then drops both sockets.
fn close_tunnel(door: &Door, target: &ConnectTarget, why: EarlyClose) {
    door.record(
        target,
        Decided::Closed,
        &format!("{}; nothing was sent upstream", why.as_str()),
    );
    door.metrics.tunnel_closed(door.name(), why);
}

/// Reads until a head parses. `Ok(None)`: the client closed first.
async fn read_head(
    client: &mut UnixStream,
    buf: &mut Vec<u8>,
) -> Result<Option<(ConnectTarget, usize)>, ConnectRefusal> {
    let mut seen = 0;
    loop {
        if head_may_end(buf, seen) {
            if let Some(parsed) = parse_head(buf)? {
                return Ok(Some(parsed));
            }
        }
        seen = buf.len();
        // parse_head refuses at MAX_HEAD, so the buffer stays under MAX_HEAD + one read.
        match read_some(client, buf, MAX_HEAD).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(_) => {}
        }
    }
}

/// Reads at most `limit - buf.len()` more bytes (and at least one) onto `buf`. Cancel safe:
/// `buf` only ever grows by bytes received, so a deadline that drops this read mid-way leaves
/// nothing but what the client sent (the head-timeout log line shows exactly that).
pub(crate) async fn read_some<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<usize> {
    let want = limit.saturating_sub(buf.len()).clamp(1, 16 * 1024);
    buf.reserve(want);
    (&mut *reader)
        .take(u64::try_from(want).unwrap_or(u64::MAX))
        .read_buf(buf)
        .await
}

/// The request target as the client wrote it, printable and bounded, for the log.
fn requested_target(buf: &[u8]) -> String {
    let line_end = buf
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(buf.len())
        .min(MAX_HEAD);
    let line = &buf[..line_end];
    let target = line.split(|&b| b == b' ').nth(1).unwrap_or(b"-");
    if target.is_empty() {
        "-".to_owned()
    } else {
        printable(&String::from_utf8_lossy(target))
    }
}

/// Resolves once, vets every answer, dials in order. Replies and logs itself on failure.
async fn open_upstream(
    client: &mut UnixStream,
    door: &Door,
    target: &ConnectTarget,
) -> Option<(TcpStream, SocketAddr)> {
    let lookup = door.resolver.resolve(target.host());
    let answers = match timeout(door.limits.lookup_timeout, lookup).await {
        Ok(Ok(answers)) => answers,
        failed => {
            let why = match failed {
                Ok(Err(error)) => error.to_string(),
                _ => format!("no answer within {:?}", door.limits.lookup_timeout),
            };
            door.fail(target, Failure::LookupFailed, &why);
            reply(client, BAD_GATEWAY).await;
            return None;
        }
    };
    match door.policy.vet(answers.iter().copied()) {
        Ok(()) => {}
        Err(AnswersRefused::NoAddress) => {
            door.refuse(target, Refusal::NoAddress, None);
            reply(client, FORBIDDEN).await;
            return None;
        }
        Err(AnswersRefused::NotPublic(refused)) => {
            for (_, reason) in &refused {
                door.metrics.address_refused(door.name(), *reason);
            }
            door.refuse(target, Refusal::NotPublic, Some(&listed(&refused)));
            reply(client, FORBIDDEN).await;
            return None;
        }
    }
    let mut failures = Vec::new();
    for ip in answers {
        let address = SocketAddr::new(ip, EGRESS_PORT);
        match timeout(door.limits.dial_timeout, door.dialer.dial(address)).await {
            Ok(Ok(upstream)) => return Some((upstream, address)),
            Ok(Err(error)) => failures.push(format!("{address} {error}")),
            Err(_) => failures.push(format!("{address} timed out")),
        }
    }
    door.resolver.forget(target.host());
    door.fail(target, Failure::DialFailed, &failures.join(", "));
    reply(client, BAD_GATEWAY).await;
    None
}

/// Buffers the first flight until it is decided; the accepted server name, or why not.
async fn read_first_flight(
    client: &mut UnixStream,
    buf: &mut Vec<u8>,
    limit: Duration,
) -> Result<String, EarlyClose> {
    let deadline = Instant::now() + limit;
    let mut reader = FirstFlightReader::default();
    loop {
        match reader.inspect(buf) {
            FirstFlight::Accept { sni } => return Ok(sni),
            FirstFlight::Refuse(refusal) => return Err(EarlyClose::Hello(refusal)),
            FirstFlight::NeedMore if buf.len() >= MAX_FIRST_FLIGHT => {
                return Err(EarlyClose::Hello(HelloRefusal::TooLarge))
            }
            FirstFlight::NeedMore => {}
        }
        match tokio::time::timeout_at(deadline, read_some(client, buf, MAX_FIRST_FLIGHT)).await {
            Err(_) => return Err(EarlyClose::Hello(HelloRefusal::Timeout)),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(EarlyClose::ClientClosed),
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends the accepted first flight upstream, then moves bytes both ways until both sides
/// close, counting them into the door's relayed bytes as they move.
async fn pass_through(
    client: UnixStream,
    mut upstream: TcpStream,
    first_flight: &[u8],
    door: &Door,
) {
    let relayed = door.metrics.relayed(door.name());
    if upstream.write_all(first_flight).await.is_err() {
        return;
    }
    relayed.upstream.inc_by(first_flight.len() as u64);
    atelier_relay::widen_send_buffer(&client);
    match atelier_relay::run(&client, &upstream, door.mode, &relayed).await {
        Ok(moved) => tracing::debug!(?moved, "tunnel closed"),
        Err(error) => tracing::debug!(%error, "tunnel failed"),
    }
}

#[cfg(test)]
pub(crate) mod tests;
