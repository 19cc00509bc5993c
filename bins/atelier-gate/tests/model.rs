//! The model relay, end to end against a model provider stand-in on loopback
//! (`support::model`), through the relay listener as the service serves it (both relays on one
//! socket, one decision log). The real key reaches upstream in its API's style and the agent's
//! placeholder never does; targets map below the base path (a route's with a path and one's
//! without) with their query; SSE streams before the upstream has finished; a path outside the
//! base path, a traversal, an endpoint that is not the model API's, a body past the bound and a
//! redirect are refused by name with nothing (more) upstream; every outcome is a decision of
//! the turn door, worded `<method> /model/<api> <status or refusal>`. And the built binary,
//! socket-activated with a plan whose route's credential is missing, stops before READY naming
//! it. The binary relaying
//! with the key its credential holds runs in the lab network (`lab.rs`): a plan's model host is
//! a name, which only the lab's DNS resolves to a stand-in the relay may dial.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_gate::mcp::McpDoor;
use atelier_gate::model::{ModelApi, ModelDoor, ModelRoute, MAX_REQUEST_BODY};
use atelier_gate::relay::{serve, Relays};
use atelier_gate::serve::DecisionLog;
use atelier_gate::Policy;
use atelier_proto::egress::{Decision, Verdict, MODEL_HOST};
use atelier_proto::Door;
use atelier_sd::credentials::Secret;
use hyper::StatusCode;
use tokio::net::UnixListener;
use tokio::time::timeout;

use crate::support::lab::write_stamped_plan;
use crate::support::mcp::{send, Upstream};
use crate::support::model::ModelUpstream;

const ANTHROPIC_KEY: &str = "sk-ant-real-4c1e";
const OPENAI_KEY: &str = "sk-openai-real-90ab";
const PLACEHOLDER: &str = "placeholder-the-agent-holds";
const WAIT: Duration = Duration::from_secs(20);

/// Both relays on one listener with one log, as the service serves the turn door's: the MCP
/// relay to `mcp_upstream`, the model relay (when `routes` is `Some`) over those routes.
struct Relay {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    log: Arc<DecisionLog>,
}

fn start(mcp_upstream: &str, routes: Option<Vec<(ModelRoute, Option<&str>)>>) -> Relay {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mcp.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let log = Arc::new(DecisionLog::new(Door::Turn));
    let mcp = Arc::new(McpDoor::new(mcp_upstream, None, Arc::clone(&log)).unwrap());
    let model = routes.map(|routes| {
        let routes = routes
            .into_iter()
            .map(|(route, key)| (route, key.map(|key| Secret::new(key.to_owned()))))
            .collect();
        Arc::new(ModelDoor::new(routes, Arc::clone(&log), Policy::default()).unwrap())
    });
    tokio::spawn(serve(listener, Relays { mcp, model }));
    Relay {
        _dir: dir,
        socket,
        log,
    }
}

fn route(api: ModelApi, upstream: String, credential: Option<&str>) -> ModelRoute {
    ModelRoute {
        api,
        upstream,
        credential: credential.map(str::to_owned),
        model: None,
    }
}

/// The relay with both routes to `upstream`: Anthropic at its root, OpenAI below `/v1`.
fn both_routes(upstream: &ModelUpstream) -> Relay {
    start(
        "http://127.0.0.1:9/mcp",
        Some(vec![
            (
                route(
                    ModelApi::Anthropic,
                    upstream.base(""),
                    Some("ANTHROPIC_API_KEY"),
                ),
                Some(ANTHROPIC_KEY),
            ),
            (
                route(
                    ModelApi::Openai,
                    upstream.base("/v1"),
                    Some("OPENAI_API_KEY"),
                ),
                Some(OPENAI_KEY),
            ),
        ]),
    )
}

/// The journal line of a model relay decision of the turn door.
fn line(verdict: &str, reason: &str) -> String {
    format!("door=turn host=model verdict={verdict} reason={reason}")
}

fn has(log: &DecisionLog, line: &str) -> bool {
    log.lines().iter().any(|got| got == line)
}

#[tokio::test]
async fn the_real_key_goes_upstream_in_each_apis_style_and_the_agents_never_does() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    let agent_headers = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("anthropic-version", "2023-06-01"),
        (
            "anthropic-beta",
            "prompt-caching-2024-07-31,files-api-2025-04-14",
        ),
        ("anthropic-beta", "mcp-client-2025-04-04"),
        ("user-agent", "claude-cli/2.1"),
        ("x-api-key", PLACEHOLDER),
        ("authorization", &*format!("Bearer {PLACEHOLDER}")),
        ("cookie", "session=agent"),
        ("accept-encoding", "gzip"),
        ("x-forwarded-for", "10.0.0.1"),
    ];
    let body = br#"{"model":"claude","messages":[]}"#;
    let response = send(
        &relay.socket,
        "POST",
        "/model/anthropic/v1/messages?beta=true",
        &agent_headers,
        body,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let headers = format!("{:?}", response.headers);
    let text = response.text().await;
    assert!(!headers.contains(ANTHROPIC_KEY) && !text.contains(ANTHROPIC_KEY));
    assert!(!headers.contains("set-cookie") && !headers.contains("x-echoed"));

    let response = send(
        &relay.socket,
        "POST",
        "/model/openai/v1/chat/completions?api-version=2",
        &agent_headers,
        body,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let text = response.text().await;
    assert!(!text.contains(OPENAI_KEY), "{text}");

    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let (anthropic, openai) = (&seen[0], &seen[1]);
    assert_eq!(anthropic.target, "/v1/messages?beta=true");
    assert_eq!(anthropic.header("x-api-key"), [ANTHROPIC_KEY]);
    assert!(anthropic.header("authorization").is_empty());
    assert_eq!(openai.target, "/v1/chat/completions?api-version=2");
    assert_eq!(
        openai.header("authorization"),
        [format!("Bearer {OPENAI_KEY}").as_str()]
    );
    assert!(openai.header("x-api-key").is_empty());
    for seen in [anthropic, openai] {
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.body, body);
        assert_eq!(seen.header("anthropic-version"), ["2023-06-01"]);
        assert_eq!(seen.header("anthropic-beta"), ["prompt-caching-2024-07-31"]);
        assert_eq!(seen.header("user-agent"), ["claude-cli/2.1"]);
        assert_eq!(seen.header("content-type"), ["application/json"]);
        for dropped in ["cookie", "accept-encoding", "x-forwarded-for"] {
            assert!(
                seen.header(dropped).is_empty(),
                "{dropped} reached upstream"
            );
        }
        let all = format!("{:?}", seen.headers);
        assert!(
            !all.contains(PLACEHOLDER),
            "the placeholder reached upstream: {all}"
        );
    }
    assert_eq!(
        relay.log.lines(),
        [
            line("relayed", "POST /model/anthropic 200"),
            line("relayed", "POST /model/openai 200"),
        ],
        "no path below the API, no query"
    );
}

#[tokio::test]
async fn an_sse_answer_streams_through_before_the_upstream_finishes() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    upstream.push_chunk("event: message_start\ndata: {\"n\":1}\n\n");
    let mut response = send(
        &relay.socket,
        "POST",
        "/model/anthropic/v1/messages?answer=stream",
        &[("accept", "text/event-stream")],
        br#"{"stream":true}"#,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.header("content-type"), ["text/event-stream"]);
    // The upstream has not finished, nor written the second event: the first arrives alone.
    let first = timeout(WAIT, response.next_chunk()).await.unwrap().unwrap();
    assert_eq!(&first[..], b"event: message_start\ndata: {\"n\":1}\n\n");
    assert!(has(
        &relay.log,
        &line("relayed", "POST /model/anthropic 200")
    ));
    upstream.push_chunk("event: message_stop\ndata: {\"n\":2}\n\n");
    upstream.finish();
    let second = timeout(WAIT, response.next_chunk()).await.unwrap().unwrap();
    assert_eq!(&second[..], b"event: message_stop\ndata: {\"n\":2}\n\n");
    assert_eq!(timeout(WAIT, response.next_chunk()).await.unwrap(), None);
}

#[tokio::test]
async fn a_traversal_or_a_path_outside_the_base_path_is_refused_and_never_reaches_upstream() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    let traversals = [
        ("GET", "/model/openai/../admin?k=v"),
        ("GET", "/model/openai/v1/models/../../../admin"),
        ("POST", "/model/anthropic/%2e%2e/admin"),
        ("POST", "/model/anthropic/.%2E/admin"),
        ("GET", "/model/openai/v1/a%2F..%2Fadmin"),
        ("GET", "/model/openai/v1/..%5Cadmin"),
        ("GET", "/model/openai/"),
        // Outside the base path `/v1`, or the base path alone.
        ("GET", "/model/openai/models"),
        ("GET", "/model/openai/v1x/models"),
        ("POST", "/model/openai/key/generate"),
        ("GET", "/model/openai/v1/"),
    ];
    for (method, target) in traversals {
        let response = send(&relay.socket, method, target, &[], b"{}").await;
        assert_eq!(response.status, StatusCode::BAD_REQUEST, "{target}");
        let text = response.text().await;
        assert!(text.contains(r#""reason":"bad_path""#), "{target}: {text}");
    }
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
    assert_eq!(
        relay.log.lines(),
        [
            line("refused", "GET /model/openai bad_path"),
            line("refused", "POST /model/anthropic bad_path"),
            line("refused", "POST /model/openai bad_path"),
        ],
        "each distinct decision once, none with the path below the API"
    );
}

/// Only the model API's own endpoints are relayed, below a base with a path and one without:
/// each of those sent goes through, anything else the host serves (batches, files, a gateway's
/// key minting, the legacy completions, a GET of messages) is refused by name without reaching
/// it, the key with it.
#[tokio::test]
async fn only_the_model_apis_own_endpoints_reach_upstream() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    let relayed = [
        (
            "POST",
            "/model/anthropic/v1/messages/count_tokens?beta=true",
        ),
        ("GET", "/model/anthropic/v1/models"),
        ("GET", "/model/anthropic/v1/models/claude-sonnet-4-5"),
        ("GET", "/model/openai/v1/models"),
        ("GET", "/model/openai/v1/models/gpt-4.1-mini"),
        ("POST", "/model/openai/v1/v1/chat/completions"),
    ];
    for (method, target) in relayed {
        let response = send(&relay.socket, method, target, &[], b"{}").await;
        assert_eq!(response.status, StatusCode::OK, "{method} {target}");
    }
    let seen: Vec<(String, String)> = upstream
        .seen()
        .into_iter()
        .map(|seen| (seen.method, seen.target))
        .collect();
    let want = [
        ("POST", "/v1/messages/count_tokens?beta=true"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/claude-sonnet-4-5"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/gpt-4.1-mini"),
        ("POST", "/v1/v1/chat/completions"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(method, target)| (method.to_string(), target.to_string()))
        .collect();
    assert_eq!(seen, want);

    let refused = [
        ("POST", "/model/anthropic/v1/messages/batches"),
        (
            "GET",
            "/model/anthropic/v1/messages/batches/msgbatch_01/results",
        ),
        ("POST", "/model/anthropic/v1/files"),
        ("POST", "/model/anthropic/key/generate"),
        ("POST", "/model/anthropic/v1/complete"),
        ("GET", "/model/anthropic/v1/messages"),
        ("POST", "/model/openai/v1/batches"),
        ("POST", "/model/openai/v1/key/generate"),
        ("GET", "/model/openai/v1/models/"),
    ];
    for (method, target) in refused {
        let response = send(&relay.socket, method, target, &[], b"{}").await;
        assert_eq!(response.status, StatusCode::NOT_FOUND, "{method} {target}");
        let text = response.text().await;
        assert!(
            text.contains(r#""reason":"endpoint_not_relayed""#),
            "{target}: {text}"
        );
    }
    assert_eq!(upstream.seen().len(), want.len(), "nothing more upstream");
    for line in [
        line("refused", "POST /model/anthropic endpoint_not_relayed"),
        line("refused", "GET /model/anthropic endpoint_not_relayed"),
        line("refused", "POST /model/openai endpoint_not_relayed"),
        line("refused", "GET /model/openai endpoint_not_relayed"),
    ] {
        assert!(has(&relay.log, &line), "{line}");
    }
}

#[tokio::test]
async fn a_body_past_the_bound_is_refused_and_never_reaches_upstream() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    let big = vec![b'x'; MAX_REQUEST_BODY + 1];
    let response = send(
        &relay.socket,
        "POST",
        "/model/anthropic/v1/messages",
        &[],
        &big,
    )
    .await;
    assert_eq!(response.status, StatusCode::PAYLOAD_TOO_LARGE);
    let text = response.text().await;
    assert!(text.contains(r#""reason":"body_too_large""#), "{text}");
    assert!(upstream.seen().is_empty());
    assert!(has(
        &relay.log,
        &line("refused", "POST /model/anthropic body_too_large")
    ));
    // One at the bound goes through: a JSON object, which the relay vets whole.
    let (open, close) = (r#"{"messages":[{"role":"user","content":""#, r#""}]}"#);
    let fill = "x".repeat(MAX_REQUEST_BODY - open.len() - close.len());
    let fits = format!("{open}{fill}{close}").into_bytes();
    let response = send(
        &relay.socket,
        "POST",
        "/model/openai/v1/chat/completions",
        &[],
        &fits,
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(upstream.seen()[0].body.len(), MAX_REQUEST_BODY);
}

#[tokio::test]
async fn a_redirect_is_a_bad_gateway_and_is_not_followed() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    let response = send(
        &relay.socket,
        "POST",
        "/model/openai/v1/chat/completions?answer=redirect",
        &[],
        b"{}",
    )
    .await;
    assert_eq!(response.status, StatusCode::BAD_GATEWAY);
    assert!(response.header("location").is_empty());
    let text = response.text().await;
    assert!(text.contains(r#""reason":"upstream_redirect""#), "{text}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "the redirect was not followed: {seen:?}");
    assert_eq!(seen[0].target, "/v1/chat/completions?answer=redirect");
    assert_eq!(
        relay.log.lines(),
        [line("refused", "POST /model/openai upstream_redirect")]
    );
}

#[tokio::test]
async fn each_decision_is_queued_once_the_agent_has_its_answer() {
    let upstream = ModelUpstream::on_loopback().await;
    let relay = both_routes(&upstream);
    let cases = [
        (
            "POST",
            "/model/anthropic/v1/messages",
            200,
            Verdict::Relayed,
            "POST /model/anthropic 200",
        ),
        (
            "GET",
            "/model/openai/v1/models?answer=503",
            503,
            Verdict::Relayed,
            "GET /model/openai 503",
        ),
        (
            "PUT",
            "/model/openai/v1/models",
            405,
            Verdict::Refused,
            "OTHER /model/openai method_not_allowed",
        ),
        (
            "POST",
            "/model/openai/v1/files",
            404,
            Verdict::Refused,
            "POST /model/openai endpoint_not_relayed",
        ),
        (
            "GET",
            "/model/gemini/v1?key=x",
            404,
            Verdict::Refused,
            "GET /model not_found",
        ),
    ];
    for (method, target, status, verdict, reason) in cases {
        let mut subscription = relay.log.subscribe();
        let response = send(&relay.socket, method, target, &[], b"{}").await;
        assert_eq!(response.status.as_u16(), status, "{target}");
        // The answer's head has arrived: its decision is already queued.
        subscription.end();
        let mut got = Vec::new();
        while let Some(decision) = subscription.next().await {
            got.push(decision);
        }
        let want = Decision::new(Door::Turn, MODEL_HOST, None, verdict, reason);
        assert_eq!(got, std::slice::from_ref(&want), "{target}");
        assert!(want.is_model_relay() && !want.is_mcp());
    }
}

#[tokio::test]
async fn the_mcp_path_still_goes_to_the_mcp_relay_and_without_a_model_relay_model_is_its_404() {
    let mcp = Upstream::on_loopback().await;
    let model = ModelUpstream::on_loopback().await;
    let mcp_url = format!("http://{}/publication/server_api/v2/mcp", mcp.addr);
    let with = start(
        &mcp_url,
        Some(vec![(
            route(ModelApi::Anthropic, model.base(""), None),
            None,
        )]),
    );
    let response = send(&with.socket, "POST", "/mcp", &[], b"{}").await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(mcp.seen().len(), 1);
    assert!(has(
        &with.log,
        "door=turn host=mcp verdict=relayed reason=POST /mcp 200"
    ));
    // Neither relay's path: the MCP relay's 404, as before the model relay.
    let response = send(&with.socket, "GET", "/other", &[], b"").await;
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert!(has(
        &with.log,
        "door=turn host=mcp verdict=refused reason=GET /mcp not_found"
    ));

    let without = start(&mcp_url, None);
    let response = send(
        &without.socket,
        "POST",
        "/model/anthropic/v1/messages",
        &[],
        b"{}",
    )
    .await;
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert_eq!(
        without.log.lines(),
        ["door=turn host=mcp verdict=refused reason=POST /mcp not_found"]
    );
    assert!(model.seen().is_empty());
}

// === The binary ===

const GATE: &str = env!("CARGO_BIN_EXE_atelier-gate");

/// Writes the turn door's stamped plan with the MCP relay and `model` as its model relay.
fn write_turn_plan(dir: &Path, model: serde_json::Value) -> PathBuf {
    let body = serde_json::json!({
        "version": 1, "instance": "example", "site": 1, "door": "turn", "port": 443,
        "hosts": ["api.example.com"],
        "mcp": { "upstream": "http://127.0.0.1:9/mcp", "credential": null },
        "model": model,
    });
    let path = dir.join("s1-turn.json");
    write_stamped_plan(&path, "example", &body);
    path
}

/// The gate as its unit starts it: `systemd-socket-activate` passes `turn.sock` and `mcp.sock`
/// (in `dir`), the credentials folder `dir/credentials` and a notify socket; stderr goes to
/// `gate.log`. The first connection starts it.
struct Gate {
    child: Child,
    log: PathBuf,
    relay: PathBuf,
    notify: UnixDatagram,
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gate {
    /// Starts the gate serving the turn `plan`; returns once both sockets are bound.
    fn activate(dir: &Path, plan: &Path) -> Gate {
        let (turn, relay) = (dir.join("turn.sock"), dir.join("mcp.sock"));
        let log = dir.join("gate.log");
        let notify_path = dir.join("notify");
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_read_timeout(Some(WAIT)).unwrap();
        let child = Command::new("systemd-socket-activate")
            .arg(format!("--listen={}", turn.display()))
            .arg(format!("--listen={}", relay.display()))
            .arg("--fdname=turn:mcp")
            .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
            .arg(format!(
                "--setenv=CREDENTIALS_DIRECTORY={}",
                dir.join("credentials").display()
            ))
            .args([GATE, "--instance", "example", "--site", "1"])
            .arg(format!("--plan=turn={}", plan.display()))
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let gate = Gate {
            child,
            log,
            relay,
            notify,
        };
        let deadline = Instant::now() + WAIT;
        while !(turn.exists() && gate.relay.exists()) {
            assert!(Instant::now() < deadline, "the sockets never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        gate
    }

    /// Connects to the relay socket once it listens (it is bound a moment before), which
    /// starts the gate, and drops the connection.
    fn start(&self) {
        let deadline = Instant::now() + WAIT;
        while let Err(error) = std::os::unix::net::UnixStream::connect(&self.relay) {
            assert!(Instant::now() < deadline, "{error}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the gate has sent `READY=1` (waiting for it up to [`WAIT`] when `wait`).
    fn ready(&self, wait: bool) -> bool {
        self.notify.set_nonblocking(!wait).unwrap();
        let mut datagram = [0u8; 512];
        while let Ok(len) = self.notify.recv(&mut datagram) {
            let message = String::from_utf8_lossy(&datagram[..len]);
            if message.lines().any(|line| line == "READY=1") {
                return true;
            }
        }
        false
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A scratch folder with the turn plan whose model relay is `routes`, and the credentials
/// folder holding each of `credentials` (name, value with a trailing newline).
fn scratch(
    routes: serde_json::Value,
    credentials: &[(&str, &str)],
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_turn_plan(dir.path(), serde_json::json!({ "routes": routes }));
    let folder = dir.path().join("credentials");
    std::fs::create_dir(&folder).unwrap();
    for (name, value) in credentials {
        std::fs::write(folder.join(name), format!("{value}\n")).unwrap();
    }
    (dir, plan)
}

#[test]
fn a_missing_model_credential_stops_the_gate_before_ready_naming_it() {
    let (dir, plan) = scratch(
        serde_json::json!([
            {
                "api": "openai",
                "upstream": "https://api.openai.com/v1",
                "credential": "OPENAI_API_KEY",
            },
        ]),
        &[],
    );
    let mut gate = Gate::activate(dir.path(), &plan);
    gate.start();
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = gate.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the gate still runs:\n{}",
            gate.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    assert!(!gate.ready(false), "READY=1 was sent");
    let log = gate.log();
    assert!(
        log.contains("reading the model relay's credential OPENAI_API_KEY (the openai route)"),
        "{log}"
    );
}
