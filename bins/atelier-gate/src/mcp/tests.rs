//! The relay over a real unix socket against a Publication API stand-in on loopback: headers by
//! allowlist both ways, the key added upstream and never shown to the agent, SSE streamed as it
//! arrives, redirects refused, and every refusal by name with nothing sent upstream.

use super::*;
use atelier_proto::egress::Decision;
use atelier_proto::Door as DoorName;
use std::path::PathBuf;
use tokio::net::UnixListener;
use tokio::time::timeout;

// The model relay's tests use it too (a file loaded as a module once).
#[path = "../../tests/support/mcp.rs"]
pub(crate) mod support;

use support::{send, Upstream};

const KEY: &str = "pub-key-5f1c0e";
const WAIT: Duration = Duration::from_secs(10);

struct Relay {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    door: Arc<McpDoor>,
}

fn start(upstream_url: &str, key: Option<&str>) -> Relay {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mcp.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let door = Arc::new(
        McpDoor::new(
            upstream_url,
            key.map(|key| Secret::new(key.to_owned())),
            turn_log(),
        )
        .unwrap(),
    );
    let relays = crate::relay::Relays {
        mcp: Arc::clone(&door),
        model: None,
    };
    tokio::spawn(crate::relay::serve(listener, relays));
    Relay {
        _dir: dir,
        socket,
        door,
    }
}

fn url(upstream: &Upstream) -> String {
    format!("http://{}/publication/server_api/v2/mcp", upstream.addr)
}

fn turn_log() -> Arc<DecisionLog> {
    Arc::new(DecisionLog::new(DoorName::Turn))
}

fn has_line(door: &McpDoor, needle: &str) -> bool {
    door.log.lines().iter().any(|line| line.contains(needle))
}

#[tokio::test]
async fn a_post_is_relayed_with_the_key_added_and_headers_by_allowlist() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), Some(KEY));
    let response = send(
        &relay.socket,
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
            ("mcp-session-id", "s-1"),
            ("authorization", "Bearer agent-made-up"),
            ("cookie", "agent=1"),
            ("x-api-key", "forged-by-the-agent"),
            ("x-forwarded-for", "10.0.0.1"),
        ],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let mut names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
    names.retain(|n| !matches!(*n, "date" | "transfer-encoding" | "content-length"));
    names.sort();
    assert_eq!(names, ["cache-control", "content-type", "mcp-session-id"]);
    assert_eq!(response.header("mcp-session-id"), ["s-1"]);
    let text = response.text().await;
    assert!(text.contains("tools/list"), "{text}");
    assert!(!text.contains(KEY));

    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    let seen = &seen[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.target, "/publication/server_api/v2/mcp");
    assert_eq!(
        seen.header("x-api-key"),
        [KEY],
        "the gate's key, not the agent's"
    );
    assert_eq!(seen.header("mcp-session-id"), ["s-1"]);
    assert_eq!(seen.header("mcp-protocol-version"), ["2025-06-18"]);
    assert_eq!(seen.header("content-type"), ["application/json"]);
    for dropped in ["authorization", "cookie", "x-forwarded-for"] {
        assert!(
            seen.header(dropped).is_empty(),
            "{dropped} reached upstream"
        );
    }
    assert_eq!(
        seen.body,
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
    );
    assert!(has_line(
        &relay.door,
        "door=turn host=mcp verdict=relayed reason=POST /mcp 200"
    ));
    assert!(!relay.door.log.lines().iter().any(|line| line.contains(KEY)));
}

#[tokio::test]
async fn an_sse_response_streams_each_event_as_it_arrives() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), Some(KEY));
    upstream.push_event("event: message\ndata: {\"n\":1}\n\n");
    let mut response = send(
        &relay.socket,
        "GET",
        "/mcp",
        &[("accept", "text/event-stream"), ("mcp-session-id", "s-2")],
        b"",
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.header("content-type"), ["text/event-stream"]);
    // The second event does not exist yet: the first must arrive on its own.
    let first = timeout(WAIT, response.next_chunk()).await.unwrap().unwrap();
    assert_eq!(&first[..], b"event: message\ndata: {\"n\":1}\n\n");
    upstream.push_event("event: message\ndata: {\"n\":2}\n\n");
    let second = timeout(WAIT, response.next_chunk()).await.unwrap().unwrap();
    assert_eq!(&second[..], b"event: message\ndata: {\"n\":2}\n\n");
    assert!(upstream.seen()[0].body.is_empty());
}

#[tokio::test]
async fn a_redirect_is_refused_and_not_followed() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), Some(KEY));
    let response = send(
        &relay.socket,
        "POST",
        "/mcp",
        &[("mcp-session-id", "redirect")],
        b"{}",
    )
    .await;
    assert_eq!(response.status, StatusCode::BAD_GATEWAY);
    assert!(response.header("location").is_empty());
    let text = response.text().await;
    assert!(text.contains(r#""reason":"upstream_redirect""#), "{text}");
    assert_eq!(upstream.seen().len(), 1, "only the redirecting request");
    assert!(has_line(
        &relay.door,
        "door=turn host=mcp verdict=refused reason=POST /mcp upstream_redirect"
    ));
}

#[tokio::test]
async fn other_paths_and_methods_are_refused_by_name_and_nothing_goes_upstream() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), Some(KEY));
    let cases = [
        ("GET", "/", 404, "not_found"),
        ("POST", "/mcp/extra", 404, "not_found"),
        ("POST", "/MCP", 404, "not_found"),
        ("PUT", "/mcp", 405, "method_not_allowed"),
        ("PATCH", "/mcp", 405, "method_not_allowed"),
        ("OPTIONS", "/mcp", 405, "method_not_allowed"),
        ("BREW", "/mcp", 405, "method_not_allowed"),
        ("X-AGENT-1", "/mcp", 405, "method_not_allowed"),
        ("X-AGENT-1", "/other", 404, "not_found"),
    ];
    for (method, target, status, reason) in cases {
        let response = send(&relay.socket, method, target, &[], b"").await;
        assert_eq!(response.status.as_u16(), status, "{method} {target}");
        if status == 405 {
            assert_eq!(response.header("allow"), ["POST, GET, DELETE"]);
        }
        let text = response.text().await;
        assert!(text.contains(&format!(r#""reason":"{reason}""#)), "{text}");
    }
    let big = vec![b'x'; MAX_REQUEST_BODY + 1];
    let response = send(&relay.socket, "POST", "/mcp", &[], &big).await;
    assert_eq!(response.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(upstream.seen().is_empty());
    // A method the relay does not serve is named `OTHER`: an agent's made-up methods make one
    // decision, not one each.
    let refused = |reason: &str| format!("door=turn host=mcp verdict=refused reason={reason}");
    assert_eq!(
        relay.door.log.lines(),
        [
            refused("GET /mcp not_found"),
            refused("POST /mcp not_found"),
            refused("OTHER /mcp method_not_allowed"),
            refused("OTHER /mcp not_found"),
            refused("POST /mcp body_too_large"),
        ]
    );
}

#[tokio::test]
async fn a_delete_carries_no_body_and_no_key_is_added_when_none_is_declared() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), None);
    let response = send(
        &relay.socket,
        "DELETE",
        "/mcp",
        &[("mcp-session-id", "s-3"), ("x-api-key", "forged")],
        b"ignored",
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let seen = &upstream.seen()[0];
    assert_eq!(seen.method, "DELETE");
    assert!(seen.body.is_empty());
    assert!(seen.header("x-api-key").is_empty());
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_bad_gateway() {
    let addr = support::closed_port();
    let relay = start(&format!("http://{addr}/mcp"), Some(KEY));
    let response = send(&relay.socket, "POST", "/mcp", &[], b"{}").await;
    assert_eq!(response.status, StatusCode::BAD_GATEWAY);
    let text = response.text().await;
    assert!(
        text.contains(r#""reason":"upstream_unreachable""#),
        "{text}"
    );
}

#[test]
fn a_key_no_header_can_carry_is_refused_without_showing_it() {
    let error = McpDoor::new(
        "http://127.0.0.1:1/mcp",
        Some(Secret::new("line\nbreak".to_owned())),
        turn_log(),
    )
    .unwrap_err();
    assert!(matches!(error, McpError::BadKey));
    assert!(!error.to_string().contains("line"));
    let door = McpDoor::new(
        "http://127.0.0.1:1/mcp",
        Some(Secret::new(KEY.to_owned())),
        turn_log(),
    )
    .unwrap();
    assert!(!format!("{door:?}").contains(KEY));
}

#[tokio::test]
async fn a_turn_subscription_has_each_relay_decision_once_the_agent_has_its_answer() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), Some(KEY));
    let mut subscription = relay.door.log.subscribe();
    let cases = [
        ("POST", "/mcp", 200, Verdict::Relayed, "POST /mcp 200"),
        (
            "PUT",
            "/mcp",
            405,
            Verdict::Refused,
            "OTHER /mcp method_not_allowed",
        ),
    ];
    for (method, target, status, verdict, reason) in cases {
        let response = send(&relay.socket, method, target, &[], b"{}").await;
        assert_eq!(response.status.as_u16(), status, "{method}");
        // The answer's head has arrived: its decision is already queued.
        subscription.end();
        let mut got = Vec::new();
        while let Some(decision) = subscription.next().await {
            got.push(decision);
        }
        assert_eq!(
            got,
            [Decision::new(
                DoorName::Turn,
                MCP_HOST,
                None,
                verdict,
                reason
            )],
            "{method}"
        );
        subscription = relay.door.log.subscribe();
    }
}

/// A run that opens many large POSTs and stalls them holds at most [`MAX_BODIES_HELD`] bodies:
/// the next POST waits for a permit instead of growing the gate, and goes through once a
/// stalled one is gone.
#[tokio::test]
async fn stalled_bodies_are_held_a_few_at_a_time() {
    let upstream = Upstream::on_loopback().await;
    let relay = start(&url(&upstream), Some(KEY));
    support::check_bodies_held(
        &relay.socket,
        "/mcp",
        MAX_REQUEST_BODY,
        MAX_BODIES_HELD,
        || relay.door.bodies.available_permits(),
        || upstream.seen().len(),
    )
    .await;
}
