//! What the binary tests share: the chatd binary started as a developer starts it (a read-only
//! master key file, a token file, providers on loopback), killed with SIGKILL or stopped, or
//! chatd served in process over the shared tool loop; a scripted provider server that records
//! every request, with the Anthropic rounds it plays; and the CMS stand-in that knows every test
//! user's session.

#![allow(
    dead_code,
    reason = "the benches include this file by path, each using a part of it"
)]

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use atelier_chatd::caller::Caller;
use atelier_chatd::runtime::{LoopRunner, PrepareFuture, ProviderSetup, Providers};
use atelier_chatd::store::{Conversation, Store};
use atelier_chatd::{RawSettings, Router};
use atelier_http::{BoxError, Response};
use atelier_lab_model::cms::{CmsState, CmsUser, LabCms, SESSION_COOKIE};
use atelier_llm::{AnthropicDriver, Driver, Endpoint, ProviderKind};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

pub const TOKEN: &str = "test-service-token-000000000000000000000000";
pub const ORIGIN: &str = "https://cms.example";
pub const ALL_CAPS: &str = "ai.chat,ai.tools.write,ai.providers.manage,ai.audit.read";
/// The master key of every binary test: base64 of 32 bytes of 0x5A.
pub const MASTER_KEY_B64: &str = "WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo=";

/// The CMS stand-in this test binary shares: on a thread of its own, so it outlives each test's
/// runtime and serves every chatd a test starts (in process or as the binary).
struct SharedCms {
    origin: String,
    state: Arc<CmsState>,
}

fn shared_cms() -> &'static SharedCms {
    static CMS: OnceLock<SharedCms> = OnceLock::new();
    CMS.get_or_init(|| {
        let state = Arc::new(CmsState::with_lab_users());
        let served = Arc::clone(&state);
        let (ready, origin) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let cms = LabCms::spawn("127.0.0.1:0".parse().unwrap(), served).unwrap();
                ready.send(cms.origin()).unwrap();
                std::future::pending::<()>().await;
            });
        });
        SharedCms {
            origin: origin.recv().unwrap(),
            state,
        }
    })
}

/// The shared CMS stand-in's origin, for `CHATD_CMS_ORIGIN`.
pub fn cms_origin() -> String {
    shared_cms().origin.clone()
}

/// The shared CMS stand-in's state.
pub fn cms_state() -> &'static Arc<CmsState> {
    &shared_cms().state
}

/// Gives `user`'s session with `capabilities` (the one `send` signs in with) the display name
/// and email the CMS answers for it.
pub fn name_user(user: &str, capabilities: &str, display_name: &str, email: &str) {
    let cms = &shared_cms().state;
    let cookie = cms.session_for(user, capabilities);
    let capabilities: Vec<&str> = capabilities.split(',').collect();
    let mut named = CmsUser::new(user, "lab", &capabilities);
    display_name.clone_into(&mut named.display_name);
    email.clone_into(&mut named.email);
    cms.add_session(&cookie, named);
}

/// A `Cookie` header signing in as `user` with exactly `capabilities` (comma-separated).
pub fn cookie_for(user: &str, capabilities: &str) -> String {
    format!(
        "{SESSION_COOKIE}={}",
        shared_cms().state.session_for(user, capabilities)
    )
}

/// One request the scripted server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

/// What the scripted server answers.
pub enum Answer {
    /// A JSON body.
    Json(StatusCode, Value),
    /// SSE frames, each written as given (already `event:`/`data:` formatted), then the body
    /// ends — or, with `hang`, stays open until the client goes away.
    Sse { frames: Vec<String>, hang: bool },
    /// Waits, then answers.
    Delayed(Duration, Box<Answer>),
}

type Handler = dyn Fn(&Seen) -> Answer + Send + Sync;

/// A scripted provider on loopback.
pub struct Scripted {
    pub base_url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    /// The body of every request seen so far, oldest first.
    pub fn bodies(&self) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.body.clone())
            .collect()
    }

    /// The requests seen so far on `path` (query included).
    pub fn requests_to(&self, path: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }
}

/// Starts a scripted server answering with `handler`.
pub async fn scripted(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Scripted {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler: Arc<Handler> = Arc::new(handler);
    let log = Arc::clone(&seen);
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request: atelier_http::Request| {
            let (log, handler) = (Arc::clone(&log), Arc::clone(&handler));
            async move {
                let headers = request
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                    .collect();
                let method = request.method().to_string();
                let path = request
                    .uri()
                    .path_and_query()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let body = atelier_http::read_body(request.into_body(), 1 << 24)
                    .await
                    .unwrap();
                let seen = Seen {
                    method,
                    path,
                    headers,
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                };
                log.lock().unwrap().push(seen.clone());
                let mut answer = handler(&seen);
                while let Answer::Delayed(delay, inner) = answer {
                    tokio::time::sleep(delay).await;
                    answer = *inner;
                }
                match answer {
                    Answer::Json(status, value) => atelier_http::json_response(status, &value),
                    Answer::Sse { frames, hang } => sse(frames, hang),
                    Answer::Delayed(..) => unreachable!(),
                }
            }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    Scripted { base_url, seen }
}

fn sse(frames: Vec<String>, hang: bool) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
    tokio::spawn(async move {
        for frame in frames {
            if tx.send(Ok(Frame::data(Bytes::from(frame)))).await.is_err() {
                return;
            }
        }
        if hang {
            tx.closed().await;
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

/// Anthropic's named SSE frames for `events`.
pub fn anthropic_frames(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// One Anthropic model round that calls `tool` with `input` (call id `id`).
pub fn tool_round(id: &str, tool: &str, input: &Value) -> Vec<String> {
    anthropic_frames(&[
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
               "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": tool, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ])
}

/// One Anthropic model round that says `text` and ends the turn.
pub fn text_round(text: &str) -> Vec<String> {
    anthropic_frames(&[
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
               "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 8}}),
        json!({"type": "message_stop"}),
    ])
}

/// The result of the last tool call in a Messages request `body`, as the model reads it.
pub fn last_tool_result(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Every conversation talks to the Anthropic driver at `base_url` (a [`scripted`] server).
pub struct ScriptedProviders {
    pub base_url: String,
}

impl Providers for ScriptedProviders {
    fn prepare(&self, _: &Caller, _: &Conversation) -> PrepareFuture {
        let endpoint = Endpoint::new(
            reqwest::Client::new(),
            self.base_url.clone(),
            Some("k".into()),
        );
        let driver: Arc<dyn Driver> = Arc::new(AnthropicDriver::new(endpoint));
        Box::pin(async move {
            Ok(ProviderSetup::known(
                ProviderKind::Ollama,
                driver,
                ProviderKind::Anthropic.static_capabilities(),
            ))
        })
    }
}

/// chatd served in process on `dir/chatd.sock` (its database beside it), asking the CMS at
/// `cms_origin`, its turns run by the shared tool loop over the whole catalogue with the model
/// at `provider_url`; the socket.
pub fn serve_in_process(dir: &Path, cms_origin: String, provider_url: &str) -> PathBuf {
    let socket = dir.join("chatd.sock");
    let settings = RawSettings {
        database: Some(dir.join("chat.sqlite3")),
        public_origins: vec![ORIGIN.into()],
        service_token: Some(TOKEN.into()),
        openrouter_url: Some("http://127.0.0.1:9".into()),
        cms_origin: Some(cms_origin),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let store = Arc::new(Store::open(&settings.database).unwrap());
    let runner = LoopRunner::new(
        Arc::new(ScriptedProviders {
            base_url: provider_url.to_owned(),
        }),
        atelier_chatd::tools::catalogue(),
    );
    let router = Router::new(&settings, store, Arc::new(runner)).unwrap();
    serve_router(router, &socket);
    socket
}

/// Serves `router` on a unix socket bound at `socket`, in the current runtime, until the test
/// ends.
pub fn serve_router(router: Router, socket: &Path) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request| {
            let router = router.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
}

/// chat/completions SSE frames for `chunks`, with `[DONE]` unless the stream hangs.
pub fn chat_frames(chunks: &[Value], done: bool) -> Vec<String> {
    let mut frames: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        frames.push("data: [DONE]\n\n".to_owned());
    }
    frames
}

/// The chatd binary, killed on drop if still running.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A directory with a token file and a read-only master key file.
pub fn prepare_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    let key = dir.path().join("master.key");
    std::fs::write(&key, MASTER_KEY_B64).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
    dir
}

/// Starts chatd in `dir` with `env`, logging to `dir/chatd-<n>.log`, and waits until it
/// listens.
pub async fn start(dir: &Path, env: &[(&str, String)], run: usize) -> Daemon {
    let socket = dir.join("chatd.sock");
    let _ = std::fs::remove_file(&socket);
    let log = dir.join(format!("chatd-{run}.log"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_atelier-chatd"));
    command
        .arg("--listen")
        .arg(&socket)
        .arg("--database")
        .arg(dir.join("chat.sqlite3"))
        .arg("--token-file")
        .arg(dir.join("token"))
        .arg("--master-key-file")
        .arg(dir.join("master.key"))
        .args(["--public-origin", ORIGIN])
        .env_remove("CREDENTIALS_DIRECTORY")
        .env_remove("LISTEN_FDS")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .env("RUST_LOG", "debug")
        // Never the production pricing catalogue: nothing listens on port 9.
        .env("CHATD_OPENROUTER_URL", "http://127.0.0.1:9")
        .env("CHATD_CMS_ORIGIN", cms_origin())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().unwrap();
    let daemon = Daemon { child, socket, log };
    for _ in 0..400 {
        if UnixStream::connect(&daemon.socket).await.is_ok() {
            return daemon;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("chatd never listened");
}

/// SIGKILL, and wait for the process to be gone.
pub fn kill_9(daemon: &mut Daemon) {
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
}

/// SIGTERM, and the exit status once the process is gone (it drains first).
pub async fn terminate(daemon: &mut Daemon) -> std::process::ExitStatus {
    let pid = daemon.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A response whose body is read as it comes.
pub struct Reply {
    pub status: StatusCode,
    pub body: Incoming,
    buffer: Vec<u8>,
}

impl Reply {
    /// The next NDJSON line, or `None` at the end.
    pub async fn line(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let frame = tokio::time::timeout(Duration::from_secs(30), self.body.frame())
                .await
                .expect("the stream stalled")?;
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Every remaining line.
    pub async fn lines(mut self) -> Vec<Value> {
        let mut lines = Vec::new();
        while let Some(line) = self.line().await {
            lines.push(line);
        }
        lines
    }

    /// The whole body as JSON (`Null` when empty).
    pub async fn json(self) -> Value {
        let bytes = self.body.collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }
}

/// Sends a request as `user` with `capabilities` (the shared CMS stand-in's session of the pair).
pub async fn send(
    socket: &Path,
    user: &str,
    capabilities: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Reply {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("cookie", cookie_for(user, capabilities))
        .header("origin", ORIGIN);
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let response = sender
        .send_request(builder.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    Reply {
        status: response.status(),
        body: response.into_body(),
        buffer: Vec::new(),
    }
}

/// A JSON call as alice with every capability.
pub async fn call(
    socket: &Path,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let reply = send(socket, "alice", ALL_CAPS, method, path, body.as_ref()).await;
    let status = reply.status;
    (status, reply.json().await)
}

/// A JSON call as alice with `capabilities` and no body.
pub async fn call_as(
    socket: &Path,
    capabilities: &str,
    method: Method,
    path: &str,
) -> (StatusCode, Value) {
    let reply = send(socket, "alice", capabilities, method, path, None).await;
    let status = reply.status;
    (status, reply.json().await)
}

/// A stored "Custom Provider" credential for the OpenAI-compatible server at `base_url` (given
/// with `/v1`, as editors enter it); its id.
pub async fn custom_provider_credential(socket: &Path, base_url: &str) -> String {
    let (status, body) = call(
        socket,
        Method::POST,
        "/admin/api/ai/credentials",
        Some(
            serde_json::json!({"providerId": "openai-compatible", "authMode": "baseUrl",
                    "displayLabel": "Local llama", "baseUrl": format!("{base_url}/v1")}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["credential"]["id"].as_str().unwrap().to_owned()
}

/// Alice's chat turn in `scope` on conversation `id`, saying `text`; its stream, answered 200.
pub async fn chat_turn(socket: &Path, scope: &str, id: &str, text: &str) -> Reply {
    let body = json!({"conversationId": id, "content": [{"kind": "text", "text": text}]});
    let reply = send(
        socket,
        "alice",
        ALL_CAPS,
        Method::POST,
        &format!("/admin/api/ai/chat/{scope}"),
        Some(&body),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    reply
}
