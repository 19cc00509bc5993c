//! Every route's capability gate, as a table: a caller holding
//! every capability but the route's own is refused 403 `Forbidden`, and one holding only the
//! route's own capability gets past the gate (whatever the route answers next).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use atelier_chatd::store::Store;
use atelier_chatd::turn::UnconfiguredRunner;
use atelier_chatd::{RawSettings, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;

const TOKEN: &str = "test-service-token-000000000000000000000000";
const CAPABILITIES: [&str; 4] = [
    "ai.chat",
    "ai.tools.write",
    "ai.providers.manage",
    "ai.audit.read",
];

fn start() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("chatd.sock");
    let settings = RawSettings {
        database: Some(dir.path().join("chat.sqlite3")),
        public_origins: vec!["https://cms.example".into()],
        service_token: Some(TOKEN.into()),
        master_key: Some("WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo=".into()),
        // Loopback ports nothing listens on: no route can reach off the host.
        anthropic_url: Some("http://127.0.0.1:9".into()),
        openai_url: Some("http://127.0.0.1:9".into()),
        openrouter_url: Some("http://127.0.0.1:9".into()),
        cms_origin: Some(support::cms_origin()),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let store = Arc::new(Store::open(&settings.database).unwrap());
    let router = Router::new(&settings, store, Arc::new(UnconfiguredRunner)).unwrap();
    support::serve_router(router, &socket);
    (dir, socket)
}

async fn call(
    socket: &Path,
    capabilities: &[&str],
    method: Method,
    path: &str,
    body: &Option<Value>,
) -> (StatusCode, Value) {
    let cookie = support::cookie_for("alice", &capabilities.join(","));
    send(socket, Some(cookie), method, path, body).await
}

/// Sends a request through the web server's token, with the session cookie `cookie` if any.
async fn send(
    socket: &Path,
    cookie: Option<String>,
    method: Method,
    path: &str,
    body: &Option<Value>,
) -> (StatusCode, Value) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let request = request
        .body(Full::new(Bytes::from(
            body.as_ref().map(Value::to_string).unwrap_or_default(),
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn every_route_is_gated_by_its_capability() {
    let (_dir, socket) = start();
    let chat = Some(json!({"conversationId": "x", "content": [{"kind": "text", "text": "hi"}]}));
    let credential = Some(
        json!({"providerId": "openai-compatible", "authMode": "baseUrl",
        "displayLabel": "Local", "baseUrl": "http://127.0.0.1:9"}),
    );
    let conversation = Some(json!({"scope": "site", "credentialId": "c", "modelId": "m"}));
    let default = Some(json!({"credentialId": "c", "modelId": "m"}));
    let routes: Vec<(&str, Method, &str, Option<Value>, &str)> = vec![
        (
            "list conversations",
            Method::GET,
            "/admin/api/ai/conversations?scope=site",
            None,
            "ai.chat",
        ),
        (
            "create conversation",
            Method::POST,
            "/admin/api/ai/conversations",
            conversation,
            "ai.chat",
        ),
        (
            "read conversation",
            Method::GET,
            "/admin/api/ai/conversations/x",
            None,
            "ai.chat",
        ),
        (
            "rename conversation",
            Method::PUT,
            "/admin/api/ai/conversations/x",
            Some(json!({"title": "t"})),
            "ai.chat",
        ),
        (
            "delete conversation",
            Method::DELETE,
            "/admin/api/ai/conversations/x",
            None,
            "ai.chat",
        ),
        (
            "conversation image",
            Method::GET,
            "/admin/api/ai/conversations/x/messages/y/images/0",
            None,
            "ai.chat",
        ),
        (
            "chat",
            Method::POST,
            "/admin/api/ai/chat/site",
            chat,
            "ai.chat",
        ),
        (
            "tool result",
            Method::POST,
            "/admin/api/ai/tool-result",
            Some(json!({"bridgeId": "b", "requestId": "r", "result": {"ok": true}})),
            "ai.tools.write",
        ),
        (
            "list credentials",
            Method::GET,
            "/admin/api/ai/credentials",
            None,
            "ai.providers.manage",
        ),
        (
            "create credential",
            Method::POST,
            "/admin/api/ai/credentials",
            credential,
            "ai.providers.manage",
        ),
        (
            "update credential",
            Method::PUT,
            "/admin/api/ai/credentials/x",
            Some(json!({"displayLabel": "y"})),
            "ai.providers.manage",
        ),
        (
            "delete credential",
            Method::DELETE,
            "/admin/api/ai/credentials/x",
            None,
            "ai.providers.manage",
        ),
        (
            "test credential",
            Method::POST,
            "/admin/api/ai/credentials/x/test",
            None,
            "ai.providers.manage",
        ),
        (
            "read defaults",
            Method::GET,
            "/admin/api/ai/defaults",
            None,
            "ai.chat",
        ),
        (
            "set a default",
            Method::PUT,
            "/admin/api/ai/defaults/site",
            default,
            "ai.providers.manage",
        ),
        (
            "clear a default",
            Method::DELETE,
            "/admin/api/ai/defaults/site",
            None,
            "ai.providers.manage",
        ),
        (
            "list models",
            Method::GET,
            "/admin/api/ai/providers/openai-compatible/models",
            None,
            "ai.chat",
        ),
        (
            "audit",
            Method::GET,
            "/admin/api/ai/audit?tz=UTC",
            None,
            "ai.audit.read",
        ),
        (
            "audit log",
            Method::GET,
            "/admin/api/ai/audit/events",
            None,
            "ai.audit.read",
        ),
    ];
    for (name, method, path, body, needed) in routes {
        let others: Vec<&str> = CAPABILITIES.into_iter().filter(|c| *c != needed).collect();
        let (status, reply) = call(&socket, &others, method.clone(), path, &body).await;
        assert_eq!(
            (status, reply),
            (StatusCode::FORBIDDEN, json!({"error": "Forbidden"})),
            "{name} without {needed}"
        );
        let (status, reply) = call(&socket, &[needed], method, path, &body).await;
        assert_ne!(
            status,
            StatusCode::FORBIDDEN,
            "{name} with {needed}: {reply}"
        );
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{name} with {needed}");
    }

    // The defaults route names a bad scope before it checks the capability, as the original.
    let (status, reply) = call(
        &socket,
        &[],
        Method::PUT,
        "/admin/api/ai/defaults/nope",
        &None,
    )
    .await;
    assert_eq!(
        (status, reply),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Unknown scope \"nope\". Must be one of: site, content, data, plugin"})
        )
    );
    let (status, _) = call(
        &socket,
        &["ai.providers.manage"],
        Method::PATCH,
        "/admin/api/ai/defaults/site",
        &None,
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

/// As the original: a path nothing serves, a method its route does not answer and the
/// defaults' unknown scope are said to a browser without a session (and while the CMS is
/// down), not hidden behind 401.
#[tokio::test]
async fn paths_methods_and_the_defaults_scope_are_answered_before_the_session() {
    let (_dir, socket) = start();
    let signed_out = |method, path| send(&socket, None, method, path, &None);
    for (name, method, path, status) in [
        (
            "unknown path",
            Method::GET,
            "/admin/api/ai/nope",
            StatusCode::NOT_FOUND,
        ),
        (
            "wrong method",
            Method::GET,
            "/admin/api/ai/chat/site",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "wrong method on a default",
            Method::PATCH,
            "/admin/api/ai/defaults/nope",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "unknown scope of a default",
            Method::PUT,
            "/admin/api/ai/defaults/nope",
            StatusCode::BAD_REQUEST,
        ),
        (
            "a served route",
            Method::PUT,
            "/admin/api/ai/defaults/site",
            StatusCode::UNAUTHORIZED,
        ),
    ] {
        let (got, reply) = signed_out(method, path).await;
        assert_eq!(got, status, "{name}: {reply}");
    }
}

#[tokio::test]
async fn credentials_are_per_user_and_never_answered_in_clear() {
    let (_dir, socket) = start();
    let manage = ["ai.providers.manage"];
    let (status, body) = call(
        &socket,
        &manage,
        Method::POST,
        "/admin/api/ai/credentials",
        &Some(
            json!({"providerId": "openai-compatible", "authMode": "baseUrl", "displayLabel": "Groq",
                     "baseUrl": "http://127.0.0.1:9/v1", "apiKey": "gsk-SECRET-123"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(!body.to_string().contains("SECRET"));
    let id = body["credential"]["id"].as_str().unwrap().to_owned();
    // Clearing the optional key of a base-URL credential is allowed; of a key credential not.
    let (status, body) = call(
        &socket,
        &manage,
        Method::PUT,
        &format!("/admin/api/ai/credentials/{id}"),
        &Some(json!({"apiKey": "", "displayLabel": "Groq 2"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["credential"]["displayLabel"], "Groq 2");
    let refusals: Vec<(&str, Value, &str)> = vec![
        (
            "ftp base URL",
            json!({"providerId": "ollama", "authMode": "baseUrl", "displayLabel": "a", "baseUrl": "ftp://x"}),
            "Base URL must be an http or https URL with a host.",
        ),
        (
            "user info in the base URL",
            json!({"providerId": "ollama", "authMode": "baseUrl", "displayLabel": "a", "baseUrl": "http://u:p@host"}),
            "Base URL must be an http or https URL with a host.",
        ),
        (
            "a key for a base-URL provider",
            json!({"providerId": "ollama", "authMode": "apiKey", "displayLabel": "a", "apiKey": "k"}),
            "Ollama credentials use baseUrl authentication.",
        ),
        (
            "unknown provider",
            json!({"providerId": "gemini", "authMode": "apiKey", "displayLabel": "a", "apiKey": "k"}),
            "Invalid request body.",
        ),
        (
            "empty label",
            json!({"providerId": "openai", "authMode": "apiKey", "displayLabel": "", "apiKey": "k"}),
            "Invalid request body.",
        ),
        (
            "no key",
            json!({"providerId": "openai", "authMode": "apiKey", "displayLabel": "a"}),
            "Invalid request body.",
        ),
    ];
    for (name, body, message) in refusals {
        let (status, reply) = call(
            &socket,
            &manage,
            Method::POST,
            "/admin/api/ai/credentials",
            &Some(body),
        )
        .await;
        assert_eq!(
            (status, reply),
            (StatusCode::BAD_REQUEST, json!({"error": message})),
            "{name}"
        );
    }
    // Bob sees none of Alice's credentials.
    let stream = UnixStream::connect(&socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .uri("/admin/api/ai/credentials")
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("cookie", support::cookie_for("bob", "ai.providers.manage"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        json!({"credentials": []})
    );
    let (_, listed) = call(
        &socket,
        &manage,
        Method::GET,
        "/admin/api/ai/credentials",
        &None,
    )
    .await;
    assert_eq!(listed["credentials"].as_array().unwrap().len(), 1);
    assert_eq!(listed["credentials"][0]["keyFingerprintCurrent"], true);
}
