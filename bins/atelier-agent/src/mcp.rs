//! A minimal MCP client over the streamable HTTP transport: what offering a server's tools to
//! the model takes, and nothing more — `initialize`, the `notifications/initialized` notice,
//! `tools/list` (every page) and `tools/call`.
//!
//! Each message is one POST of a JSON-RPC object to the server's URL. The answer comes as
//! `application/json`, or as a `text/event-stream` read only until the event that answers the
//! request; the server's own notices and requests before it are passed over (the client
//! declares no capability a server could ask it to use). The session id the server gives at
//! `initialize` (`Mcp-Session-Id`) and the protocol version it chose go with every later
//! message; a session the server no longer knows (404) is opened afresh, once per message.
//! No GET stream is opened and no session is ended: a turn is short and asks nothing of the
//! server between its calls.
//!
//! The server is reached directly, never through the proxy the environment names: in the turn
//! door it is the gate's relay on loopback, which adds the Publication API's key, so the agent
//! holds no key at all. Every answer is bounded in size and in time.
//!
//! Written here rather than taken from the official SDK: its client brings a date library,
//! the futures family, stream and SSE crates of its own and a background worker per
//! connection, for four messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use atelier_sse::{SseItem, SseParser};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::{json, Value};

/// The protocol version the client asks for; the server may choose another it speaks.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The most bytes one answer may hold, an event stream's whole length included.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024; // 4 MiB

/// How long the setup (`initialize`, the notice, every `tools/list` page) may take, and each
/// of its messages: the turn's first model request waits for it.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one tool call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most `tools/list` pages read.
const MAX_LIST_PAGES: usize = 10;

/// The most of an error answer's body quoted in an error, in characters.
const MAX_QUOTED_CHARS: usize = 300;

/// The session header, both ways.
const SESSION_HEADER: &str = "mcp-session-id";

/// The header naming the protocol version chosen at `initialize`.
const VERSION_HEADER: &str = "mcp-protocol-version";

/// What a POST accepts: either answer shape.
const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// How the client names itself to the server.
const CLIENT_NAME: &str = "atelier-agent";

/// Why a message got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The HTTP client could not be built.
    #[error("the HTTP client: {0}")]
    Client(String),
    /// The server could not be reached, or the connection broke.
    #[error("{0}")]
    Transport(String),
    /// The server answered with an HTTP error.
    #[error("the server answered HTTP {status}{}", quoted(.detail))]
    Status {
        /// The status code.
        status: u16,
        /// The start of the answer's body, if it said anything.
        detail: String,
    },
    /// The server no longer knows the session (404).
    #[error("the server no longer knows the session")]
    SessionGone,
    /// No answer in time.
    #[error("no answer within {} s", .0.as_secs())]
    Timeout(Duration),
    /// The answer is over [`MAX_ANSWER_BYTES`].
    #[error("the answer is over {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    /// The answer is not the JSON-RPC the protocol says.
    #[error("the answer is not MCP: {0}")]
    Protocol(String),
    /// The server answered the request with a JSON-RPC error.
    #[error("error {code}: {message}")]
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
    },
}

fn quoted(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

/// A transport failure with its causes (`error sending request` alone says little): the URL
/// is left out, since the command line gave it.
fn transport(error: reqwest::Error) -> McpError {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    McpError::Transport(text)
}

/// One tool as a server describes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteTool {
    /// Its name on the server.
    pub name: String,
    /// What it does, if the server says.
    #[serde(default)]
    pub description: Option<String>,
    /// A display name, if the server gives one.
    #[serde(default)]
    pub title: Option<String>,
    /// The JSON Schema of its arguments.
    #[serde(default)]
    pub input_schema: Value,
}

/// A call's result as the server gave it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    /// The content blocks (text, image, audio, resource links, embedded resources).
    #[serde(default)]
    pub content: Vec<Value>,
    /// The result as JSON, when the tool gives one.
    #[serde(default)]
    pub structured_content: Option<Value>,
    /// Whether the tool reports a failure.
    #[serde(default)]
    pub is_error: bool,
}

// === impl CallResult ===

impl CallResult {
    /// The content as text: text blocks as they are, a resource by its text or address, other
    /// media named but left out (the model is given text only). Blocks are joined by newlines.
    pub fn text(&self) -> String {
        let pieces: Vec<String> = self
            .content
            .iter()
            .map(|block| {
                let field = |name: &str| block.get(name).and_then(Value::as_str);
                match field("type") {
                    Some("text") => field("text").unwrap_or_default().to_owned(),
                    Some("resource") => {
                        let resource = &block["resource"];
                        match resource.get("text").and_then(Value::as_str) {
                            Some(text) => text.to_owned(),
                            None => format!(
                                "[resource {}]",
                                resource["uri"].as_str().unwrap_or("without an address")
                            ),
                        }
                    }
                    Some("resource_link") => format!("[resource {}]", field("uri").unwrap_or("")),
                    Some(kind) => format!("[{kind} content left out]"),
                    None => "[content of no type left out]".to_owned(),
                }
            })
            .collect();
        pieces.join("\n")
    }
}

/// What `initialize` answers, by the parts the client reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Initialized {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
}

/// One page of `tools/list`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolPage {
    tools: Vec<RemoteTool>,
    #[serde(default)]
    next_cursor: Option<String>,
}

/// A JSON-RPC answer, by the parts the client reads.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct RpcError {
    code: i64,
    #[serde(default)]
    message: String,
}

/// What the session carries on every message after `initialize`.
#[derive(Debug, Clone, Default)]
struct Session {
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
    /// Whether the server declared tools.
    serves_tools: bool,
}

/// A session with one MCP server.
#[derive(Debug)]
pub struct McpClient {
    http: reqwest::Client,
    url: Url,
    next_id: AtomicU64,
    session: Mutex<Session>,
}

// === impl McpClient ===

impl McpClient {
    /// A client of the server at `url`, not yet connected.
    pub fn new(url: Url) -> Result<McpClient, McpError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("atelier-agent/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| McpError::Client(e.to_string()))?;
        Ok(McpClient {
            http,
            url,
            next_id: AtomicU64::new(1),
            session: Mutex::new(Session::default()),
        })
    }

    /// A client of the server at `url`, its session opened.
    pub async fn connect(url: Url) -> Result<McpClient, McpError> {
        let client = McpClient::new(url)?;
        client.initialize().await?;
        Ok(client)
    }

    /// Opens a session: `initialize`, then the `notifications/initialized` notice.
    pub async fn initialize(&self) -> Result<(), McpError> {
        self.set_session(Session::default());
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION")},
        });
        let (result, headers) = self.request("initialize", params, SETUP_TIMEOUT).await?;
        let initialized: Initialized = parse(result)?;
        let version = HeaderValue::from_str(&initialized.protocol_version).map_err(|_| {
            McpError::Protocol("the protocol version is no header value".to_owned())
        })?;
        self.set_session(Session {
            id: headers.get(SESSION_HEADER).cloned(),
            version: Some(version),
            serves_tools: initialized.capabilities.get("tools").is_some(),
        });
        let notice = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.post(&notice, None, SETUP_TIMEOUT).await.map(|_| ())
    }

    /// Every tool the server offers, page after page (at most [`MAX_LIST_PAGES`]); none when
    /// it declared no tools.
    pub async fn list_tools(&self) -> Result<Vec<RemoteTool>, McpError> {
        if !self.session().serves_tools {
            return Ok(Vec::new());
        }
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let page: ToolPage =
                parse(self.in_session("tools/list", params, SETUP_TIMEOUT).await?)?;
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }

    /// Calls the tool `name` with `arguments` (a JSON object).
    pub async fn call_tool(&self, name: &str, arguments: &Value) -> Result<CallResult, McpError> {
        let params = json!({"name": name, "arguments": arguments});
        parse(self.in_session("tools/call", params, CALL_TIMEOUT).await?)
    }

    /// A request in the session, which is opened afresh once if the server has forgotten it.
    async fn in_session(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, McpError> {
        match self.request(method, params.clone(), limit).await {
            Err(McpError::SessionGone) => {
                self.initialize().await?;
                self.request(method, params, limit).await.map(|(r, _)| r)
            }
            other => other.map(|(result, _)| result),
        }
    }

    /// Sends the request `method` and returns its result and the answer's headers.
    async fn request(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<(Value, HeaderMap), McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (answer, headers) = self.post(&message, Some(id), limit).await?;
        let answer = answer.ok_or_else(|| McpError::Protocol("no answer".to_owned()))?;
        Ok((answer, headers))
    }

    /// POSTs `message`; for a request (`id`), reads the answer to it.
    async fn post(
        &self,
        message: &Value,
        id: Option<u64>,
        limit: Duration,
    ) -> Result<(Option<Value>, HeaderMap), McpError> {
        tokio::time::timeout(limit, self.exchange(message, id))
            .await
            .map_err(|_| McpError::Timeout(limit))?
    }

    async fn exchange(
        &self,
        message: &Value,
        id: Option<u64>,
    ) -> Result<(Option<Value>, HeaderMap), McpError> {
        let session = self.session();
        let mut request = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, ACCEPT_BOTH)
            .body(message.to_string());
        if let Some(id) = &session.id {
            request = request.header(SESSION_HEADER, id.clone());
        }
        if let Some(version) = &session.version {
            request = request.header(VERSION_HEADER, version.clone());
        }
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && session.id.is_some() {
            return Err(McpError::SessionGone);
        }
        if !status.is_success() {
            let body = read_bounded(response, MAX_QUOTED_CHARS * 4)
                .await
                .unwrap_or_default();
            let detail: String = String::from_utf8_lossy(&body)
                .trim()
                .chars()
                .take(MAX_QUOTED_CHARS)
                .collect();
            return Err(McpError::Status {
                status: status.as_u16(),
                detail,
            });
        }
        let headers = response.headers().clone();
        let Some(id) = id else {
            // A notice's answer (202 Accepted) has nothing to read.
            return Ok((None, headers));
        };
        let streamed = headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|kind| kind.trim_start().starts_with("text/event-stream"));
        let answer = if streamed {
            read_events(response, id).await?
        } else {
            let body = read_bounded(response, MAX_ANSWER_BYTES).await?;
            let value: Value = serde_json::from_slice(&body)
                .map_err(|e| McpError::Protocol(format!("the body is not JSON ({e})")))?;
            answer_to(&value, id)
                .ok_or_else(|| McpError::Protocol("the body answers another request".to_owned()))?
        };
        Ok((Some(answer?), headers))
    }

    fn session(&self) -> Session {
        self.session
            .lock()
            .map(|session| session.clone())
            .unwrap_or_default()
    }

    fn set_session(&self, session: Session) {
        if let Ok(mut held) = self.session.lock() {
            *held = session;
        }
    }
}

/// The body, at most `max` bytes (more is [`McpError::TooLarge`]).
async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, McpError> {
    if response
        .content_length()
        .is_some_and(|length| length > max as u64)
    {
        return Err(McpError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > max {
            return Err(McpError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads an event stream until the event answering `id`; the rest of it is dropped.
async fn read_events(
    mut response: reqwest::Response,
    id: u64,
) -> Result<Result<Value, McpError>, McpError> {
    let mut parser = SseParser::new();
    let mut read = 0usize;
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        read += chunk.len();
        if read > MAX_ANSWER_BYTES {
            return Err(McpError::TooLarge);
        }
        let items = parser
            .push(&chunk)
            .map_err(|e| McpError::Protocol(e.to_string()))?;
        for item in items {
            if let SseItem::Frame(frame) = item {
                if let Some(answer) = frame_answer(&frame.data, id) {
                    return Ok(answer);
                }
            }
        }
    }
    parser
        .take_unterminated()
        .and_then(|frame| frame_answer(&frame.data, id))
        .ok_or_else(|| McpError::Protocol("the event stream ended without the answer".to_owned()))
}

/// The answer to `id` in one event's data, if that is what it carries. Events that are not
/// JSON, or carry another message, are passed over.
fn frame_answer(data: &str, id: u64) -> Option<Result<Value, McpError>> {
    let value: Value = serde_json::from_str(data).ok()?;
    answer_to(&value, id)
}

/// The answer to `id` in `message` (one JSON-RPC message, or a batch of them): its result, or
/// its error as [`McpError::Rpc`]; `None` when it holds no answer to `id` (a request of the
/// server's is no answer, whatever its id).
fn answer_to(message: &Value, id: u64) -> Option<Result<Value, McpError>> {
    if let Value::Array(batch) = message {
        return batch.iter().find_map(|message| answer_to(message, id));
    }
    if message.get("method").is_some() {
        return None;
    }
    let answer = Answer::deserialize(message).ok()?;
    if answer.id != json!(id) {
        return None;
    }
    match (answer.result, answer.error) {
        (_, Some(error)) => Some(Err(McpError::Rpc {
            code: error.code,
            message: error.message,
        })),
        (Some(result), None) => Some(Ok(result)),
        (None, None) => Some(Err(McpError::Protocol(
            "the answer has neither a result nor an error".to_owned(),
        ))),
    }
}

fn parse<T: serde::de::DeserializeOwned>(result: Value) -> Result<T, McpError> {
    serde_json::from_value(result).map_err(|e| McpError::Protocol(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::sync::Arc;

    /// A server on loopback giving each request (its session header and JSON body) the whole
    /// HTTP response `answer` makes, one request a connection.
    fn serve(
        answer: impl Fn(Option<&str>, &Value) -> String + Send + 'static,
    ) -> (Url, Arc<Mutex<Vec<String>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = Url::parse(&format!("http://{}/mcp", listener.local_addr().unwrap())).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut session, mut length) = (None, 0);
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    let line = line.trim_end().to_ascii_lowercase();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(value) = line.strip_prefix("mcp-session-id: ") {
                        session = Some(value.to_owned());
                    }
                    if let Some(value) = line.strip_prefix("content-length: ") {
                        length = value.parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let body: Value = serde_json::from_slice(&body).unwrap();
                log.lock().unwrap().push(format!(
                    "{} {}",
                    body["method"].as_str().unwrap(),
                    session.as_deref().unwrap_or("-")
                ));
                let response = answer(session.as_deref(), &body);
                stream.write_all(response.as_bytes()).unwrap();
            }
        });
        (url, seen)
    }

    fn http(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// A server that opens session `s<n>` at the n-th `initialize` and answers calls only in
    /// the sessions `live` allows.
    fn forgetful(live: fn(&str) -> bool) -> (Url, Arc<Mutex<Vec<String>>>) {
        let opened = std::sync::atomic::AtomicUsize::new(0);
        serve(
            move |session, body| match body["method"].as_str().unwrap() {
                "initialize" => {
                    let n = opened.fetch_add(1, Ordering::Relaxed) + 1;
                    let result = json!({"jsonrpc": "2.0", "id": body["id"], "result": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}}}});
                    http(
                        "200 OK",
                        &format!("mcp-session-id: s{n}\r\n"),
                        &result.to_string(),
                    )
                }
                "notifications/initialized" => http("202 Accepted", "", ""),
                _ if session.is_some_and(live) => {
                    let result = json!({"jsonrpc": "2.0", "id": body["id"], "result": {"content": [{"type": "text", "text": "ok"}]}});
                    http("200 OK", "", &result.to_string())
                }
                _ => http("404 Not Found", "", ""),
            },
        )
    }

    #[tokio::test]
    async fn a_forgotten_session_is_opened_afresh_once() {
        let (url, seen) = forgetful(|session| session == "s2");
        let client = McpClient::connect(url).await.unwrap();
        let result = client.call_tool("t", &json!({})).await.unwrap();
        assert_eq!(result.text(), "ok");
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "initialize -",
                "notifications/initialized s1",
                "tools/call s1",
                "initialize -",
                "notifications/initialized s2",
                "tools/call s2"
            ]
        );

        let (url, seen) = forgetful(|_| false);
        let client = McpClient::connect(url).await.unwrap();
        let error = client.call_tool("t", &json!({})).await.unwrap_err();
        assert_eq!(error, McpError::SessionGone);
        assert_eq!(seen.lock().unwrap().len(), 6, "one fresh session, no more");
    }

    #[test]
    fn the_answer_to_a_request_is_found_by_its_id() {
        /// (name, message, the answer to id 3 it holds).
        type Case = (&'static str, Value, Option<Result<Value, McpError>>);
        let cases: [Case; 8] = [
            (
                "a result",
                json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}),
                Some(Ok(json!({"tools": []}))),
            ),
            (
                "an error",
                json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Unknown tool: x"}}),
                Some(Err(McpError::Rpc {
                    code: -32602,
                    message: "Unknown tool: x".to_owned(),
                })),
            ),
            (
                "another id",
                json!({"jsonrpc": "2.0", "id": 4, "result": {}}),
                None,
            ),
            (
                "a string id",
                json!({"jsonrpc": "2.0", "id": "3", "result": {}}),
                None,
            ),
            (
                "a notice",
                json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}),
                None,
            ),
            (
                "a request of the server's with the same id",
                json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
                None,
            ),
            (
                "in a batch",
                json!([{"jsonrpc": "2.0", "method": "ping", "id": 9}, {"jsonrpc": "2.0", "id": 3, "result": 1}]),
                Some(Ok(json!(1))),
            ),
            (
                "neither result nor error",
                json!({"jsonrpc": "2.0", "id": 3}),
                Some(Err(McpError::Protocol(
                    "the answer has neither a result nor an error".to_owned(),
                ))),
            ),
        ];
        for (name, message, want) in cases {
            assert_eq!(answer_to(&message, 3), want, "case {name}");
        }
        assert_eq!(frame_answer("not json", 3), None);
        assert_eq!(frame_answer("", 3), None);
    }

    #[test]
    fn a_result_reads_as_text() {
        let result: CallResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "first"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "pub://1", "text": "embedded"}},
                {"type": "resource", "resource": {"uri": "pub://2", "blob": "AAAA"}},
                {"type": "resource_link", "uri": "pub://3", "name": "three"},
                {"text": "no type"},
            ],
            "isError": true,
        }))
        .unwrap();
        assert!(result.is_error);
        assert_eq!(
            result.text(),
            "first\n[image content left out]\nembedded\n[resource pub://2]\n[resource pub://3]\n[content of no type left out]"
        );
        let empty: CallResult = serde_json::from_value(json!({})).unwrap();
        assert_eq!((empty.text(), empty.is_error), (String::new(), false));
    }

    #[test]
    fn errors_read_as_a_person_would_say_them() {
        for (error, want) in [
            (
                McpError::Status {
                    status: 502,
                    detail: "upstream_unreachable".to_owned(),
                },
                "the server answered HTTP 502: upstream_unreachable",
            ),
            (
                McpError::Status {
                    status: 500,
                    detail: String::new(),
                },
                "the server answered HTTP 500",
            ),
            (McpError::Timeout(SETUP_TIMEOUT), "no answer within 10 s"),
            (
                McpError::Rpc {
                    code: -32601,
                    message: "Method not found".to_owned(),
                },
                "error -32601: Method not found",
            ),
        ] {
            assert_eq!(error.to_string(), want);
        }
    }
}
