//! The counts the real door moves (the serving half's lab: a unix listener, a loopback echo
//! upstream, real ClientHello bytes), read back from the encoded text: each event moves its
//! own series by exactly its amount, and no other series moves.

use std::collections::BTreeMap;
use std::net::IpAddr;

use prometheus_client::encoding::text::encode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{sleep, timeout, Duration, Instant};

use super::*;
use crate::client_hello::tests::Hello;
use crate::serve::tests::{echo_upstream, head, read_all, LabConfig, HOST, LAB_ADDR, WAIT};

const ALLOWED: &str = r#"atelier_gate_connects_allowed_total{door="turn"}"#;
const UPSTREAM: &str = r#"atelier_gate_relayed_bytes_total{door="turn",direction="upstream"}"#;
const DOWNSTREAM: &str = r#"atelier_gate_relayed_bytes_total{door="turn",direction="downstream"}"#;
const OPEN: &str = r#"atelier_gate_tunnels_open{door="turn"}"#;

fn refused(reason: &str) -> String {
    format!(r#"atelier_gate_connects_refused_total{{door="turn",reason="{reason}"}}"#)
}

/// A registry holding the gate's families, and the metrics counting into it.
fn registered() -> (Registry, Metrics) {
    let mut registry = Registry::with_prefix(PREFIX);
    let metrics = Metrics::new(&mut registry);
    (registry, metrics)
}

/// Every sample of the encoded text: `name{labels}` to its value.
fn samples(registry: &Registry) -> BTreeMap<String, i64> {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// The series that changed since `before`, by how much.
fn moved(registry: &Registry, before: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    samples(registry)
        .into_iter()
        .filter_map(|(series, value)| {
            let change = value - before.get(&series).copied().unwrap_or(0);
            (change != 0).then_some((series, change))
        })
        .collect()
}

/// Waits (bounded) until exactly `want` moved since `before`: the tunnel's task counts a
/// moment after the bytes it moved reach the test.
async fn assert_moved(registry: &Registry, before: &BTreeMap<String, i64>, want: &[(&str, i64)]) {
    let want: BTreeMap<String, i64> = want
        .iter()
        .map(|(series, change)| ((*series).to_owned(), *change))
        .collect();
    let deadline = Instant::now() + WAIT;
    while moved(registry, before) != want && Instant::now() < deadline {
        sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(moved(registry, before), want);
}

#[tokio::test]
async fn one_tunnel_and_one_refusal_move_exactly_their_counts() {
    let (registry, metrics) = registered();
    let (upstream, received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.metrics = metrics;
    let lab = config.start();
    let before = samples(&registry);

    let mut client = lab.tunnel().await;
    let mut sent = Hello::named(HOST).flight();
    sent.extend((0..10_000u32).map(|i| (i % 251) as u8));
    client.write_all(&sent).await.unwrap();
    let mut echoed = vec![0u8; sent.len()];
    timeout(WAIT, client.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert!(echoed == sent, "the echo differs");
    let len = i64::try_from(sent.len()).unwrap();
    let tunnel = [(ALLOWED, 1), (UPSTREAM, len), (DOWNSTREAM, len)];
    let mut during = tunnel.to_vec();
    during.push((OPEN, 1));
    assert_moved(&registry, &before, &during).await;

    client.shutdown().await.unwrap();
    read_all(&mut client).await;
    timeout(WAIT, received).await.unwrap().unwrap();
    let reply = lab.exchange(&head("elsewhere.example.com:443")).await;
    assert!(reply.starts_with(b"HTTP/1.1 403"), "{reply:?}");
    let not_in_plan = refused("not_in_plan");
    let mut after = tunnel.to_vec();
    after.push((&not_in_plan, 1));
    assert_moved(&registry, &before, &after).await;
}

#[tokio::test]
async fn each_refusal_and_failure_counts_under_its_own_reason() {
    let (registry, metrics) = registered();
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.limits.head_timeout = Duration::from_millis(200);
    config.metrics = metrics.clone();
    let lab = config.start();
    let private: IpAddr = "10.1.2.3".parse().unwrap();
    let mut config = LabConfig::to(upstream);
    config.answers = vec![(HOST, vec![LAB_ADDR.parse().unwrap(), private])];
    config.metrics = metrics;
    let mixed = config.start();
    let before = samples(&registry);

    // A head that never completes, and one that is not a request line.
    lab.exchange(b"CONNECT api.exa").await;
    lab.exchange(b"CONNECT api.example.com:443\r\n\r\n").await;
    // A planned host nobody can resolve.
    lab.exchange(&head("unresolvable.example.com:443")).await;
    // A planned host with a private answer among public ones.
    mixed.exchange(&head("api.example.com:443")).await;
    // A tunnel whose ClientHello names another host: allowed, then closed.
    let mut client = lab.tunnel().await;
    client
        .write_all(&Hello::named("other.example.com").flight())
        .await
        .unwrap();
    assert_eq!(read_all(&mut client).await, b"");

    let (timed_out, malformed, not_public) = (
        refused("head_timeout"),
        refused("malformed_request_line"),
        refused("not_public"),
    );
    assert_moved(
        &registry,
        &before,
        &[
            (&timed_out, 1),
            (&malformed, 1),
            (
                r#"atelier_gate_connects_failed_total{door="turn",reason="lookup_failed"}"#,
                1,
            ),
            (&not_public, 1),
            (
                r#"atelier_gate_addresses_refused_total{door="turn",reason="private"}"#,
                1,
            ),
            (ALLOWED, 1),
            (
                r#"atelier_gate_first_flights_refused_total{door="turn",reason="server_name_mismatch"}"#,
                1,
            ),
        ],
    )
    .await;
}

/// A tunnel its client closes before any first flight (an HTTP pool's spare connection) is
/// counted as unused, never as a refused first flight.
#[tokio::test]
async fn a_tunnel_closed_unused_counts_as_unused_not_refused() {
    let (registry, metrics) = registered();
    let (upstream, _received) = echo_upstream().await;
    let mut config = LabConfig::to(upstream);
    config.metrics = metrics;
    let lab = config.start();
    let before = samples(&registry);
    drop(lab.tunnel().await);
    assert_moved(
        &registry,
        &before,
        &[
            (ALLOWED, 1),
            (r#"atelier_gate_tunnels_unused_total{door="turn"}"#, 1),
        ],
    )
    .await;
}

/// Each model relay request counts once, under the API its path named (`unknown` for none the
/// relay knows) and its outcome, and the MCP relay's family does not move.
#[tokio::test]
async fn each_model_relay_request_counts_under_its_api_and_outcome() {
    use crate::address::Policy;
    use crate::mcp::tests::support::{send, Upstream};
    use crate::mcp::McpDoor;
    use crate::model::{ModelApi, ModelDoor, ModelRoute};
    use crate::relay::{serve, Relays};
    use crate::serve::DecisionLog;
    use std::sync::Arc;

    let (registry, metrics) = registered();
    let upstream = Upstream::on_loopback().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mcp.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let log = Arc::new(DecisionLog::new(DoorName::Turn));
    let mcp = McpDoor::new("http://127.0.0.1:9/mcp", None, Arc::clone(&log)).unwrap();
    let route = ModelRoute {
        api: ModelApi::Anthropic,
        upstream: format!("http://{}", upstream.addr),
        credential: None,
        model: None,
    };
    let model = ModelDoor::new(vec![(route, None)], log, Policy::default()).unwrap();
    let relays = Relays {
        mcp: Arc::new(mcp.with_metrics(metrics.clone())),
        model: Some(Arc::new(model.with_metrics(metrics))),
    };
    tokio::spawn(serve(listener, relays));
    let before = samples(&registry);
    for (method, target) in [
        ("POST", "/model/anthropic/v1/messages"),
        ("POST", "/model/anthropic/v1/messages/count_tokens"),
        ("POST", "/model/anthropic/v1/%2e%2e/admin"),
        ("PUT", "/model/anthropic/v1/messages"),
        ("POST", "/model/anthropic/v1/messages/batches"),
        ("GET", "/model/openai/models"),
        ("GET", "/model/gemini/models"),
    ] {
        send(&socket, method, target, &[], b"{}").await;
    }
    let series = |api: &str, outcome: &str| {
        format!(r#"atelier_gate_model_requests_total{{api="{api}",outcome="{outcome}"}}"#)
    };
    assert_moved(
        &registry,
        &before,
        &[
            (&series("anthropic", "relayed"), 2),
            (&series("anthropic", "bad_path"), 1),
            (&series("anthropic", "method_not_allowed"), 1),
            (&series("anthropic", "endpoint_not_relayed"), 1),
            (&series("openai", "not_found"), 1),
            (&series("unknown", "not_found"), 1),
        ],
    )
    .await;
}
