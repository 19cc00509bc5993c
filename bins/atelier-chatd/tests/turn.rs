//! End to end: chatd's real socket, the shared tool loop, the Anthropic driver and a scripted
//! provider on loopback replaying recorded SSE transcripts; the test plays the browser.

use crate::support;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_chatd::caller::Caller;
use atelier_chatd::metrics::Metrics;
use atelier_chatd::runtime::{LoopRunner, PrepareFuture, ProviderSetup, Providers};
use atelier_chatd::store::{Conversation, Scope, Store};
use atelier_chatd::tools::{Execution, ToolSpec};
use atelier_chatd::{RawSettings, Router};
use atelier_http::{BoxError, Response};
use atelier_llm::{AnthropicDriver, CapabilityResolver, Driver, Endpoint, ProviderKind};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const TOKEN: &str = "test-service-token-000000000000000000000000";

// ---------------------------------------------------------------------------------------------
// The scripted provider: each request gets the next transcript, written with Anthropic's named
// events; a transcript may end in a pause that lasts until the client goes away.

struct Transcript {
    lines: Vec<String>,
    hang_at_end: bool,
}

struct Provider {
    base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    client_gone: Arc<AtomicBool>,
}

fn fixture(name: &str) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/llm/tests/fixtures/anthropic")
        .join(format!("{name}.sse"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

async fn start_provider(script: Vec<Transcript>) -> Provider {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let client_gone = Arc::new(AtomicBool::new(false));
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let (seen, gone) = (Arc::clone(&requests), Arc::clone(&client_gone));
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request: atelier_http::Request| {
            let (seen, gone, script) = (Arc::clone(&seen), Arc::clone(&gone), Arc::clone(&script));
            async move {
                let body = atelier_http::read_body(request.into_body(), 1 << 22)
                    .await
                    .unwrap();
                seen.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                let transcript = script
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("an unscripted request");
                let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
                tokio::spawn(async move {
                    for line in transcript.lines {
                        let kind: Value = serde_json::from_str(&line).unwrap();
                        let event = format!(
                            "event: {}\ndata: {line}\n\n",
                            kind["type"].as_str().unwrap()
                        );
                        if tx.send(Ok(Frame::data(Bytes::from(event)))).await.is_err() {
                            gone.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                    if transcript.hang_at_end {
                        tx.closed().await;
                        gone.store(true, Ordering::SeqCst);
                    }
                });
                let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|frame| (frame, rx))
                });
                let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
                response
                    .headers_mut()
                    .insert("content-type", "text/event-stream".parse().unwrap());
                response
            }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    Provider {
        base_url,
        requests,
        client_gone,
    }
}

struct ScriptedAnthropic {
    base_url: String,
    /// Where the model's capabilities are looked up; Anthropic's static answer when `None`.
    capabilities: Option<(Arc<CapabilityResolver>, Endpoint)>,
}

impl Providers for ScriptedAnthropic {
    fn prepare(&self, _caller: &Caller, conversation: &Conversation) -> PrepareFuture {
        let endpoint = Endpoint::new(
            reqwest::Client::new(),
            self.base_url.clone(),
            Some("sk-test".into()),
        );
        let driver: Arc<dyn Driver> = Arc::new(AnthropicDriver::new(endpoint));
        let lookup = self.capabilities.clone();
        let model = conversation.model_id.clone();
        Box::pin(async move {
            Ok(ProviderSetup {
                kind: ProviderKind::Anthropic,
                driver,
                credential_id: None,
                capabilities: Box::pin(async move {
                    match lookup {
                        Some((resolver, endpoint)) => resolver.resolve(&endpoint, &model).await,
                        None => ProviderKind::Anthropic.static_capabilities(),
                    }
                }),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// chatd and a browser.

struct Chatd {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    database: PathBuf,
    router: Router,
}

/// Nothing listens there: the pricing catalogue is unreachable, and never off-host.
const NO_PRICING: &str = "http://127.0.0.1:9";

fn start_chatd(provider: &Provider) -> Chatd {
    start_chatd_with(provider, None)
}

fn start_chatd_with(
    provider: &Provider,
    capabilities: Option<(Arc<CapabilityResolver>, Endpoint)>,
) -> Chatd {
    start_metered_chatd(
        &provider.base_url,
        NO_PRICING,
        capabilities,
        Metrics::unregistered(),
    )
}

/// chatd whose model is at `provider_url` and whose pricing catalogue at `openrouter_url`,
/// counting in `metrics`.
fn start_metered_chatd(
    provider_url: &str,
    openrouter_url: &str,
    capabilities: Option<(Arc<CapabilityResolver>, Endpoint)>,
    metrics: Metrics,
) -> Chatd {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("chatd.sock");
    let database = dir.path().join("chat.sqlite3");
    let settings = RawSettings {
        database: Some(database.clone()),
        public_origins: vec!["https://cms.example".into()],
        service_token: Some(TOKEN.into()),
        openrouter_url: Some(openrouter_url.into()),
        cms_origin: Some(support::cms_origin()),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    // One browser tool the scripted model calls; it declares what the transcripts send.
    let tool = ToolSpec {
        name: "site_find_nodes",
        scope: Scope::Site,
        execution: Execution::Browser,
        mutates: false,
        capabilities: &[],
        description: "Find nodes on the page.",
        input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}),
    };
    let store = Arc::new(Store::open(&database).unwrap());
    let runner = LoopRunner::new(
        Arc::new(ScriptedAnthropic {
            base_url: provider_url.to_owned(),
            capabilities,
        }),
        vec![tool],
    );
    let services = atelier_chatd::router::services(&settings, store).unwrap();
    let router = Router::with_metrics(&settings, services, Arc::new(runner), metrics);
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let handler = router.clone();
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request| {
            let router = handler.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    Chatd {
        _dir: dir,
        socket,
        database,
        router,
    }
}

async fn send(
    socket: &Path,
    method: Method,
    path: &str,
    body: Value,
) -> (StatusCode, Incoming, JoinHandle<()>) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header(
            "cookie",
            support::cookie_for("alice", "ai.chat,ai.tools.write"),
        )
        .header("origin", "https://cms.example")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    (status, response.into_body(), connection)
}

async fn json_call(socket: &Path, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let (status, body, _connection) = send(socket, method, path, body).await;
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn next_line(body: &mut Incoming, buffer: &mut Vec<u8>) -> Option<Value> {
    loop {
        if let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            return Some(serde_json::from_slice(&line).unwrap());
        }
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("the stream stalled")?;
        if let Ok(data) = frame.unwrap().into_data() {
            buffer.extend_from_slice(&data);
        }
    }
}

async fn new_conversation(socket: &Path) -> String {
    let (status, body) = json_call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        json!({"scope": "site", "credentialId": "cred", "modelId": "claude-test"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    body["conversation"]["id"].as_str().unwrap().to_owned()
}

fn message(conversation: &str) -> Value {
    json!({"conversationId": conversation, "content": [{"kind": "text", "text": "Find the hero"}], "snapshot": {"page": "home"}})
}

#[tokio::test]
async fn the_browser_sees_the_reference_event_sequence_and_the_turn_is_persisted() {
    let provider = start_provider(vec![
        Transcript {
            lines: fixture("tool_call_deltas"),
            hang_at_end: false,
        },
        Transcript {
            lines: fixture("text"),
            hang_at_end: false,
        },
    ])
    .await;
    let chatd = start_chatd(&provider);
    let socket = &chatd.socket;
    let id = new_conversation(socket).await;

    let (status, mut body, _connection) = send(
        socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        message(&id),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    let mut bridge_id = String::new();
    while let Some(event) = next_line(&mut body, &mut buffer).await {
        match event["type"].as_str().unwrap() {
            "bridgeReady" => bridge_id = event["bridgeId"].as_str().unwrap().to_owned(),
            "toolRequest" => {
                // The browser runs the tool and posts its result, with the new editor state.
                let (status, reply) = json_call(
                    socket,
                    Method::POST,
                    "/admin/api/ai/tool-result",
                    json!({
                        "bridgeId": bridge_id,
                        "requestId": event["requestId"],
                        "result": {"ok": true, "data": {"nodes": ["hero"]}},
                        "snapshot": {"page": "home", "rev": 2},
                    }),
                )
                .await;
                assert_eq!((status, reply), (StatusCode::OK, json!({"ok": true})));
            }
            _ => {}
        }
        events.push(event);
    }

    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "bridgeReady",
            "text",
            "toolCall",
            "context",
            "toolRequest",
            "toolResult",
            "text",
            "text",
            "text",
            "context",
            "usage",
            "done"
        ]
    );
    assert_eq!(events[1], json!({"type": "text", "text": "Let me look."}));
    assert_eq!(
        events[2],
        json!({"type": "toolCall", "toolCallId": "call_1", "toolName": "site_find_nodes",
               "input": {"query": "hero", "limit": 5}, "status": "pending"})
    );
    assert_eq!(events[4]["toolName"], "site_find_nodes");
    assert_eq!(
        events[5],
        json!({"type": "toolResult", "toolCallId": "call_1", "toolName": "site_find_nodes", "ok": true})
    );
    assert_eq!(events[10]["promptTokens"], 24);
    assert_eq!(events[10]["completionTokens"], 10);
    assert_eq!(events[10]["costUsd"], 0);

    // The second round replayed the call and the browser's data to the model.
    let requests = provider.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let replay = requests[1]["messages"].to_string();
    assert!(
        replay.contains("tool_result") && replay.contains("hero"),
        "{replay}"
    );

    let (_, detail) = json_call(
        socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        Value::Null,
    )
    .await;
    let rows: Vec<(String, Value)> = detail["conversation"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].clone()))
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                "user".into(),
                json!([{"kind": "text", "text": "Find the hero"}])
            ),
            (
                "assistant".into(),
                json!([{"kind": "text", "text": "Let me look."}])
            ),
            (
                "assistant".into(),
                json!([{"kind": "toolCall", "toolCallId": "call_1", "toolName": "site_find_nodes",
                        "input": {"query": "hero", "limit": 5}}])
            ),
            ("tool".into(), json!([{"kind": "toolResult", "ok": true}])),
            (
                "assistant".into(),
                json!([{"kind": "text", "text": "Hello, world!"}])
            ),
        ]
    );
    assert_eq!(detail["conversation"]["promptTokensTotal"], 24);
    assert_eq!(detail["conversation"]["title"], "Find the hero");
    assert!(!chatd.router.leases().is_held(&id));
    let reopened = Store::open(&chatd.database).unwrap();
    assert_eq!(reopened.messages(&id).unwrap().len(), 5);
}

#[tokio::test]
async fn a_user_message_that_could_not_be_stored_gets_no_answer_stored_after_it() {
    // Text, then the provider fails: the turn's first write is its end's flush of that text.
    let provider = start_provider(vec![Transcript {
        lines: fixture("midstream_error"),
        hang_at_end: false,
    }])
    .await;
    let chatd = start_chatd(&provider);
    let id = new_conversation(&chatd.socket).await;
    // The database refuses the user's row, as a full disk or a broken file would.
    let database = rusqlite::Connection::open(&chatd.database).unwrap();
    database
        .execute_batch(
            "CREATE TRIGGER refuse_user_rows BEFORE INSERT ON ai_messages \
             WHEN NEW.role = 'user' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        )
        .unwrap();

    let lines = turn_lines(&chatd.socket, &id).await;
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error", "{lines:?}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .starts_with("AI runtime error"),
        "{last}"
    );
    let stored: i64 = database
        .query_row(
            "SELECT COUNT(*) FROM ai_messages WHERE conversation_id = ?1",
            [&id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(stored, 0, "an answer was stored without its question");
}

#[tokio::test]
async fn a_client_disconnect_cancels_the_provider_request_and_releases_the_lease() {
    let mut first_lines = fixture("text");
    first_lines.truncate(4); // message_start, ping, block start, one delta; then silence
    let provider = start_provider(vec![Transcript {
        lines: first_lines,
        hang_at_end: true,
    }])
    .await;
    let mut registry = Registry::with_prefix("atelier_chatd");
    let metrics = Metrics::new(&mut registry);
    let chatd = start_metered_chatd(&provider.base_url, NO_PRICING, None, metrics);
    let socket = &chatd.socket;
    let id = new_conversation(socket).await;

    let (status, mut body, connection) = send(
        socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        message(&id),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut buffer = Vec::new();
    assert_eq!(
        next_line(&mut body, &mut buffer).await.unwrap()["type"],
        "bridgeReady"
    );
    assert_eq!(
        next_line(&mut body, &mut buffer).await.unwrap(),
        json!({"type": "text", "text": "Hel"})
    );
    // A second send while the first streams is refused.
    let (status, reply) = json_call(
        socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        message(&id),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{reply}");
    let streaming = samples(&registry);
    assert_eq!(streaming["atelier_chatd_turns_in_flight"], 1.0);
    // The refused send never started.
    assert_eq!(
        streaming[r#"atelier_chatd_turns_started_total{scope="site"}"#],
        1.0
    );

    connection.abort();
    drop(body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !provider.client_gone.load(Ordering::SeqCst) || chatd.router.leases().is_held(&id) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "provider request cancelled: {}, lease held: {}",
            provider.client_gone.load(Ordering::SeqCst),
            chatd.router.leases().is_held(&id)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The text that had arrived is kept.
    let messages = Store::open(&chatd.database).unwrap().messages(&id).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[1].content,
        [atelier_chatd::store::ContentBlock::Text { text: "Hel".into() }]
    );
    // The turn ended as cancelled before its lease was released, and left the gauge.
    let ended = samples(&registry);
    assert_eq!(ended["atelier_chatd_turns_in_flight"], 0.0);
    assert_eq!(
        ended[r#"atelier_chatd_turns_ended_total{outcome="cancelled"}"#],
        1.0
    );
    assert!(!ended
        .keys()
        .any(|series| series.contains("outcome=\"done\"")));
}

#[tokio::test]
async fn a_turn_after_a_crash_replays_a_healed_history() {
    use atelier_chatd::store::{ContentBlock, NewMessage, Role, ToolCallRef};
    let provider = start_provider(vec![Transcript {
        lines: fixture("text"),
        hang_at_end: false,
    }])
    .await;
    let chatd = start_chatd(&provider);
    let socket = &chatd.socket;
    let id = new_conversation(socket).await;
    // What a chatd killed mid-turn leaves behind: a call with no result.
    let store = Store::open(&chatd.database).unwrap();
    store
        .append_message(
            &id,
            &NewMessage {
                role: Role::User,
                content: vec![ContentBlock::Text {
                    text: "earlier".into(),
                }],
                tool_call: None,
            },
        )
        .unwrap();
    store
        .append_message(
            &id,
            &NewMessage {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolCall {
                    tool_call_id: "call_0".into(),
                    tool_name: "site_find_nodes".into(),
                    input: json!({}),
                }],
                tool_call: Some(ToolCallRef {
                    id: "call_0".into(),
                    name: "site_find_nodes".into(),
                }),
            },
        )
        .unwrap();

    let (status, mut body, _connection) = send(
        socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        message(&id),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut buffer = Vec::new();
    let mut last = Value::Null;
    while let Some(event) = next_line(&mut body, &mut buffer).await {
        last = event;
    }
    assert_eq!(last, json!({"type": "done"}));
    let requests = provider.requests.lock().unwrap().clone();
    let messages = &requests[0]["messages"];
    assert_eq!(messages.as_array().unwrap().len(), 3, "{messages}");
    assert_eq!(messages[1]["content"][0]["type"], "tool_use");
    let healed = &messages[2]["content"][0];
    assert_eq!(healed["type"], "tool_result");
    assert_eq!(healed["tool_use_id"], "call_0");
    assert!(
        healed
            .to_string()
            .contains(atelier_chatd::store::history::INTERRUPTED_TOOL_RESULT_ERROR),
        "{healed}"
    );
    assert!(
        messages[2].to_string().contains("Find the hero"),
        "{messages}"
    );
}

// ---------------------------------------------------------------------------------------------
// Model capabilities: refused before anything is stored.

/// An Ollama `/api/show` that answers `show` after `delay`, counting requests.
async fn start_show(show: Value, delay: Duration) -> (Endpoint, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request: atelier_http::Request| {
            let (show, counter) = (show.clone(), Arc::clone(&counter));
            async move {
                assert_eq!(request.uri().path(), "/api/show");
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                atelier_http::json_response(StatusCode::OK, &show)
            }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    (Endpoint::new(reqwest::Client::new(), base_url, None), asked)
}

fn image_message(conversation: &str) -> Value {
    json!({"conversationId": conversation, "content": [
        {"kind": "text", "text": "What is this?"},
        {"kind": "image", "mimeType": "image/jpeg", "data": "/9j/AAAA"}
    ]})
}

const NO_VISION: &str =
    "The selected model does not support image input. Choose a vision-capable model.";
const NO_TOOLS: &str =
    "The selected model does not support tool calling. Choose an agent-capable model.";

#[tokio::test]
async fn images_to_blind_models_and_agent_turns_to_toolless_models_get_422_and_store_nothing() {
    let provider = start_provider(Vec::new()).await;
    let (show, asked) = start_show(
        json!({"capabilities": ["completion", "tools"]}),
        Duration::ZERO,
    )
    .await;
    let resolver = Arc::new(CapabilityResolver::new(ProviderKind::Ollama));
    let chatd = start_chatd_with(&provider, Some((Arc::clone(&resolver), show)));
    let socket = &chatd.socket;
    let id = new_conversation(socket).await;

    let chat = "/admin/api/ai/chat/site";
    let (status, reply) = json_call(socket, Method::POST, chat, image_message(&id)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply, json!({"error": NO_VISION}));
    let (status, reply) = json_call(socket, Method::POST, chat, image_message(&id)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply, json!({"error": NO_VISION}));
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the second turn is served from the cache"
    );

    // A model that sees but calls no tools: an agent turn is refused, image or not.
    let (show, _) = start_show(
        json!({"capabilities": ["completion", "vision"]}),
        Duration::ZERO,
    )
    .await;
    let chatd_toolless = start_chatd_with(&provider, Some((resolver, show)));
    let toolless = new_conversation(&chatd_toolless.socket).await;
    for body in [message(&toolless), image_message(&toolless)] {
        let (status, reply) = json_call(&chatd_toolless.socket, Method::POST, chat, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(reply, json!({"error": NO_TOOLS}));
    }

    assert!(
        provider.requests.lock().unwrap().is_empty(),
        "no provider request"
    );
    for (chatd, id) in [(&chatd, &id), (&chatd_toolless, &toolless)] {
        assert!(Store::open(&chatd.database)
            .unwrap()
            .messages(id)
            .unwrap()
            .is_empty());
        assert!(!chatd.router.leases().is_held(id));
        let (_, detail) = json_call(
            &chatd.socket,
            Method::GET,
            &format!("/admin/api/ai/conversations/{id}"),
            Value::Null,
        )
        .await;
        assert_eq!(
            detail["conversation"]["title"], "New conversation",
            "no auto-title"
        );
    }
}

#[tokio::test]
async fn a_capability_lookup_that_times_out_refuses_images() {
    let provider = start_provider(Vec::new()).await;
    let (show, asked) = start_show(
        json!({"capabilities": ["completion", "tools", "vision"]}),
        Duration::from_secs(10),
    )
    .await;
    let resolver = Arc::new(
        CapabilityResolver::new(ProviderKind::Ollama).with_timeout(Duration::from_millis(100)),
    );
    let chatd = start_chatd_with(&provider, Some((resolver, show)));
    let id = new_conversation(&chatd.socket).await;
    let started = std::time::Instant::now();
    let (status, reply) = json_call(
        &chatd.socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        image_message(&id),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply, json!({"error": NO_VISION}));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(Store::open(&chatd.database)
        .unwrap()
        .messages(&id)
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_client_gone_during_the_lookup_stores_nothing_and_the_lookup_still_completes() {
    use tokio::io::AsyncWriteExt;
    let provider = start_provider(Vec::new()).await;
    let (show, asked) = start_show(
        json!({"capabilities": ["completion"]}),
        Duration::from_millis(300),
    )
    .await;
    let chatd = start_chatd_with(
        &provider,
        Some((
            Arc::new(CapabilityResolver::new(ProviderKind::Ollama)),
            show,
        )),
    );
    let id = new_conversation(&chatd.socket).await;
    // A text turn from a caller without `ai.tools.write` (so no tools are offered): it would be
    // accepted and stored if the client stayed.
    let body = message(&id).to_string();
    let mut stream = UnixStream::connect(&chatd.socket).await.unwrap();
    let head = format!(
        "POST /admin/api/ai/chat/site HTTP/1.1\r\nhost: chatd\r\nauthorization: Bearer {TOKEN}\r\n\
         cookie: {}\r\n\
         origin: https://cms.example\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        support::cookie_for("alice", "ai.chat"),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    while asked.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(stream);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        provider.requests.lock().unwrap().is_empty(),
        "no provider request"
    );
    assert!(Store::open(&chatd.database)
        .unwrap()
        .messages(&id)
        .unwrap()
        .is_empty());
    assert!(!chatd.router.leases().is_held(&id));
    // The lookup finished without its caller and was cached for the next turn.
    let (status, reply) = json_call(
        &chatd.socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        image_message(&id),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply, json!({"error": NO_VISION}));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// The audit log.

/// The audit log as a reader with `capabilities` sees it, with `query` (`?…` or empty).
async fn audit_log(socket: &Path, capabilities: &str, query: &str) -> (StatusCode, Value) {
    support::call_as(
        socket,
        capabilities,
        Method::GET,
        &format!("/admin/api/ai/audit/events{query}"),
    )
    .await
}

/// Sends one message and reads the whole answer.
async fn turn_lines(socket: &Path, conversation: &str) -> Vec<Value> {
    let (status, mut body, _connection) = send(
        socket,
        Method::POST,
        "/admin/api/ai/chat/site",
        message(conversation),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut buffer = Vec::new();
    let mut lines = Vec::new();
    while let Some(line) = next_line(&mut body, &mut buffer).await {
        lines.push(line);
    }
    lines
}

#[tokio::test]
async fn each_turn_leaves_its_start_and_its_end_in_the_audit_log() {
    let provider = start_provider(vec![
        Transcript {
            lines: fixture("text"),
            hang_at_end: false,
        },
        Transcript {
            lines: fixture("midstream_error"),
            hang_at_end: false,
        },
    ])
    .await;
    let chatd = start_chatd(&provider);
    let socket = &chatd.socket;
    // The records name the provider of the conversation's credential.
    let credential = Store::open(&chatd.database)
        .unwrap()
        .create_credential(
            "alice",
            &atelier_chatd::store::NewCredential {
                provider_id: "openai-compatible".into(),
                auth_mode: atelier_chatd::store::AuthMode::BaseUrl,
                display_label: "Scripted".into(),
                sealed: None,
                base_url: Some(format!("{}/v1", provider.base_url)),
            },
        )
        .unwrap();
    let (status, body) = json_call(
        socket,
        Method::POST,
        "/admin/api/ai/conversations",
        json!({"scope": "site", "credentialId": credential.id, "modelId": "claude-test"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["conversation"]["id"].as_str().unwrap().to_owned();
    let turn =
        json!({"scope": "site", "providerId": "openai-compatible", "modelId": "claude-test"});
    let with = |extra: Value| {
        let mut metadata = turn.clone();
        metadata
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        metadata
    };

    // A turn that completes: its start, then its end with what it booked.
    let lines = turn_lines(socket, &id).await;
    assert_eq!(lines.last().unwrap()["type"], "done");
    let usage = lines.iter().find(|l| l["type"] == "usage").unwrap();
    let (status, log) = audit_log(socket, "ai.audit.read", "?action=ai.chat.").await;
    assert_eq!(status, StatusCode::OK, "{log}");
    let records: Vec<(Value, Value, Value, Value)> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].clone(),
                e["targetType"].clone(),
                e["targetId"].clone(),
                e["metadata"].clone(),
            )
        })
        .collect();
    assert_eq!(
        records,
        [
            (
                json!("ai.chat.completed"),
                json!("ai_conversation"),
                json!(id),
                with(json!({"promptTokens": 12, "completionTokens": 5,
                            "costUsd": usage["costUsd"].as_f64().unwrap()})),
            ),
            (
                json!("ai.chat.started"),
                json!("ai_conversation"),
                json!(id),
                turn.clone()
            ),
        ]
    );
    assert_eq!(usage["promptTokens"], 12);
    for event in log["events"].as_array().unwrap() {
        assert_eq!(event["actorUserId"], "alice");
        assert_eq!(event["ipAddress"], Value::Null);
        assert_eq!(event["userAgent"], Value::Null);
        assert!(event["id"].is_string() && event["createdAt"].is_string());
    }

    // A turn whose provider fails mid-stream: its start, then a failure naming the error.
    let lines = turn_lines(socket, &id).await;
    let error = lines.last().unwrap();
    assert_eq!(error["type"], "error", "{lines:?}");
    let (_, log) = audit_log(socket, "ai.audit.read", "?action=ai.chat.&limit=2").await;
    let events = log["events"].as_array().unwrap();
    assert_eq!(
        (&events[0]["action"], &events[1]["action"]),
        (&json!("ai.chat.failed"), &json!("ai.chat.started"))
    );
    let failed = &events[0]["metadata"];
    let expected: String = error["message"]
        .as_str()
        .unwrap()
        .chars()
        .take(200)
        .collect();
    assert_eq!(failed["error"], json!(expected));
    assert_eq!(
        (&failed["scope"], &failed["providerId"], &failed["modelId"]),
        (
            &json!("site"),
            &json!("openai-compatible"),
            &json!("claude-test")
        )
    );
    assert!(failed["promptTokens"].is_i64() && failed["costUsd"].is_number());

    // The log is for auditors only, and its limit is checked.
    let (status, body) = audit_log(socket, "ai.chat,ai.providers.manage", "").await;
    assert_eq!(
        (status, body),
        (StatusCode::FORBIDDEN, json!({"error": "Forbidden"}))
    );
    for bad in ["0", "501", "ten"] {
        let (status, body) = audit_log(socket, "ai.audit.read", &format!("?limit={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["error"].as_str().unwrap().contains("limit"), "{body}");
    }
    let (_, everything) = audit_log(socket, "ai.audit.read", "").await;
    assert_eq!(everything["events"].as_array().unwrap().len(), 4);
}

// ---------------------------------------------------------------------------------------------
// The metrics.

/// Every sample of `registry` by series (`name{labels}`), histogram buckets left out.
fn samples(registry: &Registry) -> std::collections::BTreeMap<String, f64> {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.contains("_bucket{"))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_good_turn_and_a_rate_limited_one_move_the_metrics_by_exactly_themselves() {
    let rounds = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&rounds);
    let provider = support::scripted(move |seen| match seen.path.as_str() {
        "/v1/messages" if counted.fetch_add(1, Ordering::SeqCst) == 0 => support::Answer::Sse {
            frames: support::text_round("Hello"),
            hang: false,
        },
        "/v1/messages" => support::Answer::Json(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": {"message": "slow down"}}),
        ),
        "/openrouter/v1/models" => support::Answer::Json(
            StatusCode::OK,
            json!({"data": [{"id": "anthropic/claude-test",
                             "pricing": {"prompt": "0.000003", "completion": "0.000015"}}]}),
        ),
        _ => support::Answer::Json(StatusCode::NOT_FOUND, json!({"error": "unscripted"})),
    })
    .await;
    let mut registry = Registry::with_prefix("atelier_chatd");
    let metrics = Metrics::new(&mut registry);
    let chatd = start_metered_chatd(
        &provider.base_url,
        &format!("{}/openrouter", provider.base_url),
        None,
        metrics,
    );
    let socket = &chatd.socket;
    let id = new_conversation(socket).await;
    let before = samples(&registry);

    let good = turn_lines(socket, &id).await;
    assert_eq!(good.last().unwrap()["type"], "done", "{good:?}");
    let usage = good.iter().find(|l| l["type"] == "usage").unwrap();
    let cost = usage["costUsd"].as_f64().unwrap();
    assert!(cost > 0.0, "{usage}");
    let failed = turn_lines(socket, &id).await;
    assert_eq!(failed.last().unwrap()["type"], "error", "{failed:?}");
    assert_eq!(rounds.load(Ordering::SeqCst), 2);

    // Every line was sent after its turn was counted: nothing is left to wait for.
    let after = samples(&registry);
    let moved: std::collections::BTreeMap<&str, f64> = after
        .iter()
        .filter(|(series, _)| !series.contains("first_byte_seconds_sum"))
        .map(|(series, value)| {
            let was = before.get(series).copied().unwrap_or(0.0);
            (series.as_str(), value - was)
        })
        .filter(|(_, delta)| *delta != 0.0)
        .collect();
    let prompt = usage["promptTokens"].as_f64().unwrap();
    let completion = usage["completionTokens"].as_f64().unwrap();
    assert_eq!((prompt, completion), (100.0, 8.0));
    let expected = [
        (r#"atelier_chatd_turns_started_total{scope="site"}"#, 2.0),
        (r#"atelier_chatd_turns_ended_total{outcome="done"}"#, 1.0),
        (r#"atelier_chatd_turns_ended_total{outcome="error"}"#, 1.0),
        (
            r#"atelier_chatd_provider_errors_total{provider="anthropic",class="rate_limited"}"#,
            1.0,
        ),
        (
            r#"atelier_chatd_first_byte_seconds_count{provider="anthropic"}"#,
            1.0,
        ),
        (
            r#"atelier_chatd_tokens_total{provider="anthropic",kind="input"}"#,
            prompt,
        ),
        (
            r#"atelier_chatd_tokens_total{provider="anthropic",kind="output"}"#,
            completion,
        ),
        (
            r#"atelier_chatd_cost_usd_total{provider="anthropic"}"#,
            cost,
        ),
    ];
    assert_eq!(
        moved.keys().copied().collect::<Vec<_>>(),
        {
            let mut names: Vec<&str> = expected.iter().map(|(series, _)| *series).collect();
            names.sort_unstable();
            names
        },
        "{moved:?}"
    );
    for (series, value) in expected {
        assert!((moved[series] - value).abs() < 1e-12, "{series}: {moved:?}");
    }
    assert_eq!(after["atelier_chatd_turns_in_flight"], 0.0);
    assert!(after[r#"atelier_chatd_first_byte_seconds_sum{provider="anthropic"}"#] > 0.0);
}
