//! The real gate binary, socket-activated, in the lab network (`support::lab`): real DNS from
//! dnsmasq, real TLS servers on 198.18.0.0/15 in a namespace of their own, real ClientHellos
//! from rustls (as sent, edited, or re-framed), the MCP relay against a Publication API
//! stand-in, and the model relay against a model provider stand-in its route names by a DNS
//! name: the key its credential holds reaches the provider, and a name that resolves to no
//! public address is never dialled. Needs root, iproute2 and dnsmasq-base; never skips.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::thread::sleep;
use std::time::Duration;

use crate::support::lab::{GateDoor, Lab};
use crate::support::mcp::{send, Upstream};
use crate::support::model::ModelUpstream;
use crate::support::tls::{
    client_hello, connect, finish_and_echo, handshake_of, read_to_close, records,
    server_name_extension, with_extension, LabCa, TlsServer, ESTABLISHED,
};
use atelier_proto::egress::{Decision, Verdict};
use atelier_proto::Door;

const HOST: &str = "api.example.com";
const HOST_ADDR: &str = "198.18.0.10";
const DEVELOPMENT: (&str, &str) = ("ATELIER_DEPLOYMENT", "development");
const FORBIDDEN: &[u8] =
    b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
const OVER_CAP: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// A lab with `records`, a TLS server for `HOST` on each of `servers`, and a gate whose turn
/// door may reach `HOST` (and `hosts`), the benchmark range allowed.
struct Tunnels {
    lab: Lab,
    ca: LabCa,
    servers: Vec<TlsServer>,
    gate: support::lab::Gate,
}

impl Tunnels {
    fn start(
        records: &[(&str, &str)],
        servers: &[&str],
        extra: &[&str],
        hosts: &[&str],
    ) -> Tunnels {
        Tunnels::start_with(records, servers, extra, hosts, &["--allow-benchmark-range"])
    }

    fn start_with(
        records: &[(&str, &str)],
        servers: &[&str],
        extra: &[&str],
        hosts: &[&str],
        args: &[&str],
    ) -> Tunnels {
        let lab = Lab::start(records, extra);
        let ca = LabCa::new();
        let mut plan_hosts = vec![HOST];
        plan_hosts.extend(hosts);
        let config = ca.server_config(&plan_hosts);
        let servers = servers
            .iter()
            .map(|addr| {
                let listener = lab.listen(addr, 443);
                let _runtime = lab.runtime.enter();
                TlsServer::start(listener, config.clone())
            })
            .collect();
        let gate = lab.gate(
            &[GateDoor::connect("turn", &plan_hosts)],
            args,
            &[DEVELOPMENT],
        );
        assert!(gate.ready, "no READY=1:\n{}", gate.log());
        Tunnels {
            lab,
            ca,
            servers,
            gate,
        }
    }

    fn turn(&self) -> &std::path::Path {
        self.gate.socket("turn")
    }

    /// Sends `flight` as the first flight to `HOST` and asserts the gate closes the tunnel
    /// with `reason`, the upstream having received not one byte.
    fn assert_refused(&self, flight: &[u8], reason: &str) {
        let (mut stream, reply) = connect(self.turn(), HOST);
        assert_eq!(reply, ESTABLISHED);
        stream.write_all(flight).unwrap();
        assert_eq!(
            read_to_close(&mut stream),
            b"",
            "the gate closes the tunnel"
        );
        let ended = self.servers[0].wait_ended(1);
        assert_eq!(ended[0].bytes_in, 0, "nothing was sent upstream");
        assert_eq!(ended[0].handshake_sni, None);
        self.gate.wait_for_log(&format!(
            "door=turn host={HOST} port=443 verdict=closed reason={reason}; nothing was sent upstream"
        ));
    }
}

fn one_host() -> Tunnels {
    Tunnels::start(&[(HOST, HOST_ADDR)], &[HOST_ADDR], &[], &[])
}

#[test]
fn an_allowed_host_passes_bytes_both_ways() {
    let lab = one_host();
    let config = lab.ca.client_config(true);
    let (connection, flight) = client_hello(&config, HOST);
    let (mut stream, reply) = connect(lab.turn(), HOST);
    assert_eq!(reply, ESTABLISHED);
    stream.write_all(&flight).unwrap();
    let payload: Vec<u8> = (0..256 * 1024).map(|i| (i % 253) as u8).collect();
    finish_and_echo(connection, stream, HOST, &payload);
    let ended = lab.servers[0].wait_ended(1);
    assert_eq!(ended[0].handshake_sni.as_deref(), Some(HOST));
    lab.gate.wait_for_log(&format!(
        "door=turn host={HOST} port=443 verdict=allowed reason=via {HOST_ADDR}:443"
    ));
    // One lookup for the one tunnel: the gate resolves once and pins the answer.
    assert_eq!(lab.lab.queries("A", HOST), 1);
}

/// Every sample the gate's metrics socket at `socket` serves: `name{labels}` to its value.
fn scrape(socket: &std::path::Path) -> BTreeMap<String, i64> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(support::lab::WAIT)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: gate\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = String::from_utf8(read_to_close(&mut stream)).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// Waits (bounded) until exactly `want` moved at `socket` since `before`, each series by its
/// amount and no other series at all: the gate counts a moment after the bytes it moved
/// reach the test.
fn assert_moved(socket: &std::path::Path, before: &BTreeMap<String, i64>, want: &[(&str, i64)]) {
    let want: BTreeMap<String, i64> = want
        .iter()
        .map(|(series, change)| ((*series).to_owned(), *change))
        .collect();
    let moved = || -> BTreeMap<String, i64> {
        scrape(socket)
            .into_iter()
            .filter_map(|(series, value)| {
                let change = value - before.get(&series).copied().unwrap_or(0);
                (change != 0).then_some((series, change))
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + support::lab::WAIT;
    while moved() != want && std::time::Instant::now() < deadline {
        sleep(Duration::from_millis(10));
    }
    assert_eq!(moved(), want);
}

/// One tunnel relaying a known number of bytes each way (a raw echo upstream: the gate reads
/// only the ClientHello) and one refused CONNECT, read from the real gate's metrics socket.
#[test]
fn the_metrics_socket_counts_one_tunnel_and_one_refusal_exactly() {
    let lab = Tunnels::start(&[(HOST, HOST_ADDR)], &[], &[], &[]);
    let listener = lab.lab.listen(HOST_ADDR, 443);
    let echo = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = stream.try_clone().unwrap();
        std::io::copy(&mut reader, &mut stream).unwrap()
    });
    let metrics = lab.gate.socket("metrics");
    // The lab's activation probe was refused before this: the baseline holds it.
    let before = scrape(metrics);

    let (mut stream, reply) = connect(lab.turn(), HOST);
    assert_eq!(reply, ESTABLISHED);
    let (_, mut sent) = client_hello(&lab.ca.client_config(true), HOST);
    sent.extend((0..32 * 1024u32).map(|i| (i % 251) as u8));
    stream.write_all(&sent).unwrap();
    let mut echoed = vec![0u8; sent.len()];
    std::io::Read::read_exact(&mut stream, &mut echoed).unwrap();
    assert!(echoed == sent, "the echo differs");
    let len = i64::try_from(sent.len()).unwrap();
    let tunnel = [
        (r#"atelier_gate_connects_allowed_total{door="turn"}"#, 1),
        (
            r#"atelier_gate_relayed_bytes_total{door="turn",direction="upstream"}"#,
            len,
        ),
        (
            r#"atelier_gate_relayed_bytes_total{door="turn",direction="downstream"}"#,
            len,
        ),
    ];
    let open = r#"atelier_gate_tunnels_open{door="turn"}"#;
    let mut during = tunnel.to_vec();
    during.push((open, 1));
    assert_moved(metrics, &before, &during);
    assert_eq!(scrape(metrics)[open], 1);

    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_to_close(&mut stream), b"");
    assert_eq!(echo.join().unwrap(), sent.len() as u64);
    let (_, reply) = connect(lab.turn(), "elsewhere.example.com");
    assert_eq!(reply, FORBIDDEN);
    let mut after = tunnel.to_vec();
    after.push((
        r#"atelier_gate_connects_refused_total{door="turn",reason="not_in_plan"}"#,
        1,
    ));
    assert_moved(metrics, &before, &after);
    assert_eq!(scrape(metrics)[open], 0);
}

#[test]
fn a_subscriber_has_the_runs_allowed_and_refused_decisions_from_the_real_gate() {
    let lab = one_host();
    // The activation probe's refusal came before the subscription: not this run's.
    let subscriber = lab.gate.subscribe(Door::Turn);
    let (connection, flight) = client_hello(&lab.ca.client_config(true), HOST);
    let (mut stream, reply) = connect(lab.turn(), HOST);
    assert_eq!(reply, ESTABLISHED);
    stream.write_all(&flight).unwrap();
    finish_and_echo(connection, stream, HOST, b"through the gate");
    let (_refused, reply) = connect(lab.turn(), "other.example.com");
    assert_eq!(reply, FORBIDDEN);
    // The program has its answers; sited ends the subscription.
    let decisions = subscriber.finish();
    assert_eq!(
        decisions,
        [
            Decision::new(
                Door::Turn,
                HOST,
                Some(443),
                Verdict::Allowed,
                &format!("via {HOST_ADDR}:443")
            ),
            Decision::new(
                Door::Turn,
                "other.example.com",
                Some(443),
                Verdict::Refused,
                "not_in_plan"
            ),
        ]
    );
    let lines: Vec<String> = decisions.iter().map(Decision::line).collect();
    assert_eq!(
        lines,
        [
            format!("[egress] CONNECT {HOST}:443 → {HOST_ADDR}:443 (allowed)"),
            "[egress] refused CONNECT other.example.com:443 — not_in_plan".to_owned(),
        ]
    );
    // The journal has them too, with their fields.
    lab.gate.wait_for_log(
        "[egress] refused CONNECT other.example.com:443 — not_in_plan door=turn host=other.example.com port=443 verdict=refused reason=not_in_plan",
    );
}

#[test]
fn a_dns_answer_with_one_private_address_among_public_ones_is_refused() {
    let lab = Tunnels::start(
        &[
            ("mixed.example.com", "198.18.0.10"),
            ("mixed.example.com", "10.1.2.3"),
            ("mixed.example.com", "198.18.0.11"),
            ("mixed6.example.com", "198.18.0.10"),
            ("mixed6.example.com", "fd00::10"),
        ],
        &["198.18.0.10", "198.18.0.11"],
        &[],
        &["mixed.example.com", "mixed6.example.com"],
    );
    let (_stream, reply) = connect(lab.turn(), "mixed.example.com");
    assert_eq!(reply, FORBIDDEN);
    lab.gate.wait_for_log(
        "door=turn host=mixed.example.com port=443 verdict=refused reason=not_public: 10.1.2.3 private",
    );
    let (_stream, reply) = connect(lab.turn(), "mixed6.example.com");
    assert_eq!(reply, FORBIDDEN);
    lab.gate.wait_for_log(
        "door=turn host=mixed6.example.com port=443 verdict=refused reason=not_public: fd00::10 unique_local",
    );
    // Nothing was dialled: the public answers' servers never saw a connection.
    sleep(Duration::from_millis(200));
    for server in &lab.servers {
        assert_eq!(server.accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
    assert_eq!(lab.lab.queries("A", "mixed.example.com"), 1);
}

#[test]
fn a_server_name_other_than_the_connect_host_is_refused() {
    let lab = one_host();
    let (_, flight) = client_hello(&lab.ca.client_config(true), "other.example.com");
    lab.assert_refused(&flight, "server_name_mismatch");
}

#[test]
fn a_hello_without_a_server_name_is_refused() {
    let lab = one_host();
    let (_, flight) = client_hello(&lab.ca.client_config(false), HOST);
    lab.assert_refused(&flight, "no_server_name");
}

#[test]
fn a_hello_with_two_server_names_is_refused() {
    let lab = one_host();
    let (_, flight) = client_hello(&lab.ca.client_config(true), HOST);
    let flight = with_extension(&flight, 0x0000, &server_name_extension(HOST));
    lab.assert_refused(&flight, "duplicate_server_name");
}

#[test]
fn an_encrypted_client_hello_is_refused() {
    let lab = one_host();
    let (_, flight) = client_hello(&lab.ca.client_config(true), HOST);
    // An outer ECH extension (0xfe0d): type outer, a cipher suite, config id, enc, payload.
    let mut ech = vec![0x00, 0x00, 0x01, 0x00, 0x01, 0x2a, 0x00, 0x20];
    ech.extend_from_slice(&[0x11; 32]);
    ech.extend_from_slice(&[0x00, 0x40]);
    ech.extend_from_slice(&[0x22; 64]);
    let flight = with_extension(&flight, 0xfe0d, &ech);
    lab.assert_refused(&flight, "encrypted_client_hello");
}

#[test]
fn a_first_flight_that_is_not_tls_is_refused() {
    let lab = one_host();
    lab.assert_refused(
        format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes(),
        "not_tls_handshake",
    );
}

#[test]
fn a_hello_split_over_three_records_and_five_segments_is_accepted() {
    let lab = one_host();
    let (connection, flight) = client_hello(&lab.ca.client_config(true), HOST);
    let handshake = handshake_of(&flight);
    let third = handshake.len() / 3;
    let split = records(&handshake, &[third, 2 * third]);
    assert_eq!(split.len(), handshake.len() + 3 * 5, "three records");
    let (mut stream, reply) = connect(lab.turn(), HOST);
    assert_eq!(reply, ESTABLISHED);
    // Five writes, each cut inside a header or a body, with pauses so each is its own read.
    let cuts = [3, third + 2, third + 9, 2 * third + 12, split.len()];
    let mut start = 0;
    for cut in cuts {
        stream.write_all(&split[start..cut]).unwrap();
        start = cut;
        sleep(Duration::from_millis(30));
    }
    finish_and_echo(connection, stream, HOST, b"after a split hello");
    let ended = lab.servers[0].wait_ended(1);
    assert_eq!(ended[0].handshake_sni.as_deref(), Some(HOST));
}

#[test]
fn the_129th_concurrent_tunnel_is_refused_and_a_freed_slot_serves_again() {
    let lab = one_host();
    let config = lab.ca.client_config(true);
    let mut open = Vec::new();
    for _ in 0..128 {
        let (mut connection, flight) = client_hello(&config, HOST);
        let (mut stream, reply) = connect(lab.turn(), HOST);
        assert_eq!(reply, ESTABLISHED);
        stream.write_all(&flight).unwrap();
        // Complete the handshake so the tunnel is really open end to end.
        let mut greeting = [0u8; 22];
        std::io::Read::read_exact(
            &mut rustls::Stream::new(&mut connection, &mut stream),
            &mut greeting,
        )
        .unwrap();
        assert_eq!(&greeting, b"hello api.example.com\n");
        open.push((connection, stream));
    }
    let (_stream, reply) = connect(lab.turn(), HOST);
    assert_eq!(reply, OVER_CAP);
    lab.gate.wait_for_log(
        "door=turn host=- verdict=refused reason=over_cap: this door already holds 128",
    );
    drop(open.pop());
    let deadline = std::time::Instant::now() + support::lab::WAIT;
    loop {
        let (connection, flight) = client_hello(&config, HOST);
        let (mut stream, reply) = connect(lab.turn(), HOST);
        if reply == ESTABLISHED {
            stream.write_all(&flight).unwrap();
            finish_and_echo(connection, stream, HOST, b"the 129th, later");
            break;
        }
        assert_eq!(reply, OVER_CAP);
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_dead_address_among_the_answers_is_skipped() {
    // 198.18.0.20 is on the upstream side but nothing listens: its dial is refused at once.
    let lab = Tunnels::start(
        &[
            ("two.example.com", "198.18.0.20"),
            ("two.example.com", HOST_ADDR),
        ],
        &[HOST_ADDR],
        &[],
        &["two.example.com"],
    );
    let (connection, flight) = client_hello(&lab.ca.client_config(true), "two.example.com");
    let (mut stream, reply) = connect(lab.turn(), "two.example.com");
    assert_eq!(reply, ESTABLISHED);
    stream.write_all(&flight).unwrap();
    finish_and_echo(
        connection,
        stream,
        "two.example.com",
        b"through the live one",
    );
    lab.gate
        .wait_for_log("host=two.example.com port=443 verdict=allowed reason=via 198.18.0.10:443");
    let ended = lab.servers[0].wait_ended(1);
    assert_eq!(ended[0].handshake_sni.as_deref(), Some("two.example.com"));
}

#[test]
fn the_benchmark_range_is_refused_without_the_test_flag() {
    let lab = Tunnels::start_with(&[(HOST, HOST_ADDR)], &[HOST_ADDR], &[], &[], &[]);
    let (_stream, reply) = connect(lab.turn(), HOST);
    assert_eq!(reply, FORBIDDEN);
    lab.gate
        .wait_for_log("verdict=refused reason=not_public: 198.18.0.10 benchmarking");
    assert_eq!(
        lab.servers[0]
            .accepted
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

// === The MCP relay ===

const PUBLICATION: &str = "publication.example.org";
const PUBLICATION_ADDR: &str = "198.18.0.30";
const KEY: &str = "lab-publication-key-93c1";

struct Relay {
    lab: Lab,
    upstream: Upstream,
    gate: support::lab::Gate,
}

fn relay() -> Relay {
    let lab = Lab::start(&[(PUBLICATION, PUBLICATION_ADDR)], &[]);
    let listener = lab.listen(PUBLICATION_ADDR, 80);
    let redirect_target = format!("http://{PUBLICATION}/followed/mcp");
    let upstream = {
        let _runtime = lab.runtime.enter();
        Upstream::start(listener, &redirect_target)
    };
    let credentials = lab.path("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("PUBLICATION_API_KEY"), format!("{KEY}\n")).unwrap();
    let url = format!("http://{PUBLICATION}/publication/server_api/v2/mcp");
    let gate = lab.gate(
        &[GateDoor {
            name: "turn",
            hosts: &[HOST],
            mcp_upstream: Some(&url),
            mcp_credential: Some("PUBLICATION_API_KEY"),
            model_routes: None,
        }],
        &[],
        &[("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap())],
    );
    assert!(gate.ready, "no READY=1:\n{}", gate.log());
    Relay {
        lab,
        upstream,
        gate,
    }
}

#[test]
fn the_relay_adds_the_key_upstream_drops_disallowed_headers_and_never_echoes_the_key() {
    let relay = relay();
    let response = relay.lab.runtime.block_on(send(
        relay.gate.socket("mcp"),
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-session-id", "lab-1"),
            ("authorization", "Bearer from-the-agent"),
            ("x-api-key", "forged-by-the-agent"),
            ("cookie", "agent=1"),
        ],
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
    ));
    assert_eq!(response.status.as_u16(), 200);
    let headers = format!("{:?}", response.headers);
    let body = relay.lab.runtime.block_on(response.text());
    assert!(body.contains("tools/list"), "{body}");
    assert!(
        !headers.contains(KEY) && !body.contains(KEY),
        "{headers} {body}"
    );
    assert!(!headers.contains("set-cookie") && !headers.contains("x-powered-by"));
    let seen = relay.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/publication/server_api/v2/mcp");
    assert_eq!(seen[0].header("x-api-key"), [KEY]);
    assert_eq!(seen[0].header("mcp-session-id"), ["lab-1"]);
    assert!(seen[0].header("authorization").is_empty());
    assert!(seen[0].header("cookie").is_empty());
    assert!(!relay.gate.log().contains(KEY), "the key is in no log line");
}

#[test]
fn the_relay_streams_an_sse_response_as_it_arrives() {
    let relay = relay();
    relay.upstream.push_event("event: message\ndata: first\n\n");
    let runtime = &relay.lab.runtime;
    let mut response = runtime.block_on(send(
        relay.gate.socket("mcp"),
        "GET",
        "/mcp",
        &[("accept", "text/event-stream"), ("mcp-session-id", "lab-2")],
        b"",
    ));
    assert_eq!(response.status.as_u16(), 200);
    assert_eq!(response.header("content-type"), ["text/event-stream"]);
    let first = runtime
        .block_on(async { tokio::time::timeout(support::lab::WAIT, response.next_chunk()).await })
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"event: message\ndata: first\n\n");
    // Only now does the second event exist upstream.
    relay
        .upstream
        .push_event("event: message\ndata: second\n\n");
    let second = runtime
        .block_on(async { tokio::time::timeout(support::lab::WAIT, response.next_chunk()).await })
        .unwrap()
        .unwrap();
    assert_eq!(&second[..], b"event: message\ndata: second\n\n");
}

#[test]
fn the_relay_refuses_an_upstream_redirect() {
    let relay = relay();
    let response = relay.lab.runtime.block_on(send(
        relay.gate.socket("mcp"),
        "POST",
        "/mcp",
        &[("mcp-session-id", "redirect")],
        b"{}",
    ));
    assert_eq!(response.status.as_u16(), 502);
    assert!(response.header("location").is_empty());
    let body = relay.lab.runtime.block_on(response.text());
    assert!(body.contains(r#""reason":"upstream_redirect""#), "{body}");
    sleep(Duration::from_millis(200));
    let seen = relay.upstream.seen();
    assert_eq!(seen.len(), 1, "the redirect was not followed: {seen:?}");
    relay
        .gate
        .wait_for_log("door=turn host=mcp verdict=refused reason=POST /mcp upstream_redirect");
    // Counted before the agent had its answer, as the relay's one request.
    let counted = scrape(relay.gate.socket("metrics"));
    let mcp: Vec<(&String, &i64)> = counted
        .iter()
        .filter(|(series, _)| series.starts_with("atelier_gate_mcp_requests_total"))
        .collect();
    assert_eq!(
        mcp,
        [(
            &r#"atelier_gate_mcp_requests_total{outcome="upstream_redirect"}"#.to_owned(),
            &1
        )]
    );
}

// === The model relay ===

const MODEL_UPSTREAM: &str = "llm.example.com";
const MODEL_ADDR: &str = "198.18.0.40";
const MODEL_KEY: &str = "lab-model-key-5e27";
const MODEL_PLACEHOLDER: &str = "placeholder-the-agent-holds";

/// A lab with `records`, the model provider stand-in on `MODEL_ADDR`:80, and the real gate
/// serving the turn door with the MCP relay (to the Publication API's name, never dialled here)
/// and a model relay over `routes`: the benchmark range allowed in development, and
/// `MODEL_KEY` as the `ANTHROPIC_API_KEY` credential in its `CREDENTIALS_DIRECTORY`.
struct ModelRelay {
    lab: Lab,
    upstream: ModelUpstream,
    gate: support::lab::Gate,
}

fn model_relay(records: &[(&str, &str)], routes: serde_json::Value) -> ModelRelay {
    let lab = Lab::start(records, &[MODEL_ADDR]);
    let listener = lab.listen(MODEL_ADDR, 80);
    let upstream = {
        let _runtime = lab.runtime.enter();
        ModelUpstream::start(listener)
    };
    let credentials = lab.path("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(
        credentials.join("ANTHROPIC_API_KEY"),
        format!("{MODEL_KEY}\n"),
    )
    .unwrap();
    let mcp = format!("http://{PUBLICATION}/publication/server_api/v2/mcp");
    let gate = lab.gate(
        &[GateDoor {
            name: "turn",
            hosts: &[HOST],
            mcp_upstream: Some(&mcp),
            mcp_credential: None,
            model_routes: Some(routes),
        }],
        &["--allow-benchmark-range"],
        &[
            DEVELOPMENT,
            ("CREDENTIALS_DIRECTORY", credentials.to_str().unwrap()),
        ],
    );
    assert!(gate.ready, "no READY=1:\n{}", gate.log());
    ModelRelay {
        lab,
        upstream,
        gate,
    }
}

impl ModelRelay {
    /// Sends a POST to `target` on the relays' socket, with the agent's placeholder key.
    fn post(&self, target: &str) -> support::mcp::Streamed {
        self.lab.runtime.block_on(send(
            self.gate.socket("mcp"),
            "POST",
            target,
            &[
                ("x-api-key", MODEL_PLACEHOLDER),
                ("authorization", &*format!("Bearer {MODEL_PLACEHOLDER}")),
            ],
            br#"{"model":"claude","messages":[]}"#,
        ))
    }
}

#[test]
fn the_binary_relays_models_by_name_with_the_key_its_credential_holds() {
    let relay = model_relay(
        &[(MODEL_UPSTREAM, MODEL_ADDR)],
        serde_json::json!([{
            "api": "anthropic",
            "upstream": format!("http://{MODEL_UPSTREAM}"),
            "credential": "ANTHROPIC_API_KEY",
        }]),
    );
    let response = relay.post("/model/anthropic/v1/messages?beta=true");
    assert_eq!(response.status.as_u16(), 200, "{}", relay.gate.log());
    let headers = format!("{:?}", response.headers);
    let body = relay.lab.runtime.block_on(response.text());
    assert!(
        !headers.contains(MODEL_KEY) && !body.contains(MODEL_KEY),
        "{headers} {body}"
    );
    let seen = relay.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/v1/messages?beta=true");
    assert_eq!(seen[0].header("x-api-key"), [MODEL_KEY]);
    assert!(seen[0].header("authorization").is_empty());
    let all = format!("{:?}", seen[0].headers);
    assert!(
        !all.contains(MODEL_PLACEHOLDER),
        "the placeholder reached upstream: {all}"
    );
    // Found by its name, through the lab's DNS.
    assert!(relay.lab.queries("A", MODEL_UPSTREAM) >= 1);
    relay
        .gate
        .wait_for_log("door=turn host=model verdict=relayed reason=POST /model/anthropic 200");
    relay
        .gate
        .wait_for_log("[egress] model relay POST /model/anthropic 200");
    assert!(
        !relay.gate.log().contains(MODEL_KEY),
        "the key is in no log line"
    );
}

/// Each route's name resolves, in the lab's DNS, to an address that is not public: loopback,
/// where a stand-in listens on the gate's own loopback (reached at once, were it dialled), and
/// a private one. Neither is dialled: the relay's resolver keeps public addresses only.
#[test]
fn a_model_host_whose_name_resolves_to_no_public_address_is_never_dialled() {
    let relay = model_relay(
        &[
            ("loopback.example.com", "127.0.0.1"),
            ("private.example.com", "10.0.0.7"),
        ],
        serde_json::json!([
            {
                "api": "anthropic",
                "upstream": "http://loopback.example.com",
                "credential": "ANTHROPIC_API_KEY",
            },
            {
                "api": "openai",
                "upstream": "http://private.example.com/v1",
                "credential": null,
            },
        ]),
    );
    let gate_side = {
        let listener = relay.lab.listen_gate_side("127.0.0.1", 80);
        let _runtime = relay.lab.runtime.enter();
        ModelUpstream::start(listener)
    };
    for (target, api) in [
        ("/model/anthropic/v1/messages", "anthropic"),
        ("/model/openai/v1/chat/completions", "openai"),
    ] {
        let response = relay.post(target);
        assert_eq!(response.status.as_u16(), 502, "{}", relay.gate.log());
        let body = relay.lab.runtime.block_on(response.text());
        assert!(
            body.contains(r#""reason":"upstream_unreachable""#),
            "{body}"
        );
        relay.gate.wait_for_log(&format!(
            "door=turn host=model verdict=refused reason=POST /model/{api} upstream_unreachable"
        ));
    }
    // The operator sees why: the resolver's refusal, through the client's error.
    relay.gate.wait_for_log(
        "loopback.example.com: it resolves to an address that is not public: 127.0.0.1 loopback",
    );
    relay.gate.wait_for_log(
        "private.example.com: it resolves to an address that is not public: 10.0.0.7 private",
    );
    // Both names were looked up, and nothing reached either stand-in.
    assert!(relay.lab.queries("A", "loopback.example.com") >= 1);
    assert!(relay.lab.queries("A", "private.example.com") >= 1);
    sleep(Duration::from_millis(200));
    assert!(gate_side.seen().is_empty(), "{:?}", gate_side.seen());
    assert!(
        relay.upstream.seen().is_empty(),
        "{:?}",
        relay.upstream.seen()
    );
    assert!(
        !relay.gate.log().contains(MODEL_KEY),
        "the key is in no log line"
    );
}
