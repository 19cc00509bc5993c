//! chatd over a real unix socket: the auth table, sessions checked with the CMS stand-in (and
//! cached), tool results for the CMS's own bridges handed on, conversations CRUD persisted in
//! SQLite, per-user isolation, the browser bridge, the single-writer lease and client aborts.
//! Turns are run by a scripted [`TurnRunner`] that calls browser tools through the real bridge.

mod openapi;
use crate::support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use atelier_chatd::auth::{Clock, ManualClock, SystemClock};
use atelier_chatd::store::history::INTERRUPTED_TOOL_RESULT_ERROR;
use atelier_chatd::store::Store;
use atelier_chatd::turn::{Turn, TurnRunner};
use atelier_chatd::{RawSettings, Router};
use atelier_lab_model::cms::{
    CmsState, LabCms, BRIDGE_GONE, CLIENT_COOKIE, EDITOR_COOKIE, MFA_PENDING_COOKIE, SESSION_COOKIE,
};
use atelier_llm::{LoopEvent, ToolCallStatus};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

const TOKEN: &str = "test-service-token-000000000000000000000000";
const ORIGIN: &str = "https://cms.example";
const ALL: &str = "ai.chat,ai.tools.write";

/// Plays a model that calls each of its tools in the browser, then reports the editor
/// snapshot it last saw as text.
struct ScriptedRunner {
    tools: Vec<(&'static str, Value)>,
}

impl TurnRunner for ScriptedRunner {
    fn run(&self, turn: Turn) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let tools = self.tools.clone();
        Box::pin(async move {
            let send = |event| {
                let _ = turn.events.send(event);
            };
            send(LoopEvent::Text {
                text: "Let me look".into(),
            });
            send(LoopEvent::Text { text: ".".into() });
            for (index, (name, input)) in tools.into_iter().enumerate() {
                let call = atelier_llm::ToolCall {
                    id: format!("call_{index}"),
                    name: name.to_owned(),
                    arguments: input.clone(),
                };
                send(LoopEvent::ToolCall {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    input,
                    status: ToolCallStatus::Pending,
                });
                match turn.bridge.execute(&call).await {
                    Ok(result) => send(LoopEvent::ToolResult {
                        tool_call_id: call.id,
                        tool_name: call.name,
                        ok: result.ok,
                        error: result.error,
                    }),
                    Err(error) => {
                        send(LoopEvent::ToolResult {
                            tool_call_id: call.id,
                            tool_name: call.name,
                            ok: false,
                            error: Some(error.to_string()),
                        });
                        send(LoopEvent::Error {
                            message: format!("Browser tool transport failed: {error}"),
                        });
                        return;
                    }
                }
            }
            send(LoopEvent::Text {
                text: format!(
                    "snapshot={}",
                    turn.bridge.snapshot().as_deref().unwrap_or(&Value::Null)
                ),
            });
            send(LoopEvent::Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
                cost_usd: 0.0,
                cache_read_tokens: None,
                cache_creation_tokens: None,
                provider_cost_usd: Some(0.25),
            });
            send(LoopEvent::Done);
        })
    }
}

struct Server {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    database: PathBuf,
    router: Router,
}

fn serve(tools: Vec<(&'static str, Value)>) -> Server {
    serve_with(tools, support::cms_origin(), Arc::new(SystemClock))
}

/// chatd asking the CMS at `cms_origin`, its session cache timed by `clock`.
fn serve_with(
    tools: Vec<(&'static str, Value)>,
    cms_origin: String,
    clock: Arc<dyn Clock>,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("chatd.sock");
    let database = dir.path().join("chat.sqlite3");
    let settings = RawSettings {
        database: Some(database.clone()),
        public_origins: vec![ORIGIN.into()],
        service_token: Some(TOKEN.into()),
        cms_origin: Some(cms_origin),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let store = Arc::new(Store::open(&settings.database).unwrap());
    let router = Router::with_clock(
        &settings,
        atelier_chatd::router::services(&settings, store).unwrap(),
        Arc::new(ScriptedRunner { tools }),
        clock,
    );
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let handler_router = router.clone();
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request| {
            let router = handler_router.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    Server {
        _dir: dir,
        socket,
        database,
        router,
    }
}

/// Who is asking: `None` fields leave the header out. A `user` signs in with the shared CMS
/// stand-in's session for the user and `capabilities`; a `cookie` is sent as it is instead.
#[derive(Clone, Copy)]
struct As<'a> {
    token: Option<&'a str>,
    user: Option<&'a str>,
    capabilities: &'a str,
    cookie: Option<&'a str>,
    origin: Option<&'a str>,
}

fn user(id: &str) -> As<'_> {
    As {
        token: Some(TOKEN),
        user: Some(id),
        capabilities: ALL,
        cookie: None,
        origin: Some(ORIGIN),
    }
}

/// Signed in with the raw `Cookie` header `cookie`.
fn cookie(cookie: &str) -> As<'_> {
    As {
        user: None,
        cookie: Some(cookie),
        ..user("")
    }
}

struct Reply {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Incoming,
    connection: JoinHandle<()>,
}

impl Reply {
    async fn json(self) -> (StatusCode, hyper::HeaderMap, Value) {
        let bytes = self.body.collect().await.unwrap().to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"))
        };
        (self.status, self.headers, value)
    }
}

async fn send(
    socket: &Path,
    who: As<'_>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd");
    if let Some(token) = who.token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    if let Some(cookie) = who.cookie {
        builder = builder.header("cookie", cookie);
    } else if let Some(user) = who.user {
        builder = builder.header("cookie", support::cookie_for(user, who.capabilities));
    }
    if let Some(origin) = who.origin {
        builder = builder.header("origin", origin);
    }
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let response = sender
        .send_request(builder.body(Full::new(Bytes::from(bytes))).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
        connection,
    }
}

async fn call(
    socket: &Path,
    who: As<'_>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, value) = send(socket, who, method, path, body).await.json().await;
    (status, value)
}

/// Reads an NDJSON body one event at a time.
struct Events {
    body: Incoming,
    buffer: Vec<u8>,
    connection: JoinHandle<()>,
}

impl Events {
    fn new(reply: Reply) -> Self {
        Events {
            body: reply.body,
            buffer: Vec::new(),
            connection: reply.connection,
        }
    }

    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                .await
                .expect("stream stalled")?;
            if let Ok(data) = frame.unwrap().into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }

    async fn rest(mut self) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

/// The headers the CMS puts on every `/admin` answer, which chatd's answers carry too (HSTS
/// as the editor's origin here is HTTPS).
fn assert_admin_headers(headers: &hyper::HeaderMap, name: &str) {
    for (header, value) in [
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "strict-origin-when-cross-origin"),
        (
            "strict-transport-security",
            "max-age=63072000; includeSubDomains",
        ),
        ("x-frame-options", "DENY"),
        (
            "content-security-policy",
            "frame-ancestors 'none'; base-uri 'self'; object-src 'none'",
        ),
    ] {
        assert_eq!(
            headers.get(header).map(|v| v.to_str().unwrap()),
            Some(value),
            "{name}"
        );
    }
}

async fn create_conversation(socket: &Path, who: As<'_>, scope: &str) -> String {
    let (status, body) = call(
        socket,
        who,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": scope, "credentialId": "cred-1", "modelId": "model-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["conversation"]["id"].as_str().unwrap().to_owned()
}

fn chat_body(conversation: &str, text: &str) -> Value {
    json!({
        "conversationId": conversation,
        "content": [{"kind": "text", "text": text}],
        "snapshot": {"page": "home"},
    })
}

async fn detail(socket: &Path, who: As<'_>, id: &str) -> Value {
    let (status, body) = call(
        socket,
        who,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["conversation"].clone()
}

#[tokio::test]
async fn the_auth_table_answers_with_the_reference_bodies() {
    let server = serve(vec![]);
    let list = "/admin/api/ai/conversations?scope=site";
    let mfa_pending = format!("{SESSION_COOKIE}={MFA_PENDING_COOKIE}");
    let client = format!("{SESSION_COOKIE}={CLIENT_COOKIE}");
    let cases: Vec<(&str, As<'_>, Method, &str, StatusCode, &str)> = vec![
        (
            "no token",
            As {
                token: None,
                ..user("alice")
            },
            Method::GET,
            list,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        (
            "wrong token",
            As {
                token: Some("x"),
                ..user("alice")
            },
            Method::GET,
            list,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        (
            "no token, unknown path",
            As {
                token: None,
                ..user("alice")
            },
            Method::GET,
            "/elsewhere",
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        (
            "no user",
            As {
                user: None,
                ..user("alice")
            },
            Method::GET,
            list,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        (
            "unknown session cookie",
            cookie("instatic_admin_session=nobody-signed-in-with-this"),
            Method::GET,
            list,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        (
            "empty session cookie",
            cookie("theme=dark; instatic_admin_session="),
            Method::GET,
            list,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        (
            "session waiting for its second factor",
            cookie(&mfa_pending),
            Method::GET,
            list,
            StatusCode::UNAUTHORIZED,
            "mfa_required",
        ),
        (
            "the CMS's client role: no ai.chat",
            cookie(&client),
            Method::GET,
            list,
            StatusCode::FORBIDDEN,
            "Forbidden",
        ),
        (
            "no ai.chat",
            As {
                capabilities: "ai.tools.write",
                ..user("alice")
            },
            Method::GET,
            list,
            StatusCode::FORBIDDEN,
            "Forbidden",
        ),
        (
            "no ai.tools.write for tool results",
            As {
                capabilities: "ai.chat",
                ..user("alice")
            },
            Method::POST,
            "/admin/api/ai/tool-result",
            StatusCode::FORBIDDEN,
            "Forbidden",
        ),
        (
            "foreign origin on a POST",
            As {
                origin: Some("https://evil.example"),
                ..user("alice")
            },
            Method::POST,
            "/admin/api/ai/conversations",
            StatusCode::FORBIDDEN,
            "Forbidden: invalid origin",
        ),
        (
            "foreign origin on a DELETE",
            As {
                origin: Some("null"),
                ..user("alice")
            },
            Method::DELETE,
            "/admin/api/ai/conversations/x",
            StatusCode::FORBIDDEN,
            "Forbidden: invalid origin",
        ),
        (
            "unknown path",
            user("alice"),
            Method::GET,
            "/admin/api/ai/nothing",
            StatusCode::NOT_FOUND,
            "Not found",
        ),
        (
            "unknown chat scope",
            user("alice"),
            Method::POST,
            "/admin/api/ai/chat/blog",
            StatusCode::NOT_FOUND,
            "Not found",
        ),
        (
            "wrong method",
            user("alice"),
            Method::GET,
            "/admin/api/ai/tool-result",
            StatusCode::METHOD_NOT_ALLOWED,
            "Method not allowed",
        ),
        (
            "no scope",
            user("alice"),
            Method::GET,
            "/admin/api/ai/conversations",
            StatusCode::BAD_REQUEST,
            "Query parameter `scope` is required (one of: site, content, data, plugin)",
        ),
    ];
    for (name, who, method, path, status, error) in cases {
        let (got_status, headers, body) = send(&server.socket, who, method, path, None)
            .await
            .json()
            .await;
        assert_eq!(got_status, status, "{name}: {body}");
        assert_eq!(body, json!({ "error": error }), "{name}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{name}"
        );
        assert_admin_headers(&headers, name);
    }
    // A read from a foreign origin is not state-changing; neither is a POST without Origin.
    let (status, _) = call(
        &server.socket,
        As {
            origin: Some("https://evil.example"),
            ..user("alice")
        },
        Method::GET,
        list,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    create_conversation(
        &server.socket,
        As {
            origin: None,
            ..user("alice")
        },
        "site",
    )
    .await;
}

#[tokio::test]
async fn conversations_round_trip_and_persist_per_user() {
    let server = serve(vec![]);
    let socket = &server.socket;
    let alice = user("alice");
    let bob = user("bob");

    let (status, body) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(json!({"scope": "site", "title": "  Landing page  ", "credentialId": "c", "modelId": "m", "extra": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let view = &body["conversation"];
    let keys: Vec<&str> = view
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec![
        "id",
        "scope",
        "title",
        "credentialId",
        "modelId",
        "promptTokensTotal",
        "completionTokensTotal",
        "costUsdTotal",
        "cacheReadTokensTotal",
        "cacheCreationTokensTotal",
        "contextTokens",
        "createdAt",
        "updatedAt",
    ];
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(sorted, expected);
    assert_eq!(view["title"], "Landing page");
    assert_eq!(view["scope"], "site");
    let id = view["id"].as_str().unwrap().to_owned();
    let untitled = create_conversation(socket, alice, "site").await;
    create_conversation(socket, alice, "content").await;

    for (name, body) in [
        (
            "missing modelId",
            json!({"scope": "site", "credentialId": "c"}),
        ),
        (
            "empty credentialId",
            json!({"scope": "site", "credentialId": "", "modelId": "m"}),
        ),
        (
            "unknown scope",
            json!({"scope": "blog", "credentialId": "c", "modelId": "m"}),
        ),
    ] {
        let (status, body) = call(
            socket,
            alice,
            Method::POST,
            "/admin/api/ai/conversations",
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}");
        assert_eq!(body, json!({"error": "Invalid request body."}), "{name}");
    }

    let (status, list) = call(
        socket,
        alice,
        Method::GET,
        "/admin/api/ai/conversations?scope=site",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [untitled.as_str(), id.as_str()],
        "newest first, this scope only"
    );

    let (status, headers, body) = send(
        socket,
        alice,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        None,
    )
    .await
    .json()
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["cache-control"], "private, no-store");
    assert_admin_headers(&headers, "a conversation");
    assert_eq!(body["conversation"]["messages"], json!([]));
    assert_eq!(body["conversation"]["title"], "Landing page");

    let path = format!("/admin/api/ai/conversations/{id}");
    let (status, body) = call(
        socket,
        alice,
        Method::PUT,
        &path,
        Some(json!({"title": "   ", "modelId": "m2"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["conversation"]["title"], "Landing page",
        "a blank title keeps the old one"
    );
    assert_eq!(body["conversation"]["modelId"], "m2");
    let (status, _) = call(
        socket,
        alice,
        Method::PUT,
        &path,
        Some(json!({"title": ""})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Bob sees none of it and can change none of it.
    let (_, list) = call(
        socket,
        bob,
        Method::GET,
        "/admin/api/ai/conversations?scope=site",
        None,
    )
    .await;
    assert_eq!(list, json!({"conversations": []}));
    for (method, body) in [
        (Method::GET, None),
        (Method::PUT, Some(json!({"title": "mine"}))),
        (Method::DELETE, None),
    ] {
        let (status, body) = call(socket, bob, method.clone(), &path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}");
        assert_eq!(body, json!({"error": "Conversation not found"}), "{method}");
    }

    let (status, body) = call(socket, alice, Method::DELETE, &path, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));
    let (status, _) = call(socket, alice, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(socket, alice, Method::DELETE, &path, None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "deleting again succeeds, as the original did"
    );

    // What the API said is what SQLite holds.
    let store = Store::open(&server.database).unwrap();
    assert!(store.conversation("alice", &id).unwrap().is_none());
    let kept = store.conversation("alice", &untitled).unwrap().unwrap();
    assert_eq!(kept.title, "New conversation");
    assert!(store.conversation("bob", &untitled).unwrap().is_none());
}

#[tokio::test]
async fn a_turn_streams_resolves_the_bridge_with_a_snapshot_and_persists() {
    let server = serve(vec![("site_read_document", json!({"id": 7}))]);
    let socket = &server.socket;
    let alice = user("alice");
    let id = create_conversation(socket, alice, "site").await;

    let reply = send(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(chat_body(&id, "  Make   the hero blue  ")),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers["content-type"], "application/x-ndjson");
    assert_eq!(reply.headers["cache-control"], "private, no-store");
    assert_eq!(reply.headers["x-accel-buffering"], "no");
    assert_admin_headers(&reply.headers, "a chat turn");
    let mut events = Events::new(reply);
    let ready = events.next().await.unwrap();
    assert_eq!(ready["type"], "bridgeReady");
    let bridge_id = ready["bridgeId"].as_str().unwrap().to_owned();
    assert_eq!(bridge_id.len(), 21);
    assert_eq!(
        events.next().await.unwrap(),
        json!({"type": "text", "text": "Let me look"})
    );
    assert_eq!(
        events.next().await.unwrap(),
        json!({"type": "text", "text": "."})
    );
    assert_eq!(
        events.next().await.unwrap(),
        json!({"type": "toolCall", "toolCallId": "call_0", "toolName": "site_read_document", "input": {"id": 7}, "status": "pending"})
    );
    let request = events.next().await.unwrap();
    assert_eq!(request["type"], "toolRequest");
    assert_eq!(request["toolName"], "site_read_document");
    assert_eq!(request["input"], json!({"id": 7}));
    let request_id = request["requestId"].as_str().unwrap().to_owned();

    let result = |bridge: &str, request: &str| json!({"bridgeId": bridge, "requestId": request, "result": {"ok": true, "data": {"html": "<p>"}}, "snapshot": {"page": "after"}});
    let gone = json!({"error": "The AI tool bridge is no longer active. The server may have restarted; send the message again."});
    // Unknown ids, and the right ids posted by another user, look the same: gone.
    for (who, bridge, request) in [
        (alice, "nope", request_id.as_str()),
        (alice, bridge_id.as_str(), "nope"),
        (user("bob"), bridge_id.as_str(), request_id.as_str()),
    ] {
        let (status, body) = call(
            socket,
            who,
            Method::POST,
            "/admin/api/ai/tool-result",
            Some(result(bridge, request)),
        )
        .await;
        assert_eq!((status, body), (StatusCode::NOT_FOUND, gone.clone()));
    }
    let (status, body) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/tool-result",
        Some(json!({"bridgeId": bridge_id})),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Invalid request body."})
        )
    );
    let (status, body) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/tool-result",
        Some(result(&bridge_id, &request_id)),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));

    let rest = events.rest().await;
    assert_eq!(
        rest,
        vec![
            json!({"type": "toolResult", "toolCallId": "call_0", "toolName": "site_read_document", "ok": true}),
            json!({"type": "text", "text": "snapshot={\"page\":\"after\"}"}),
            json!({"type": "usage", "promptTokens": 10, "completionTokens": 5, "costUsd": 0.25}),
            json!({"type": "done"}),
        ]
    );
    // The bridge is gone with its turn, and the lease is free again.
    let (status, _) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/tool-result",
        Some(result(&bridge_id, &request_id)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!server.router.bridges().is_open(&bridge_id));
    assert!(!server.router.leases().is_held(&id));

    let conversation = detail(socket, alice, &id).await;
    assert_eq!(conversation["title"], "Make the hero blue");
    // Usage is booked on the turn's last assistant row and added to the totals.
    assert_eq!(conversation["promptTokensTotal"], 10);
    assert_eq!(conversation["completionTokensTotal"], 5);
    assert_eq!(conversation["contextTokens"], 10);
    assert_eq!(conversation["costUsdTotal"], 0.25);
    let rows: Vec<(Value, Value, Value)> = conversation["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].clone(),
                m["content"].clone(),
                m["toolCallId"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                json!("user"),
                json!([{"kind": "text", "text": "Make   the hero blue"}]),
                Value::Null
            ),
            (
                json!("assistant"),
                json!([{"kind": "text", "text": "Let me look."}]),
                Value::Null
            ),
            (
                json!("assistant"),
                json!([{"kind": "toolCall", "toolCallId": "call_0", "toolName": "site_read_document", "input": {"id": 7}}]),
                json!("call_0")
            ),
            (
                json!("tool"),
                json!([{"kind": "toolResult", "ok": true}]),
                json!("call_0")
            ),
            (
                json!("assistant"),
                json!([{"kind": "text", "text": "snapshot={\"page\":\"after\"}"}]),
                Value::Null
            ),
        ]
    );
}

#[tokio::test]
async fn a_concurrent_send_gets_409_before_anything_is_appended() {
    let server = serve(vec![("site_insert_html", json!({"html": "<h1>"}))]);
    let socket = &server.socket;
    let alice = user("alice");
    let id = create_conversation(socket, alice, "site").await;

    let mut first = Events::new(
        send(
            socket,
            alice,
            Method::POST,
            "/admin/api/ai/chat/site",
            Some(chat_body(&id, "one")),
        )
        .await,
    );
    let bridge_id = first.next().await.unwrap()["bridgeId"]
        .as_str()
        .unwrap()
        .to_owned();
    let request_id = loop {
        let event = first.next().await.unwrap();
        if event["type"] == "toolRequest" {
            break event["requestId"].as_str().unwrap().to_owned();
        }
    };
    let before = detail(socket, alice, &id).await["messages"]
        .as_array()
        .unwrap()
        .len();
    let (status, body) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(chat_body(&id, "two")),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({"error": "This conversation is already generating a response. Wait for it to finish."})
    );
    assert_eq!(
        detail(socket, alice, &id).await["messages"]
            .as_array()
            .unwrap()
            .len(),
        before
    );

    // The other checks come first, in the original's order.
    let (status, body) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/chat/content",
        Some(chat_body(&id, "x")),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Conversation scope is \"site\", not \"content\"."})
        )
    );
    let (status, body) = call(
        socket,
        user("bob"),
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(chat_body(&id, "x")),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "Conversation not found"})
        )
    );
    let (status, body) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(json!({"conversationId": id, "prompt": "x"})),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Invalid request body."})
        )
    );

    let (status, _) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/tool-result",
        Some(json!({"bridgeId": bridge_id, "requestId": request_id, "result": {"ok": false, "error": "No such node"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let rest = first.rest().await;
    assert_eq!(
        rest[0],
        json!({"type": "toolResult", "toolCallId": "call_0", "toolName": "site_insert_html", "ok": false, "error": "No such node"})
    );
    assert_eq!(rest.last().unwrap(), &json!({"type": "done"}));

    // Released: the next send is admitted.
    let second = Events::new(
        send(
            socket,
            alice,
            Method::POST,
            "/admin/api/ai/chat/site",
            Some(chat_body(&id, "two")),
        )
        .await,
    );
    drop(second);
}

#[tokio::test]
async fn a_client_that_goes_away_releases_the_lease_and_leaves_calls_interrupted() {
    let server = serve(vec![("site_render_snapshot", json!({}))]);
    let socket = &server.socket;
    let alice = user("alice");
    let id = create_conversation(socket, alice, "site").await;

    let mut events = Events::new(
        send(
            socket,
            alice,
            Method::POST,
            "/admin/api/ai/chat/site",
            Some(chat_body(&id, "look")),
        )
        .await,
    );
    let bridge_id = events.next().await.unwrap()["bridgeId"]
        .as_str()
        .unwrap()
        .to_owned();
    while events.next().await.unwrap()["type"] != "toolRequest" {}
    assert!(server.router.leases().is_held(&id));
    events.connection.abort();
    drop(events);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while server.router.leases().is_held(&id) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease was never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!server.router.bridges().is_open(&bridge_id));
    let messages = detail(socket, alice, &id).await["messages"].clone();
    let last = messages.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["toolCallId"], "call_0");
    assert_eq!(
        last["content"],
        json!([{"kind": "toolResult", "ok": false, "error": INTERRUPTED_TOOL_RESULT_ERROR}])
    );

    // A browser tool that never answers ends the turn in transport after its upper bound; here
    // the bridge is gone, so a late post is a 404 and the editor resends.
    let (status, _) = call(
        socket,
        alice,
        Method::POST,
        "/admin/api/ai/tool-result",
        Some(json!({"bridgeId": bridge_id, "requestId": "r", "result": {"ok": true}})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_conversation_without_a_credential_is_refused_before_the_lease() {
    let server = serve(vec![]);
    let alice = user("alice");
    let id = create_conversation(&server.socket, alice, "content").await;
    // The original sets credential_id to NULL when the credential is deleted.
    let connection = rusqlite::Connection::open(&server.database).unwrap();
    connection
        .execute(
            "UPDATE ai_conversations SET credential_id = NULL WHERE id = ?1",
            [&id],
        )
        .unwrap();
    let (status, body) = call(
        &server.socket,
        alice,
        Method::POST,
        "/admin/api/ai/chat/content",
        Some(chat_body(&id, "x")),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"error": "Conversation has no credential set. Open AI settings to configure a provider."})
    );
    assert!(!server.router.leases().is_held(&id));
}

#[tokio::test]
async fn stored_jpegs_are_served_to_their_owner_only() {
    let server = serve(vec![]);
    let socket = &server.socket;
    let alice = user("alice");
    let id = create_conversation(socket, alice, "site").await;
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
        .encode_image(&image::DynamicImage::new_rgb8(8, 8))
        .unwrap();
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(&jpeg);
    let body = json!({
        "conversationId": id,
        "content": [{"kind": "text", "text": "this"}, {"kind": "image", "mimeType": "image/jpeg", "data": data}],
    });
    let events = Events::new(
        send(
            socket,
            alice,
            Method::POST,
            "/admin/api/ai/chat/site",
            Some(body),
        )
        .await,
    );
    assert_eq!(
        events.rest().await.last().unwrap(),
        &json!({"type": "done"})
    );

    let conversation = detail(socket, alice, &id).await;
    let user_row = &conversation["messages"][0];
    let url = user_row["content"][1]["url"].as_str().unwrap().to_owned();
    let message_id = user_row["id"].as_str().unwrap();
    assert_eq!(
        url,
        format!("/admin/api/ai/conversations/{id}/messages/{message_id}/images/1")
    );

    let reply = send(socket, alice, Method::GET, &url, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers["content-type"], "image/jpeg");
    assert_eq!(reply.headers["cache-control"], "private, no-store");
    assert_eq!(reply.headers["x-content-type-options"], "nosniff");
    let length: usize = reply.headers["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let bytes = reply.body.collect().await.unwrap().to_bytes();
    assert_eq!(bytes.len(), length);
    // What is served is the re-encoded image chatd stored, still an 8×8 JPEG.
    assert!(bytes.starts_with(&[0xFF, 0xD8, 0xFF]));
    let served = image::load_from_memory(&bytes).unwrap();
    assert_eq!((served.width(), served.height()), (8, 8));

    let not_found = json!({"error": "Conversation image not found"});
    let text_block = url.replace("/images/1", "/images/0");
    // The message is looked for in the conversation the path names, not by its id alone.
    let other = create_conversation(socket, alice, "site").await;
    let elsewhere = url.replace(&id, &other);
    for (who, path) in [
        (user("bob"), url.as_str()),
        (alice, text_block.as_str()),
        (alice, elsewhere.as_str()),
    ] {
        let (status, body) = call(socket, who, Method::GET, path, None).await;
        assert_eq!(
            (status, body),
            (StatusCode::NOT_FOUND, not_found.clone()),
            "{path}"
        );
    }
    let (status, body) = call(
        socket,
        alice,
        Method::GET,
        &url.replace("/images/1", "/images/x"),
        None,
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"error": "Not found"}))
    );
    let (status, _) = call(socket, alice, Method::DELETE, &url, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

/// A CMS stand-in of the test's own (its counters start at zero) and chatd asking it.
fn with_own_cms(clock: Arc<dyn Clock>) -> (LabCms, Server) {
    let cms = LabCms::spawn(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(CmsState::with_lab_users()),
    )
    .unwrap();
    let server = serve_with(vec![], cms.origin(), clock);
    (cms, server)
}

#[tokio::test]
async fn the_session_is_the_cms_s_and_its_answer_is_kept_for_30_seconds() {
    let clock = Arc::new(ManualClock::default());
    let (cms, server) = with_own_cms(Arc::clone(&clock) as Arc<dyn Clock>);
    let list = "/admin/api/ai/conversations?scope=site";
    let editor = format!("theme=dark; {SESSION_COOKIE}={EDITOR_COOKIE}; lang=sk");
    let as_editor = As {
        origin: Some(ORIGIN),
        ..cookie(&editor)
    };

    // No service token: refused before the CMS hears of the request.
    let (status, body) = call(
        &server.socket,
        As {
            token: None,
            ..as_editor
        },
        Method::GET,
        list,
        None,
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({"error": "Unauthorized"}))
    );
    assert_eq!(cms.state().me_calls(), 0);

    // The editor (ai.chat in their role) gets through; the CMS was asked once, with the session
    // cookie alone: none of the browser's other cookies or headers.
    let (status, body) = call(&server.socket, as_editor, Method::GET, list, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let asked = cms.state().requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].path, "/admin/api/cms/me");
    assert_eq!(
        asked[0].header("cookie"),
        Some(format!("{SESSION_COOKIE}={EDITOR_COOKIE}").as_str())
    );
    for header in ["authorization", "origin", "x-forwarded-for"] {
        assert_eq!(asked[0].header(header), None, "{header}");
    }

    // Within 30 s the answer is reused; the clock is moved, not waited for.
    clock.advance(Duration::from_secs(29));
    let (status, _) = call(&server.socket, as_editor, Method::GET, list, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cms.state().me_calls(), 1);
    // At 30 s it is asked again, and a session signed out meanwhile is refused as the CMS does.
    cms.state().revoke(EDITOR_COOKIE);
    clock.advance(Duration::from_secs(1));
    let (status, body) = call(&server.socket, as_editor, Method::GET, list, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({"error": "Unauthorized"}))
    );
    assert_eq!(cms.state().me_calls(), 2);
    // A refusal is not kept: the next request asks again.
    let (status, _) = call(&server.socket, as_editor, Method::GET, list, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(cms.state().me_calls(), 3);

    // The client role holds no ai.chat: 403 as the CMS words it. No cookie at all: 401.
    let client = format!("{SESSION_COOKIE}={CLIENT_COOKIE}");
    let (status, body) = call(&server.socket, cookie(&client), Method::GET, list, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::FORBIDDEN, json!({"error": "Forbidden"}))
    );
    let (status, body) = call(
        &server.socket,
        As {
            cookie: None,
            ..cookie("")
        },
        Method::GET,
        list,
        None,
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({"error": "Unauthorized"}))
    );
}

#[tokio::test]
async fn a_cms_that_is_down_or_answers_garbage_is_a_502_never_a_user() {
    let list = "/admin/api/ai/conversations?scope=site";
    let editor = format!("{SESSION_COOKIE}={EDITOR_COOKIE}");
    let unreachable =
        json!({"error": "The CMS could not be reached to check the session. Try again shortly."});
    let unreadable = json!({"error": "The CMS gave an unexpected answer to the session check."});

    // Nothing listens on a port just freed.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let server = serve_with(vec![], down, Arc::new(SystemClock));
    let (status, body) = call(&server.socket, cookie(&editor), Method::GET, list, None).await;
    assert_eq!((status, body), (StatusCode::BAD_GATEWAY, unreachable));

    for (name, answer, expected) in [
        ("a 200 without a user", json!({"ok": true}), &unreadable),
        (
            "a 200 with a user and no capabilities",
            json!({"user": {"id": "u"}}),
            &unreadable,
        ),
        (
            "a 500",
            json!({"error": "Internal server error"}),
            &unreadable,
        ),
    ] {
        let status = if name == "a 500" {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        let garbled =
            support::scripted(move |_| support::Answer::Json(status, answer.clone())).await;
        let server = serve_with(vec![], garbled.base_url.clone(), Arc::new(SystemClock));
        let (got, body) = call(&server.socket, cookie(&editor), Method::GET, list, None).await;
        assert_eq!((got, &body), (StatusCode::BAD_GATEWAY, expected), "{name}");
    }
}

/// Posts `body` to `/tool-result` as a browser would, with `cookie` and a header of its own
/// that is not for the CMS.
async fn post_tool_result(socket: &Path, cookie: &str, body: &str) -> (StatusCode, Value) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(Method::POST)
        .uri("/admin/api/ai/tool-result")
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("origin", ORIGIN)
        .header("cookie", cookie)
        .header("content-type", "application/json; charset=utf-8")
        .header("x-browser-extra", "not for the CMS")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_tool_result_for_a_cms_bridge_is_handed_to_the_cms_and_its_answer_relayed() {
    let (cms, server) = with_own_cms(Arc::new(SystemClock));
    cms.state().open_bridge("cms-bridge-1");
    let socket = &server.socket;
    let editor = format!("a=1; {SESSION_COOKIE}={EDITOR_COOKIE}");
    // Bytes as the browser sent them: odd spacing and key order must arrive untouched.
    let body =
        r#"{ "requestId":"r1", "bridgeId":"cms-bridge-1","result":{"ok":true,"data":{"n":1}} }"#;

    let (status, answer) = post_tool_result(socket, &editor, body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let forwarded = cms.state().tool_results();
    assert_eq!(forwarded.len(), 1);
    let forwarded = &forwarded[0];
    assert_eq!(forwarded.body, body.as_bytes(), "the body, byte for byte");
    assert_eq!(
        forwarded.header("cookie"),
        Some(format!("{SESSION_COOKIE}={EDITOR_COOKIE}").as_str()),
        "the session cookie and no other"
    );
    assert_eq!(
        forwarded.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    for header in ["authorization", "origin", "x-browser-extra"] {
        assert_eq!(forwarded.header(header), None, "{header}");
    }
    // What the CMS answered is what the browser gets.
    assert_eq!(
        answer,
        json!({"ok": true, "labReceived": {"userId": "usr_lab_editor_000000",
            "contentType": "application/json; charset=utf-8", "body": body}})
    );

    // A bridge neither holds: the CMS's 404, relayed.
    let unknown = r#"{"bridgeId":"nobody","requestId":"r","result":{"ok":true}}"#;
    let (status, answer) = post_tool_result(socket, &editor, unknown).await;
    assert_eq!(
        (status, answer),
        (StatusCode::NOT_FOUND, json!({"error": BRIDGE_GONE}))
    );
    // The CMS signed the session out while chatd still trusts its last answer: the CMS's 401
    // comes back as it is.
    cms.state().revoke(EDITOR_COOKIE);
    let (status, answer) = post_tool_result(socket, &editor, body).await;
    assert_eq!(
        (status, answer),
        (StatusCode::UNAUTHORIZED, json!({"error": "Unauthorized"}))
    );
    assert_eq!(cms.state().tool_results().len(), 3);
    assert_eq!(cms.state().me_calls(), 1, "the session was checked once");

    // The CMS gone: a clear 502, not a result silently dropped.
    drop(cms);
    let (status, answer) = post_tool_result(socket, &editor, body).await;
    assert_eq!(
        (status, answer),
        (
            StatusCode::BAD_GATEWAY,
            json!({"error": "The CMS could not be reached to deliver the tool result. Try again shortly."})
        )
    );
}
