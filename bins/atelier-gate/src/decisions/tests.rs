//! The decisions socket through real sockets, beside a door served in-process (the serving
//! half's test lab): a decision whose reply the client saw is always in the stream of a
//! subscriber that half-closes afterwards; several subscribers; every refused subscription by
//! name, with nothing written.

use super::*;
use crate::client_hello::tests::Hello;
use crate::serve::tests::{echo_upstream, head, read_all, LabConfig, HOST, LAB_ADDR};
use crate::serve::{BAD_GATEWAY, FORBIDDEN};
use atelier_proto::egress::{Decision, Verdict};
use std::path::PathBuf;
use tokio::task::JoinHandle;

/// A decisions socket in a temp dir, served until dropped.
struct Socket {
    _dir: tempfile::TempDir,
    path: PathBuf,
    server: JoinHandle<io::Result<()>>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn subscriptions(logs: &[&Arc<DecisionLog>]) -> Subscriptions {
    Subscriptions::new(
        logs.iter()
            .map(|log| (log.door(), Arc::clone(log)))
            .collect(),
    )
}

fn start(subscriptions: Subscriptions) -> Socket {
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join(atelier_layout::names::GATE_DECISIONS_SOCKET_FILE);
    let listener = UnixListener::bind(&path).unwrap();
    let server = tokio::spawn(serve(listener, Arc::new(subscriptions)));
    Socket {
        _dir: dir,
        path,
        server,
    }
}

/// A subscriber of `log`'s door, returned once its subscription records.
async fn subscribe(socket: &Socket, log: &DecisionLog) -> UnixStream {
    let before = log.subscriptions();
    let mut stream = UnixStream::connect(&socket.path).await.unwrap();
    let line = Subscribe::new(log.door()).to_line().unwrap();
    stream.write_all(line.as_bytes()).await.unwrap();
    // The gate echoes the line once it records for the subscription.
    let mut echo = Vec::new();
    while !echo.ends_with(b"\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "the gate closed unconfirmed"
        );
        echo.push(byte[0]);
    }
    assert_eq!(echo, line.as_bytes());
    assert_eq!(log.subscriptions(), before + 1);
    stream
}

/// Half-closes the subscriber's side; every decision the gate writes before it closes.
async fn finish(mut stream: UnixStream) -> Vec<Decision> {
    stream.shutdown().await.unwrap();
    read_all(&mut stream)
        .await
        .split_inclusive(|&byte| byte == b'\n')
        .map(|line| Decision::parse_line(line).unwrap())
        .collect()
}

fn turn(host: &str, port: Option<u16>, verdict: Verdict, reason: &str) -> Decision {
    Decision::new(DoorName::Turn, host, port, verdict, reason)
}

/// What the client does before the subscriber ends its subscription.
enum Client {
    /// Sends a head and reads the reply to its close, which must be this one.
    Exchange(Vec<u8>, &'static [u8]),
    /// Opens a tunnel, reads the 200, and holds the tunnel open.
    Tunnel,
    /// Opens a tunnel, sends this first flight, and reads until the gate closes.
    TunnelWithFlight(Vec<u8>),
}

#[tokio::test]
async fn a_subscriber_has_each_decision_whose_reply_the_client_saw() {
    let allowed = turn(
        HOST,
        Some(443),
        Verdict::Allowed,
        &format!("via {LAB_ADDR}:443"),
    );
    let cases: Vec<(&str, Client, Vec<Decision>)> = vec![
        (
            "a host on no plan: 403",
            Client::Exchange(head("other.example.com:443"), FORBIDDEN),
            vec![turn(
                "other.example.com",
                Some(443),
                Verdict::Refused,
                "not_in_plan",
            )],
        ),
        (
            "a head that does not parse: 403",
            Client::Exchange(head("api.example.com:80"), FORBIDDEN),
            vec![turn(
                "api.example.com:80",
                None,
                Verdict::Refused,
                "port_not_allowed",
            )],
        ),
        (
            "a failed lookup: 502",
            Client::Exchange(head("unresolvable.example.com:443"), BAD_GATEWAY),
            vec![turn(
                "unresolvable.example.com",
                Some(443),
                Verdict::Failed,
                "lookup_failed: no such host",
            )],
        ),
        ("an open tunnel: 200", Client::Tunnel, vec![allowed.clone()]),
        (
            "a refused first flight: 200, then closed",
            Client::TunnelWithFlight(Hello::named("other.example.com").flight()),
            vec![
                allowed.clone(),
                turn(
                    HOST,
                    Some(443),
                    Verdict::Closed,
                    "server_name_mismatch; nothing was sent upstream",
                ),
            ],
        ),
    ];
    for (what, client, want) in cases {
        let (upstream, _received) = echo_upstream().await;
        let lab = LabConfig::to(upstream).start();
        let socket = start(subscriptions(&[&lab.door.log]));
        let subscriber = subscribe(&socket, &lab.door.log).await;
        let _held = match client {
            Client::Exchange(request, reply) => {
                assert_eq!(lab.exchange(&request).await, reply, "{what}");
                None
            }
            Client::Tunnel => Some(lab.tunnel().await),
            Client::TunnelWithFlight(flight) => {
                let mut tunnel = lab.tunnel().await;
                tunnel.write_all(&flight).await.unwrap();
                assert_eq!(read_all(&mut tunnel).await, b"", "{what}");
                None
            }
        };
        assert_eq!(finish(subscriber).await, want, "{what}");
        assert_eq!(lab.door.log.subscriptions(), 0, "{what}: ended");
    }
}

#[tokio::test]
async fn several_subscribers_each_have_every_decision_of_their_door() {
    let (upstream, _received) = echo_upstream().await;
    let lab = LabConfig::to(upstream).start();
    let build = Arc::new(DecisionLog::new(DoorName::Build));
    let socket = start(subscriptions(&[&lab.door.log, &build]));
    let first = subscribe(&socket, &lab.door.log).await;
    let second = subscribe(&socket, &lab.door.log).await;
    let other_door = subscribe(&socket, &build).await;
    for _ in 0..2 {
        assert_eq!(
            lab.exchange(&head("other.example.com:443")).await,
            FORBIDDEN
        );
    }
    let want = [turn(
        "other.example.com",
        Some(443),
        Verdict::Refused,
        "not_in_plan",
    )];
    assert_eq!(finish(first).await, want, "once, though decided twice");
    assert_eq!(finish(second).await, want);
    assert_eq!(finish(other_door).await, []);
}

#[tokio::test]
async fn a_subscriber_that_sends_more_ends_its_subscription() {
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    let socket = start(subscriptions(&[&log]));
    let mut subscriber = subscribe(&socket, &log).await;
    log.record("a.example.com", Some(443), Verdict::Refused, "not_in_plan");
    subscriber.write_all(b"more\n").await.unwrap();
    let rest = read_all(&mut subscriber).await;
    assert_eq!(
        rest,
        turn("a.example.com", Some(443), Verdict::Refused, "not_in_plan")
            .to_line()
            .unwrap()
            .as_bytes()
    );
    assert_eq!(log.subscriptions(), 0);
}

#[tokio::test]
async fn bad_subscriptions_are_refused_by_name() {
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    let mut served = subscriptions(&[&log]);
    served.subscribe_timeout = Duration::from_millis(50);
    let line = |json: &str| format!("{json}\n").into_bytes();
    let mut over_the_cap = vec![b' '; MAX_SUBSCRIBE_LINE];
    over_the_cap.push(b'\n');
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("the git door", line(r#"{"v":1,"door":"git"}"#), "git_door"),
        (
            "a door this gate does not serve",
            line(r#"{"v":1,"door":"build"}"#),
            "not_served",
        ),
        (
            "an unknown key",
            line(r#"{"v":1,"door":"turn","from":0}"#),
            "malformed",
        ),
        (
            "version 2",
            line(r#"{"v":2,"door":"turn"}"#),
            "unsupported_version",
        ),
        ("not JSON", line("turn"), "malformed"),
        ("one byte over the cap", over_the_cap, "too_long"),
        (
            "no newline in many bytes",
            vec![b'{'; 10 * MAX_SUBSCRIBE_LINE],
            "too_long",
        ),
        (
            "bytes after the line",
            b"{\"v\":1,\"door\":\"turn\"}\nmore".to_vec(),
            "trailing_bytes",
        ),
        ("closed inside the line", b"{\"v\":1,".to_vec(), "closed"),
        ("closed before a byte", Vec::new(), "closed"),
    ];
    for (what, bytes, name) in cases {
        let error = read_subscription(&mut &bytes[..], &served)
            .await
            .unwrap_err();
        assert_eq!(error.as_str(), name, "{what}: {error}");
    }
    // A subscriber that says nothing and keeps its side open.
    let (_open, mut silent) = tokio::io::duplex(64);
    let error = read_subscription(&mut silent, &served).await.unwrap_err();
    assert_eq!(error.as_str(), "subscribe_timeout", "{error}");
    assert_eq!(log.subscriptions(), 0);
}

#[tokio::test]
async fn a_refused_subscription_gets_nothing_and_a_closed_connection() {
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    let mut served = subscriptions(&[&log]);
    served.subscribe_timeout = Duration::from_millis(100);
    let socket = start(served);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("the git door", b"{\"v\":1,\"door\":\"git\"}\n".to_vec()),
        ("over the cap", vec![b'{'; MAX_SUBSCRIBE_LINE + 1]),
        ("nothing within the timeout", Vec::new()),
    ];
    for (what, bytes) in cases {
        let mut stream = UnixStream::connect(&socket.path).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        assert_eq!(read_all(&mut stream).await, b"", "{what}");
        assert_eq!(log.subscriptions(), 0, "{what}");
    }
}

#[tokio::test]
async fn a_subscriber_over_the_bound_is_closed_unread() {
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    let mut served = subscriptions(&[&log]);
    served.max_subscribers = 1;
    let socket = start(served);
    let first = subscribe(&socket, &log).await;
    let mut second = UnixStream::connect(&socket.path).await.unwrap();
    // The gate may close before or after this write arrives; either way nothing comes back.
    let _ = second
        .write_all(Subscribe::new(DoorName::Turn).to_line().unwrap().as_bytes())
        .await;
    assert_eq!(read_all(&mut second).await, b"");
    assert_eq!(log.subscriptions(), 1);
    assert_eq!(finish(first).await, []);
}
