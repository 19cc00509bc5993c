//! The serving half through real sockets: a unix listener in a temp dir, upstream TCP servers
//! on loopback reached through a lab dialer, and real ClientHello bytes. The lab is shared with
//! the decisions socket's tests.

use super::*;
use crate::client_hello::tests::{records, sni, Hello};
use atelier_proto::egress::Decision;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub(crate) const HOST: &str = "api.example.com";
/// The "public" address the classifier sees (benchmark range allowed); the lab dialer routes it
/// to a loopback server.
pub(crate) const LAB_ADDR: &str = "198.18.0.10";
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// A static DNS: hostnames to answers, unknown names fail, [`HUNG`] never answers; counts
/// every lookup.
struct StaticResolver(HashMap<String, Vec<IpAddr>>, Arc<AtomicUsize>);

/// The planned name whose lookup never answers.
const HUNG: &str = "hung.example.com";

impl Resolver for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        if host == HUNG {
            return Box::pin(std::future::pending());
        }
        let answer = self
            .0
            .get(host)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"));
        Box::pin(async move { answer })
    }
}

/// Routes lab addresses to loopback listeners and remembers every dial.
struct LabDialer {
    routes: HashMap<SocketAddr, SocketAddr>,
    dials: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Dialer for LabDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.dials.lock().unwrap().push(addr);
        let route = self.routes.get(&addr).copied();
        Box::pin(async move {
            match route {
                Some(to) => TcpStream::connect(to).await,
                None => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "no lab route",
                )),
            }
        })
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn lab_addr(ip_text: &str) -> SocketAddr {
    SocketAddr::new(ip(ip_text), EGRESS_PORT)
}

/// One upstream connection: echoes what it reads; the handle yields every byte received.
pub(crate) async fn echo_upstream() -> (SocketAddr, JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut received = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    received.extend_from_slice(&chunk[..n]);
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        received
    });
    (addr, task)
}

pub(crate) struct Lab {
    _dir: tempfile::TempDir,
    path: PathBuf,
    pub(crate) door: Arc<Door>,
    dials: Arc<Mutex<Vec<SocketAddr>>>,
    lookups: Arc<AtomicUsize>,
    server: JoinHandle<io::Result<()>>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub(crate) struct LabConfig {
    pub(crate) answers: Vec<(&'static str, Vec<IpAddr>)>,
    routes: Vec<(SocketAddr, SocketAddr)>,
    policy: Policy,
    pub(crate) limits: Limits,
    mode: Mode,
    /// Where the door counts; its `tunnels_open` gauge is the door's open count.
    pub(crate) metrics: Metrics,
    /// How long answers are kept ([`KeptAnswers`]); `None` asks on every connection.
    kept_for: Option<Duration>,
}

impl LabConfig {
    /// `HOST` resolves to `LAB_ADDR`, routed to `upstream`; the benchmark range is allowed.
    pub(crate) fn to(upstream: SocketAddr) -> LabConfig {
        LabConfig {
            answers: vec![(HOST, vec![ip(LAB_ADDR)])],
            routes: vec![(lab_addr(LAB_ADDR), upstream)],
            policy: Policy {
                allow_benchmark_range: true,
            },
            limits: Limits::default(),
            mode: Mode::Splice,
            metrics: Metrics::default(),
            kept_for: None,
        }
    }

    pub(crate) fn start(self) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("turn.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let dials = Arc::new(Mutex::new(Vec::new()));
        let lookups = Arc::new(AtomicUsize::new(0));
        let mut resolver: Arc<dyn Resolver> = Arc::new(StaticResolver(
            self.answers
                .into_iter()
                .map(|(host, ips)| (host.to_owned(), ips))
                .collect(),
            Arc::clone(&lookups),
        ));
        if let Some(lifetime) = self.kept_for {
            resolver = Arc::new(KeptAnswers::new(resolver, lifetime));
        }
        let door = Arc::new(Door {
            hosts: vec![
                HOST.to_owned(),
                "unresolvable.example.com".to_owned(),
                HUNG.to_owned(),
            ],
            policy: self.policy,
            limits: self.limits,
            resolver,
            dialer: Arc::new(LabDialer {
                routes: self.routes.into_iter().collect(),
                dials: Arc::clone(&dials),
            }),
            log: Arc::new(DecisionLog::new(DoorName::Turn)),
            mode: self.mode,
            open: OpenTunnels::new(self.metrics.tunnels_open(DoorName::Turn)),
            metrics: self.metrics,
        });
        let server = tokio::spawn(serve(listener, Arc::clone(&door)));
        Lab {
            _dir: dir,
            path,
            door,
            dials,
            lookups,
            server,
        }
    }
}

impl Lab {
    pub(crate) async fn client(&self) -> UnixStream {
        UnixStream::connect(&self.path).await.unwrap()
    }

    fn dials(&self) -> Vec<SocketAddr> {
        self.dials.lock().unwrap().clone()
    }

    fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }

    fn log_has(&self, needle: &str) -> bool {
        self.door
            .log
            .lines()
            .iter()
            .any(|line| line.contains(needle))
    }

    /// Sends `bytes` on a fresh connection; everything the gate sends until it closes.
    pub(crate) async fn exchange(&self, bytes: &[u8]) -> Vec<u8> {
        let mut client = self.client().await;
        client.write_all(bytes).await.unwrap();
        read_all(&mut client).await
    }

    /// Opens a tunnel to `HOST`, asserting the 200.
    pub(crate) async fn tunnel(&self) -> UnixStream {
        let mut client = self.client().await;
        client
            .write_all(
                format!("CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let mut established = vec![0u8; ESTABLISHED.len()];
        timeout(WAIT, client.read_exact(&mut established))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(established, ESTABLISHED);
        client
    }
}

pub(crate) async fn read_all(stream: &mut UnixStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = timeout(WAIT, stream.read_to_end(&mut out)).await.unwrap();
    out
}

async fn upstream_received(task: JoinHandle<Vec<u8>>) -> Vec<u8> {
    timeout(WAIT, task).await.unwrap().unwrap()
}

pub(crate) fn head(target: &str) -> Vec<u8> {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn an_allowed_host_passes_bytes_both_ways() {
    let (upstream, received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    let flight = Hello::named(HOST).flight();
    let mut client = lab.client().await;
    // The head and the first flight in one write: the bytes after the head are kept.
    let mut first = head("api.example.com:443");
    first.extend_from_slice(&flight);
    client.write_all(&first).await.unwrap();
    let mut established = vec![0u8; ESTABLISHED.len()];
    client.read_exact(&mut established).await.unwrap();
    assert_eq!(established, ESTABLISHED);

    let mut echoed = vec![0u8; flight.len()];
    timeout(WAIT, client.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echoed, flight);
    client.write_all(b"application data").await.unwrap();
    let mut echoed = [0u8; 16];
    client.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"application data");
    client.shutdown().await.unwrap();

    let received = upstream_received(received).await;
    assert_eq!(
        &received[..flight.len()],
        &flight[..],
        "the hello goes first"
    );
    assert_eq!(&received[flight.len()..], b"application data");
    assert_eq!(lab.dials(), vec![lab_addr(LAB_ADDR)]);
    assert!(lab.log_has(&format!(
        "door=turn host={HOST} port=443 verdict=allowed reason=via {LAB_ADDR}:443"
    )));
}

#[tokio::test]
async fn a_hello_split_over_three_records_and_five_segments_is_accepted() {
    let (upstream, received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    let handshake = Hello::named(HOST).handshake();
    let flight = records(&handshake, &[300, 900, 0]);
    assert_eq!(flight.len(), handshake.len() + 3 * 5);
    let mut client = lab.tunnel().await;
    let mut start = 0;
    for cut in [1, 303, 310, 1211, flight.len()] {
        client.write_all(&flight[start..cut]).await.unwrap();
        client.flush().await.unwrap();
        start = cut;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut echoed = vec![0u8; flight.len()];
    timeout(WAIT, client.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echoed, flight);
    drop(client);
    assert_eq!(upstream_received(received).await, flight);
}

#[tokio::test]
async fn a_refused_first_flight_closes_the_tunnel_with_nothing_sent_upstream() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "another server name",
            Hello::named("other.example.com").flight(),
            "server_name_mismatch",
        ),
        (
            "no server name",
            Hello::named(HOST).without(0).flight(),
            "no_server_name",
        ),
        (
            "two server names",
            Hello::named(HOST).with(sni(HOST)).flight(),
            "duplicate_server_name",
        ),
        (
            "encrypted client hello",
            Hello::named(HOST).with((0xfe0d, vec![0; 32])).flight(),
            "encrypted_client_hello",
        ),
        (
            "plain HTTP",
            format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n").into_bytes(),
            "not_tls_handshake",
        ),
    ];
    for (what, flight, reason) in cases {
        let (upstream, received) = echo_upstream().await;
        let lab = LabConfig::to(upstream).start();
        let mut client = lab.tunnel().await;
        client.write_all(&flight).await.unwrap();
        assert_eq!(read_all(&mut client).await, b"", "{what}: the gate closes");
        assert_eq!(upstream_received(received).await, b"", "{what}");
        assert!(
            lab.log_has(&format!(
                "host={HOST} port=443 verdict=closed reason={reason}; nothing was sent upstream"
            )),
            "{what}: {:?}",
            lab.door.log.lines()
        );
    }
}

#[tokio::test]
async fn a_first_flight_that_never_completes_times_out() {
    let (upstream, received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.limits.first_flight_timeout = Duration::from_millis(200);
    let lab = config.start();
    let mut client = lab.tunnel().await;
    let flight = Hello::named(HOST).flight();
    client.write_all(&flight[..100]).await.unwrap();
    assert_eq!(read_all(&mut client).await, b"");
    assert_eq!(upstream_received(received).await, b"");
    assert!(lab.log_has("verdict=closed reason=timeout; nothing was sent upstream"));
}

#[tokio::test]
async fn a_tunnel_its_client_never_used_is_closed_not_refused() {
    // An HTTP client's pool may open a connection it then never uses: nothing was refused.
    let (upstream, received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    drop(lab.tunnel().await);
    // The gate drops the upstream connection only after recording why.
    assert_eq!(upstream_received(received).await, b"");
    let lines = lab.door.log.lines();
    assert!(
        lab.log_has(&format!(
            "host={HOST} port=443 verdict=closed reason=client_closed; nothing was sent upstream"
        )),
        "{lines:?}"
    );
    assert!(!lab.log_has("verdict=refused"), "{lines:?}");
}

#[tokio::test]
async fn one_private_answer_among_public_ones_is_refused_and_nothing_dialled() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.answers = vec![(HOST, vec![ip(LAB_ADDR), ip("10.1.2.3"), ip("198.18.0.11")])];
    let lab = config.start();
    assert_eq!(lab.exchange(&head("api.example.com:443")).await, FORBIDDEN);
    assert_eq!(lab.dials(), vec![]);
    assert!(lab.log_has("verdict=refused reason=not_public: 10.1.2.3 private"));
}

#[tokio::test]
async fn the_benchmark_range_is_refused_unless_allowed() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.policy = Policy::default();
    let lab = config.start();
    assert_eq!(lab.exchange(&head("api.example.com:443")).await, FORBIDDEN);
    assert_eq!(lab.dials(), vec![]);
    assert!(lab.log_has(&format!("reason=not_public: {LAB_ADDR} benchmarking")));
}

#[tokio::test]
async fn addresses_are_dialled_in_order_until_one_connects() {
    let (upstream, received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.answers = vec![(HOST, vec![ip("198.18.0.20"), ip(LAB_ADDR)])];
    let lab = config.start();
    let mut client = lab.tunnel().await;
    client
        .write_all(&Hello::named(HOST).flight())
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    read_all(&mut client).await;
    assert!(!upstream_received(received).await.is_empty());
    assert_eq!(
        lab.dials(),
        vec![lab_addr("198.18.0.20"), lab_addr(LAB_ADDR)]
    );
    assert!(lab.log_has(&format!("verdict=allowed reason=via {LAB_ADDR}:443")));
}

#[tokio::test]
async fn every_dial_failing_or_a_failed_lookup_is_a_bad_gateway() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.answers = vec![(HOST, vec![ip("198.18.0.20"), ip("198.18.0.21")])];
    let lab = config.start();
    assert_eq!(
        lab.exchange(&head("api.example.com:443")).await,
        BAD_GATEWAY
    );
    assert_eq!(
        lab.dials(),
        vec![lab_addr("198.18.0.20"), lab_addr("198.18.0.21")]
    );
    assert!(lab.log_has("verdict=failed reason=dial_failed: 198.18.0.20:443 no lab route, 198.18.0.21:443 no lab route"));

    assert_eq!(
        lab.exchange(&head("unresolvable.example.com:443")).await,
        BAD_GATEWAY
    );
    assert!(
        lab.log_has("host=unresolvable.example.com port=443 verdict=failed reason=lookup_failed")
    );
}

/// A resolver that never answers does not hold the connection's slot for good: the lookup
/// fails at its bound, named.
#[tokio::test]
async fn a_lookup_that_never_answers_fails_at_its_bound() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.limits.lookup_timeout = Duration::from_millis(200);
    let lab = config.start();
    assert_eq!(
        lab.exchange(&head(&format!("{HUNG}:443"))).await,
        BAD_GATEWAY
    );
    assert!(
        lab.log_has(&format!(
            "host={HUNG} port=443 verdict=failed reason=lookup_failed: no answer within 200ms"
        )),
        "{:?}",
        lab.door.log.lines()
    );
    assert!(lab.dials().is_empty());
}

#[tokio::test]
async fn kept_answers_serve_a_hosts_next_tunnels_and_are_vetted_and_dropped_after_failed_dials() {
    // Kept answers, every one dialled: one lookup serves both tunnels.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let _accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let mut config = LabConfig::to(upstream);
    config.kept_for = Some(Duration::from_secs(60));
    let lab = config.start();
    for _ in 0..2 {
        let _tunnel = lab.tunnel().await;
    }
    assert_eq!(lab.lookups(), 1, "the second tunnel used the kept answer");
    assert_eq!(lab.dials(), vec![lab_addr(LAB_ADDR); 2]);

    // Kept answers are vetted on every connection: a private one is refused each time.
    let mut config = LabConfig::to(echo_upstream().await.0);
    config.answers = vec![(HOST, vec![ip(LAB_ADDR), ip("10.1.2.3")])];
    config.kept_for = Some(Duration::from_secs(60));
    let lab = config.start();
    for _ in 0..2 {
        assert_eq!(lab.exchange(&head("api.example.com:443")).await, FORBIDDEN);
    }
    assert_eq!(lab.lookups(), 1);
    assert!(lab.dials().is_empty(), "nothing unvetted was dialled");

    // No address of the answer could be dialled: the next connection asks again.
    let mut config = LabConfig::to(echo_upstream().await.0);
    config.answers = vec![(HOST, vec![ip("198.18.0.20")])];
    config.kept_for = Some(Duration::from_secs(60));
    let lab = config.start();
    for _ in 0..2 {
        assert_eq!(
            lab.exchange(&head("api.example.com:443")).await,
            BAD_GATEWAY
        );
    }
    assert_eq!(
        lab.lookups(),
        2,
        "a host whose dials all failed is forgotten"
    );
}

#[tokio::test]
async fn head_refusals_get_their_exact_replies_and_nothing_is_resolved() {
    let (upstream, _received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    let cases: Vec<(Vec<u8>, &[u8], &str)> = vec![
        (
            b"GET http://api.example.com/ HTTP/1.1\r\n\r\n".to_vec(),
            b"HTTP/1.1 405 Method Not Allowed\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "host=http://api.example.com/ verdict=refused reason=method_not_allowed",
        ),
        (
            head("api.example.com:80"),
            b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "host=api.example.com:80 verdict=refused reason=port_not_allowed",
        ),
        (
            head("198.18.0.10:443"),
            b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "host=198.18.0.10:443 verdict=refused reason=ip_literal",
        ),
        (
            head("[2001:4860::1]:443"),
            b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "host=[2001:4860::1]:443 verdict=refused reason=ip_literal",
        ),
        (
            head("other.example.com:443"),
            b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "host=other.example.com port=443 verdict=refused reason=not_in_plan",
        ),
        (
            b"CONNECT api.example.com:443\r\n\r\n".to_vec(),
            b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "verdict=refused reason=malformed_request_line",
        ),
        (
            vec![b'a'; MAX_HEAD + 10],
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "host=- verdict=refused reason=head_too_large",
        ),
    ];
    for (request, want, line) in cases {
        assert_eq!(
            lab.exchange(&request).await,
            want,
            "{}",
            String::from_utf8_lossy(&request[..request.len().min(60)])
        );
        assert!(lab.log_has(line), "{line}: {:?}", lab.door.log.lines());
    }
    assert_eq!(lab.dials(), vec![]);
}

#[tokio::test]
async fn a_slow_head_gets_408() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.limits.head_timeout = Duration::from_millis(200);
    let lab = config.start();
    assert_eq!(
        lab.exchange(b"CONNECT api.example.com:443 HTTP/1.1\r\n")
            .await,
        b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    assert!(lab.log_has("host=api.example.com:443 verdict=refused reason=head_timeout"));
}

/// A head the deadline cuts off while a read is waiting: the line names only the bytes the
/// client sent, never the read buffer's unfilled room.
#[tokio::test]
async fn a_head_cut_off_by_its_timeout_is_logged_as_received() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.limits.head_timeout = Duration::from_millis(200);
    let lab = config.start();
    assert_eq!(
        lab.exchange(b"CONNECT api.exa").await,
        b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    let lines = lab.door.log.lines();
    let line = lines
        .iter()
        .find(|line| line.contains("reason=head_timeout"))
        .unwrap_or_else(|| panic!("no head_timeout line in {lines:?}"));
    assert!(line.contains("host=api.exa "), "{line}");
    assert!(!line.contains('?'), "only the received bytes: {line}");
}

#[tokio::test]
async fn the_129th_connection_gets_503_and_one_log_line() {
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.limits.head_timeout = Duration::from_secs(60);
    let lab = config.start();
    let mut held = Vec::new();
    for _ in 0..128 {
        held.push(lab.client().await);
    }
    // Each held connection is accepted before the next in line; an extra one proves it.
    assert_eq!(lab.exchange(b"").await, OVER_CAP);
    assert_eq!(lab.exchange(b"").await, OVER_CAP);
    let over_cap: Vec<String> = lab
        .door
        .log
        .lines()
        .into_iter()
        .filter(|line| line.contains("over_cap"))
        .collect();
    assert_eq!(
        over_cap,
        vec!["door=turn host=- verdict=refused reason=over_cap: this door already holds 128"]
    );
    // A closed connection frees its slot.
    drop(held.pop());
    let deadline = Instant::now() + WAIT;
    loop {
        let reply = lab.exchange(&head("other.example.com:443")).await;
        if reply != OVER_CAP {
            assert_eq!(reply, ConnectRefusal::NotInPlan.reply());
            break;
        }
        assert!(Instant::now() < deadline, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn log_lines_are_deduplicated_printable_and_bounded() {
    let (upstream, _received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    for _ in 0..3 {
        assert_eq!(
            lab.exchange(&head("other.example.com:443")).await,
            FORBIDDEN
        );
    }
    let long = "a".repeat(500);
    lab.exchange(format!("PUT \u{1b}[31m{long} HTTP/1.1\r\n\r\n").as_bytes())
        .await;
    let lines = lab.door.log.lines();
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.contains("not_in_plan"))
            .count(),
        1
    );
    let escaped = lines
        .iter()
        .find(|line| line.contains("method_not_allowed"))
        .unwrap();
    let destination = escaped
        .split(" verdict=")
        .next()
        .unwrap()
        .strip_prefix("door=turn host=")
        .unwrap();
    assert_eq!(destination.len(), MAX_LOG_TEXT);
    assert!(destination.starts_with("?[31maaa"), "{destination}");
}

#[test]
fn printable_replaces_controls_and_cuts() {
    assert_eq!(printable("a\tb\u{7f}c\u{e9}"), "a?b?c?");
    assert_eq!(printable(&"x".repeat(300)).len(), MAX_LOG_TEXT);
}

/// What stands for the target of a head that did not parse: the second word of what was
/// received of the request line, escaped and bounded, `-` when there is none.
#[test]
fn the_requested_target_is_what_was_received_of_it() {
    let long = format!("CONNECT {}", "a".repeat(300));
    let cases: [(&str, &[u8], &str); 12] = [
        ("nothing received", b"", "-"),
        ("the method only", b"CONNECT", "-"),
        ("the method and its space", b"CONNECT ", "-"),
        ("cut off in the host", b"CONNECT api.exa", "api.exa"),
        ("cut off after the port's colon", b"CONNECT host:", "host:"),
        (
            "cut off in the version",
            b"CONNECT api.example.com:443 HTT",
            "api.example.com:443",
        ),
        (
            "a whole request line",
            b"CONNECT api.example.com:443 HTTP/1.1\r\n",
            "api.example.com:443",
        ),
        (
            "only the request line counts",
            b"GET /x HTTP/1.1\r\nHost: a b\r\n",
            "/x",
        ),
        (
            "control bytes the client sent",
            b"CONNECT a\x1b[2J\x00b\x07",
            "a?[2J?b?",
        ),
        ("bytes that are not UTF-8", b"CONNECT a\xff\xfeb", "a??b"),
        ("a bare line feed", b"CONNECT a\nb", "a?b"),
        (
            "a target over the bound",
            long.as_bytes(),
            &"a".repeat(MAX_LOG_TEXT),
        ),
    ];
    for (what, received, want) in cases {
        assert_eq!(requested_target(received), want, "{what}");
    }
}

/// A deadline that drops the head's read while it waits leaves in the buffer exactly the
/// bytes received, which is all the log line is made from.
#[tokio::test]
async fn a_head_read_cut_off_by_its_deadline_keeps_only_the_bytes_received() {
    let (mut client, mut server) = UnixStream::pair().unwrap();
    let mut buf = Vec::new();
    for part in [&b"CONNECT "[..], b"host", b":"] {
        client.write_all(part).await.unwrap();
        let cut = timeout(Duration::from_millis(50), read_head(&mut server, &mut buf)).await;
        assert!(cut.is_err(), "a partial head never parses");
    }
    assert_eq!(buf, b"CONNECT host:");
    assert_eq!(requested_target(&buf), "host:");
}

#[test]
fn the_log_keeps_at_most_its_bound_of_distinct_lines() {
    let log = DecisionLog::new(DoorName::Build);
    for i in 0..MAX_LOG_LINES + 50 {
        refuse_host(&log, i);
    }
    refuse_host(&log, 0);
    let lines = log.lines();
    assert_eq!(lines.len(), MAX_LOG_LINES);
    assert_eq!(
        lines[0],
        "door=build host=h0.example.com port=443 verdict=refused reason=not_in_plan"
    );
}

#[tokio::test]
async fn a_megabyte_each_way_passes_and_half_close_reaches_upstream() {
    let (upstream, received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    let flight = Hello::named(HOST).flight();
    let payload: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let client = lab.tunnel().await;
    let (mut reader, mut writer) = client.into_split();
    let sent = {
        let mut all = flight.clone();
        all.extend_from_slice(&payload);
        all
    };
    let to_send = sent.clone();
    let writing = tokio::spawn(async move {
        writer.write_all(&to_send).await.unwrap();
        // Half-close: the upstream sees EOF, its echo ends, and so does our read side.
        writer.shutdown().await.unwrap();
    });
    let mut echoed = Vec::new();
    timeout(WAIT, reader.read_to_end(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    writing.await.unwrap();
    assert_eq!(echoed.len(), sent.len());
    assert!(echoed == sent);
    assert!(upstream_received(received).await == sent);
}

// === Decision logs and their subscriptions ===

fn refuse_host(log: &DecisionLog, i: usize) {
    log.record(
        &format!("h{i}.example.com"),
        Some(443),
        Decided::Refused,
        "not_in_plan",
    );
}

fn refused(door: DoorName, i: usize) -> Decision {
    Decision::new(
        door,
        &format!("h{i}.example.com"),
        Some(443),
        Decided::Refused,
        "not_in_plan",
    )
}

/// Ends `subscription` and takes everything it holds.
async fn drain(mut subscription: Subscription) -> Vec<Decision> {
    subscription.end();
    let mut got = Vec::new();
    while let Some(decision) = timeout(WAIT, subscription.next()).await.unwrap() {
        got.push(decision);
    }
    got
}

#[tokio::test]
async fn a_subscription_holds_the_decisions_recorded_while_it_records() {
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    refuse_host(&log, 0);
    let subscription = log.subscribe();
    assert_eq!(log.subscriptions(), 1);
    refuse_host(&log, 1);
    refuse_host(&log, 1);
    refuse_host(&log, 2);
    subscription.end();
    assert_eq!(log.subscriptions(), 0);
    refuse_host(&log, 3);
    assert_eq!(
        drain(subscription).await,
        [refused(DoorName::Turn, 1), refused(DoorName::Turn, 2)],
        "not before it began, not after it ended, each once"
    );
    drop(log.subscribe());
    assert_eq!(log.subscriptions(), 0, "a dropped subscription ends");
}

#[tokio::test]
async fn each_subscription_deduplicates_and_stops_at_its_own_cap() {
    let log = Arc::new(DecisionLog::new(DoorName::Build));
    let first = log.subscribe();
    for i in 0..MAX_LOG_LINES + 50 {
        refuse_host(&log, i);
        refuse_host(&log, i);
    }
    // A second run's subscription counts from nothing.
    let second = log.subscribe();
    refuse_host(&log, 0);
    refuse_host(&log, MAX_LOG_LINES + 49);
    let first = drain(first).await;
    let want: Vec<Decision> = (0..MAX_LOG_LINES)
        .map(|i| refused(DoorName::Build, i))
        .collect();
    assert_eq!(first, want);
    assert_eq!(
        drain(second).await,
        [
            refused(DoorName::Build, 0),
            refused(DoorName::Build, MAX_LOG_LINES + 49)
        ]
    );
}

#[test]
fn a_new_subscription_restarts_the_journal_window() {
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    for i in 0..=MAX_LOG_LINES {
        refuse_host(&log, i);
    }
    let over = format!("door=turn host=h{MAX_LOG_LINES}.example.com port=443");
    let first = "door=turn host=h0.example.com port=443 verdict=refused reason=not_in_plan";
    let lines = log.lines();
    assert_eq!(lines.len(), MAX_LOG_LINES);
    assert!(!lines.iter().any(|line| line.starts_with(&over)));

    let _run = log.subscribe();
    assert!(log.lines().is_empty(), "a new run, a new window");
    refuse_host(&log, MAX_LOG_LINES);
    refuse_host(&log, 0);
    let lines = log.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with(&over), "{lines:?}");
    assert_eq!(lines[1], first, "logged again in the new window");
}

#[tokio::test]
async fn a_tunnel_is_counted_open_from_its_200_to_its_close() {
    let (upstream, received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    assert_eq!(lab.door.open.count(), 0);
    let refused = lab.exchange(&head("elsewhere.example.com:443")).await;
    assert!(refused.starts_with(b"HTTP/1.1 403"), "{refused:?}");
    assert_eq!(lab.door.open.count(), 0, "a refused CONNECT is no tunnel");
    let mut client = lab.tunnel().await;
    assert_eq!(lab.door.open.count(), 1);
    client
        .write_all(&Hello::named(HOST).flight())
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    let _ = read_all(&mut client).await;
    upstream_received(received).await;
    // The tunnel's task ends after both sides closed; wait for it, bounded.
    let closed = async {
        while lab.door.open.count() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    timeout(WAIT, closed).await.expect("the count returns to 0");
}
