//! A minimal MCP server over streamable HTTP, standing in for the Publication API's: one tool,
//! [`SEARCH_TOOL`], whose every successful call answers the same record ([`record`]).
//!
//! Like the model's script it keeps nothing between requests: the session id it gives at
//! `initialize` is always [`SESSION_ID`], and every later message must carry it (none is a
//! 400, another is a 404, as the protocol says). `initialize` and `tools/list` are answered as
//! JSON, `tools/call` as a one-shot event stream (a log notice, then the answer), so a client
//! meets both shapes; a notice gets 202 and no body, GET 405 (the server pushes nothing),
//! DELETE 204.
//!
//! The lab model serves it at [`MCP_PATH`] with `--mcp`, recording beside each such request
//! the SHA-256 of every key header it carried ([`key_fingerprints`]), so a test can show a
//! relay added the right key without the key being written down. [`McpServer`] serves it on
//! plain HTTP on loopback for tests in process, keeping every request whole.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use atelier_http::Listener;
use http_body_util::BodyExt as _;
use hyper::header::{HeaderValue, ALLOW};
use hyper::{HeaderMap, Method, Response, StatusCode};
use serde_json::{json, Map, Value};
use sha2::{Digest as _, Sha256};

use crate::record::RecordedRequest;
use crate::server::{empty, event_stream, json, Body};

/// Where the lab model serves it.
pub const MCP_PATH: &str = "/mcp";

/// The one tool.
pub const SEARCH_TOOL: &str = "publication_search";

/// The session id every `initialize` gets.
pub const SESSION_ID: &str = "lab-mcp-session-1";

/// A string only the record holds, for a test to find where the record went.
pub const RECORD_CANARY: &str = "lab-record-canary-4b7e";

/// The protocol versions it speaks; it answers a client asking another with the first.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The headers that carry a key, whose values are recorded as fingerprints only.
pub const KEY_HEADERS: [&str; 2] = ["x-api-key", "authorization"];

/// The session header.
const SESSION_HEADER: &str = "mcp-session-id";

/// JSON-RPC's code for a message that is no request.
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's code for an unknown method.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC's code for bad parameters (an unknown tool, too).
const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's code for a body that is not JSON.
const PARSE_ERROR: i64 = -32700;
/// The code of a refusal of the transport's own (no session).
const SERVER_ERROR: i64 = -32000;

/// The record every search finds.
pub fn record() -> Value {
    json!({
        "total": 1,
        "records": [{
            "id": "lab-record-1",
            "title": "Ánfora ibérica",
            "section": "archaeology",
            "note": RECORD_CANARY,
        }],
    })
}

/// The one tool as `tools/list` describes it.
pub fn search_tool() -> Value {
    json!({
        "name": SEARCH_TOOL,
        "title": "Search the publication",
        "description": "Search the published records of the site's collection.",
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for."}},
            "required": ["query"],
        },
    })
}

/// The key headers of `headers` as `sha256:<hex>` of their values, by lowercase name; the
/// headers absent are left out.
pub fn key_fingerprints(headers: &HeaderMap) -> Value {
    let mut keys = Map::new();
    for name in KEY_HEADERS {
        if let Some(value) = headers.get(name) {
            keys.insert(name.to_owned(), Value::from(fingerprint(value.as_bytes())));
        }
    }
    Value::Object(keys)
}

/// `sha256:` and the hex SHA-256 of `value`.
pub fn fingerprint(value: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(value)))
}

/// The answer to one request at [`MCP_PATH`].
pub fn answer(method: &Method, headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    match *method {
        Method::POST => post(headers, body),
        Method::DELETE if has_session(headers) => empty(StatusCode::NO_CONTENT),
        Method::DELETE => no_session(headers),
        _ => {
            let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
            response
        }
    }
}

fn post(headers: &HeaderMap, body: &[u8]) -> Response<Body> {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            PARSE_ERROR,
            "Parse error",
        );
    };
    let id = message.get("id").cloned();
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A client's answer to a request of the server's (it sends none): accepted.
        return match id {
            Some(_) if message.get("result").is_some() || message.get("error").is_some() => {
                empty(StatusCode::ACCEPTED)
            }
            _ => rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request",
            ),
        };
    };
    if method != "initialize" && !has_session(headers) {
        return no_session(headers);
    }
    let Some(id) = id else {
        return empty(StatusCode::ACCEPTED);
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match method {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or_default();
            let version = PROTOCOL_VERSIONS
                .into_iter()
                .find(|known| *known == asked)
                .unwrap_or(PROTOCOL_VERSIONS[0]);
            let mut response = json(
                StatusCode::OK,
                &rpc_result(
                    &id,
                    json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": false}},
                        "serverInfo": {"name": "atelier-lab-mcp", "version": env!("CARGO_PKG_VERSION")},
                    }),
                ),
            );
            response
                .headers_mut()
                .insert(SESSION_HEADER, HeaderValue::from_static(SESSION_ID));
            response
        }
        "ping" => json(StatusCode::OK, &rpc_result(&id, json!({}))),
        "tools/list" => json(
            StatusCode::OK,
            &rpc_result(&id, json!({"tools": [search_tool()]})),
        ),
        "tools/call" => call(&id, &params),
        _ => rpc_error(StatusCode::OK, id, METHOD_NOT_FOUND, "Method not found"),
    }
}

/// `tools/call`, answered as an event stream: a log notice, then the result.
fn call(id: &Value, params: &Value) -> Response<Body> {
    let name = params["name"].as_str().unwrap_or_default();
    if name != SEARCH_TOOL {
        return rpc_error(
            StatusCode::OK,
            id.clone(),
            INVALID_PARAMS,
            &format!("Unknown tool: {name}"),
        );
    }
    let query = params["arguments"]["query"]
        .as_str()
        .filter(|query| !query.trim().is_empty());
    let result = match query {
        Some(_) => json!({
            "content": [{"type": "text", "text": record().to_string()}],
            "structuredContent": record(),
            "isError": false,
        }),
        None => json!({
            "content": [{"type": "text", "text": format!("{SEARCH_TOOL} needs a non-empty `query`")}],
            "isError": true,
        }),
    };
    let notice = json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "logger": "lab", "data": "searching the lab record"},
    });
    event_stream(vec![
        format!("event: message\ndata: {notice}\n\n"),
        format!("event: message\ndata: {}\n\n", rpc_result(id, result)),
    ])
}

fn has_session(headers: &HeaderMap) -> bool {
    headers
        .get(SESSION_HEADER)
        .is_some_and(|session| session == SESSION_ID)
}

/// The refusal of a message without the session: 400 without the header, 404 with another.
fn no_session(headers: &HeaderMap) -> Response<Body> {
    if headers.contains_key(SESSION_HEADER) {
        rpc_error(
            StatusCode::NOT_FOUND,
            Value::Null,
            SERVER_ERROR,
            "Session not found",
        )
    } else {
        rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            SERVER_ERROR,
            "Bad Request: no session id",
        )
    }
}

fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response<Body> {
    json(
        status,
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    )
}

/// How long open requests may finish once an [`McpServer`] is dropped.
const DRAIN: Duration = Duration::from_secs(1);

/// The largest request body an [`McpServer`] reads.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024; // 4 MiB

/// The MCP stand-in on plain HTTP on a free loopback port, served by a thread of its own
/// until dropped; every request it gets is kept whole for the test.
pub struct McpServer {
    /// Its address.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<RecordedRequest>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl McpServer {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub fn start() -> std::io::Result<McpServer> {
        McpServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Binds `addr` and starts serving, on a thread of its own.
    pub fn bind(addr: SocketAddr) -> std::io::Result<McpServer> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            Listener::try_from(listener)?
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let log = Arc::clone(&seen);
        let thread = std::thread::spawn(move || {
            // Serving ends only when the server is dropped; a failure then is nobody's news.
            let _ = runtime.block_on(atelier_http::serve(
                listener,
                move |request| serve(Arc::clone(&log), request),
                async move {
                    let _ = stopped.await;
                },
                DRAIN,
            ));
        });
        Ok(McpServer {
            addr,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The URL of its endpoint: `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<RecordedRequest> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Keeps `request`, then answers it: [`answer`] at [`MCP_PATH`], not found elsewhere.
async fn serve(
    log: Arc<Mutex<Vec<RecordedRequest>>>,
    request: atelier_http::Request,
) -> atelier_http::Response {
    let (parts, body) = request.into_parts();
    let body = atelier_http::read_body(body, MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    let recorded = RecordedRequest::new(&parts, body);
    let response = if recorded.path == MCP_PATH {
        answer(&recorded.method, &parts.headers, &recorded.body)
    } else {
        rpc_error(
            StatusCode::NOT_FOUND,
            Value::Null,
            SERVER_ERROR,
            "only /mcp is served",
        )
    };
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(recorded);
    response.map(|body| body.map_err(atelier_http::BoxError::from).boxed())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyper::header::CONTENT_TYPE;

    use super::*;

    async fn text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn session() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(SESSION_HEADER, HeaderValue::from_static(SESSION_ID));
        headers
    }

    fn post_json(headers: &HeaderMap, body: Value) -> Response<Body> {
        answer(&Method::POST, headers, body.to_string().as_bytes())
    }

    #[tokio::test]
    async fn initialize_opens_the_one_session_in_the_version_asked() {
        for (asked, chosen) in [
            ("2025-03-26", "2025-03-26"),
            ("2099-01-01", PROTOCOL_VERSIONS[0]),
        ] {
            let response = post_json(
                &HeaderMap::new(),
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": asked, "capabilities": {}}}),
            );
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()[SESSION_HEADER], SESSION_ID);
            let body: Value = serde_json::from_str(&text(response).await).unwrap();
            assert_eq!(body["id"], 1);
            assert_eq!(body["result"]["protocolVersion"], chosen);
            assert!(body["result"]["capabilities"]["tools"].is_object());
        }
    }

    #[tokio::test]
    async fn every_later_message_needs_the_session() {
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let missing = post_json(&HeaderMap::new(), list.clone());
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
        let mut other = HeaderMap::new();
        other.insert(SESSION_HEADER, HeaderValue::from_static("old"));
        assert_eq!(
            post_json(&other, list.clone()).status(),
            StatusCode::NOT_FOUND
        );
        let listed = post_json(&session(), list);
        let body: Value = serde_json::from_str(&text(listed).await).unwrap();
        assert_eq!(body["result"]["tools"], json!([search_tool()]));
        let notice = post_json(
            &session(),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(notice.status(), StatusCode::ACCEPTED);
        assert_eq!(text(notice).await, "");
    }

    #[tokio::test]
    async fn a_call_is_answered_as_an_event_stream() {
        let call = |id: Value, name: &str, arguments: Value| {
            post_json(
                &session(),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}),
            )
        };
        let found = call(json!("c-7"), SEARCH_TOOL, json!({"query": "amphora"}));
        assert_eq!(found.headers()[CONTENT_TYPE], "text/event-stream");
        let events: Vec<Value> = text(found)
            .await
            .split("\n\n")
            .filter(|event| !event.is_empty())
            .map(|event| {
                let data = event
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap();
                serde_json::from_str(data).unwrap()
            })
            .collect();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["method"], "notifications/message");
        assert_eq!(events[1]["id"], "c-7");
        let result = &events[1]["result"];
        assert_eq!(result["isError"], false);
        assert_eq!(result["structuredContent"], record());
        assert!(result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains(RECORD_CANARY));

        let refused = text(call(json!(8), SEARCH_TOOL, json!({}))).await;
        assert!(refused.contains("\"isError\":true"), "{refused}");
        let unknown: Value =
            serde_json::from_str(&text(call(json!(9), "delete_all", json!({}))).await).unwrap();
        assert_eq!(unknown["error"]["code"], INVALID_PARAMS);
        assert_eq!(unknown["error"]["message"], "Unknown tool: delete_all");
    }

    #[tokio::test]
    async fn other_methods_and_bodies_are_refused_by_name() {
        assert_eq!(
            answer(&Method::GET, &session(), b"").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            answer(&Method::DELETE, &session(), b"").status(),
            StatusCode::NO_CONTENT
        );
        let junk = answer(&Method::POST, &session(), b"{not json");
        assert_eq!(junk.status(), StatusCode::BAD_REQUEST);
        let body: Value = serde_json::from_str(&text(junk).await).unwrap();
        assert_eq!(body["error"]["code"], PARSE_ERROR);
        let unknown = post_json(
            &session(),
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
        );
        let body: Value = serde_json::from_str(&text(unknown).await).unwrap();
        assert_eq!(body["error"]["code"], METHOD_NOT_FOUND);
    }

    #[test]
    fn keys_are_recorded_as_fingerprints() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("pub-key"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let keys = key_fingerprints(&headers);
        assert_eq!(
            keys,
            json!({"x-api-key": format!("sha256:{}", hex::encode(Sha256::digest(b"pub-key")))})
        );
        assert!(!keys.to_string().contains("pub-key"));
        assert_eq!(key_fingerprints(&HeaderMap::new()), json!({}));
    }
}
