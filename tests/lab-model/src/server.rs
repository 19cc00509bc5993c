//! Serving: bind, write the CA (the ready signal), then TLS and HTTP/1.1 on every connection,
//! each request recorded and routed (with `--mcp`, `/mcp` to the MCP stand-in; with
//! `--upstream`, chat completions and the model list forwarded; else to the model's scripted
//! routes, else to the npm registry's), until SIGTERM or SIGINT.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::{Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_rustls::TlsAcceptor;

use crate::record::{self, Recorder};
use crate::registry::{self, Registry, Reply};
use crate::script::Script;
use crate::upstream::Forwarder;
use crate::{anthropic, mcp, openai, tls, Cli, LabError};

/// The largest request body read: far above an agent's prompt with its tool list.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024; // 32 MiB

/// A response body: whole, a stream of server-sent events, or the upstream's as it arrives.
/// Only the upstream's can fail; hyper then cuts the client's connection, so a broken stream
/// never looks complete.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// The chat completions route, scripted or forwarded.
const CHAT_COMPLETIONS: &str = "/v1/chat/completions";

/// The model list, forwarded with `--upstream` (the script has none).
const MODELS: &str = "/v1/models";

/// What every request shares.
#[derive(Debug)]
pub struct State {
    /// None with `--upstream` and no `--write-path`: the scripted routes have nothing to say.
    script: Option<Script>,
    /// With `--upstream`: where chat completions go.
    forwarder: Option<Forwarder>,
    registry: Registry,
    /// What tarball URLs name when the request names no usable `Host`.
    authority: String,
    recorder: Option<Recorder>,
    /// Whether `/mcp` is the MCP stand-in's.
    mcp: bool,
    /// With `--call-mcp-tool`: the suffix of the tool the script calls first.
    search: Option<String>,
    answered: AtomicU64,
}

impl State {
    /// The state of a lab model following `script` if any, forwarding through `forwarder` if
    /// any, and serving `registry`, whose tarball URLs name `authority` (`host[:port]`) when a
    /// request has no `Host`; logging to `recorder` if any; serving the MCP stand-in at
    /// `/mcp` if `mcp`.
    pub fn new(
        script: Option<Script>,
        forwarder: Option<Forwarder>,
        registry: Registry,
        authority: String,
        recorder: Option<Recorder>,
        mcp: bool,
    ) -> State {
        State {
            script,
            forwarder,
            registry,
            authority,
            recorder,
            mcp,
            search: None,
            answered: AtomicU64::new(0),
        }
    }

    /// The same state whose script first calls the offered tool whose name ends with
    /// `suffix`, when there is one (see [`crate::script::Seen::step`]).
    pub fn searching_first(self, suffix: Option<String>) -> State {
        State {
            search: suffix,
            ..self
        }
    }

    /// The next answer's number, from 1: the `<n>` of its ids.
    fn next(&self) -> u64 {
        self.answered.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Binds `--listen`, writes `--ca-out`, and serves until SIGTERM or SIGINT.
pub async fn serve(cli: Cli) -> Result<(), LabError> {
    let certificates = tls::issue(&cli.hosts)?;
    // Made before the listener, so the ready signal means the packages are there too.
    let registry = Registry::new(&cli.packages)?;
    let recorder = match &cli.record {
        Some(path) => Some(Recorder::open(path).map_err(|source| LabError::Record {
            path: path.clone(),
            source,
        })?),
        None => None,
    };
    let mut terminate = signal(SignalKind::terminate()).map_err(LabError::Runtime)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(LabError::Runtime)?;
    let listener = TcpListener::bind(cli.listen)
        .await
        .map_err(|source| LabError::Listen {
            addr: cli.listen,
            source,
        })?;
    write_atomically(&cli.ca_out, certificates.ca_pem.as_bytes()).map_err(|source| {
        LabError::CaOut {
            path: cli.ca_out.clone(),
            source,
        }
    })?;
    let authority = default_authority(cli.hosts.first(), cli.listen);
    let state = Arc::new(
        State::new(
            cli.script(),
            cli.upstream.map(Forwarder::new),
            registry,
            authority,
            recorder,
            cli.mcp,
        )
        .searching_first(cli.call_mcp_tool),
    );
    let acceptor = TlsAcceptor::from(certificates.server);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(acceptor.clone(), stream, Arc::clone(&state)));
                }
                // Transient (a connection reset before accept, descriptors exhausted): go on.
                Err(error) => eprintln!("atelier-lab-model: accept: {error}"),
            },
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
    }
    Ok(())
}

/// The authority a client would dial for the first `--host` (else the listen address's IP)
/// on the listen port: `host`, `host:port`, `[v6]:port`.
fn default_authority(host: Option<&String>, listen: SocketAddr) -> String {
    let host = host.map_or_else(|| listen.ip().to_string(), String::clone);
    let host = if host.parse::<Ipv6Addr>().is_ok() {
        format!("[{host}]")
    } else {
        host
    };
    match listen.port() {
        443 => host,
        port => format!("{host}:{port}"),
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it into place, so a reader
/// sees no file or the whole file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let mut temporary = std::ffi::OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".tmp{}", std::process::id()));
    let temporary = path.with_file_name(temporary);
    let written = std::fs::File::create(&temporary).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&temporary, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    renamed
}

async fn connection(acceptor: TlsAcceptor, stream: TcpStream, state: Arc<State>) {
    let stream = match acceptor.accept(stream).await {
        Ok(stream) => stream,
        Err(error) => {
            eprintln!("atelier-lab-model: TLS handshake: {error}");
            return;
        }
    };
    let service = hyper::service::service_fn(move |request| handle(Arc::clone(&state), request));
    if let Err(error) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        eprintln!("atelier-lab-model: connection: {error}");
    }
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes);
    let recorded_body = match &body {
        Ok(bytes) => bytes.clone(),
        Err(error) => Bytes::from(format!("[unread: {error}]")),
    };
    let to_mcp = state.mcp && parts.uri.path() == mcp::MCP_PATH;
    if let Some(recorder) = &state.recorder {
        let mut entry = record::entry(&parts.method, &parts.uri, &parts.headers, &recorded_body);
        // The keys themselves stay redacted; their fingerprints show which key came (the
        // gate's relays add the declared ones, which the agent never holds).
        entry["keys"] = mcp::key_fingerprints(&parts.headers);
        if let Err(error) = recorder.write(&entry) {
            // A request the test cannot see must not look answered.
            eprintln!("atelier-lab-model: record: {error}");
            return Ok(json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &anthropic::error("api_error", "the lab model could not record the request"),
            ));
        }
    }
    let host = parts.headers.get(HOST).and_then(|host| host.to_str().ok());
    Ok(match body {
        Ok(body) if to_mcp => mcp::answer(&parts.method, &parts.headers, &body),
        Ok(body) => match (&state.forwarder, &parts.method, parts.uri.path()) {
            (Some(forwarder), &Method::POST, CHAT_COMPLETIONS) => {
                let body = crate::upstream::flatten_text_parts(&body).unwrap_or(body);
                forwarder
                    .forward(Method::POST, CHAT_COMPLETIONS, body)
                    .await
            }
            (Some(forwarder), &Method::GET, MODELS) => {
                forwarder.forward(Method::GET, MODELS, Bytes::new()).await
            }
            _ => route(&state, &parts.method, parts.uri.path(), host, &body),
        },
        Err(_) => json(
            StatusCode::PAYLOAD_TOO_LARGE,
            &anthropic::error("request_too_large", "the request body is too large"),
        ),
    })
}

/// The scripted answer to one request (the query string plays no part); `host` is its `Host`
/// header. What `--upstream` forwards never comes here. The model's routes first; then a GET the registry recognizes as its own (`/<name>`,
/// `/<name>/-/<file>`); anything else is the model's not-found error.
pub fn route(
    state: &State,
    method: &Method,
    path: &str,
    host: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    match (method, path) {
        (&Method::POST, "/v1/messages") => messages(state, body),
        (&Method::POST, "/v1/messages/count_tokens") => {
            json(StatusCode::OK, &anthropic::count_tokens())
        }
        (&Method::POST, CHAT_COMPLETIONS) => chat_completions(state, body),
        (&Method::GET, _) => match state.registry.answer(path, authority(state, host)) {
            Some(reply) => package(reply),
            None => not_found(method, path),
        },
        _ => not_found(method, path),
    }
}

fn not_found(method: &Method, path: &str) -> Response<Body> {
    json(
        StatusCode::NOT_FOUND,
        &anthropic::error(
            "not_found_error",
            &format!("the lab model has no {method} {path}"),
        ),
    )
}

/// The authority tarball URLs name: the `Host` the client sent, so it fetches them as it
/// fetched the packument, unless it is no plain `host[:port]` (it lands in a URL), then
/// the default.
fn authority<'a>(state: &'a State, host: Option<&'a str>) -> &'a str {
    host.filter(|host| {
        !host.is_empty()
            && host
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b".-_:[]".contains(&byte))
    })
    .unwrap_or(&state.authority)
}

fn package(reply: Reply) -> Response<Body> {
    match reply {
        Reply::Packument(document) => json(StatusCode::OK, &document),
        Reply::Tarball(bytes) => {
            let mut response = Response::new(whole(bytes));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            response
        }
        Reply::NotFound => json(StatusCode::NOT_FOUND, &registry::not_found()),
    }
}

fn messages(state: &State, body: &[u8]) -> Response<Body> {
    let Some(script) = &state.script else {
        return unscripted(&Method::POST, "/v1/messages");
    };
    let request: anthropic::Request = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => {
            return json(
                StatusCode::BAD_REQUEST,
                &anthropic::error("invalid_request_error", &error.to_string()),
            )
        }
    };
    let n = state.next();
    let search = state.search.as_deref();
    if request.stream {
        let events = anthropic::events(&request, script, search, n);
        event_stream(events.iter().map(anthropic::Event::frame).collect())
    } else {
        json(
            StatusCode::OK,
            &anthropic::message(&request, script, search, n),
        )
    }
}

fn chat_completions(state: &State, body: &[u8]) -> Response<Body> {
    let Some(script) = &state.script else {
        return unscripted(&Method::POST, CHAT_COMPLETIONS);
    };
    let request: openai::Request = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => {
            return json(
                StatusCode::BAD_REQUEST,
                &openai::error("invalid_request_error", &error.to_string()),
            )
        }
    };
    let n = state.next();
    let search = state.search.as_deref();
    if request.stream {
        let mut chunks = openai::chunks_searching(&request, script, search, n);
        chunks.push(openai::DONE.to_owned());
        event_stream(chunks)
    } else {
        json(
            StatusCode::OK,
            &openai::completion_searching(&request, script, search, n),
        )
    }
}

/// The answer of a scripted route when there is no script (`--upstream` without
/// `--write-path`): not served, saying why.
fn unscripted(method: &Method, path: &str) -> Response<Body> {
    json(
        StatusCode::NOT_FOUND,
        &anthropic::error(
            "not_found_error",
            &format!(
                "the lab model has no script for {method} {path}: it was started with \
                 --upstream and no --write-path"
            ),
        ),
    )
}

/// A body sent whole.
fn whole(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A response of `status` with no body.
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(whole(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(whole(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A `text/event-stream` response whose events go out as separate chunks, as a real
/// provider's do.
pub(crate) fn event_stream(events: Vec<String>) -> Response<Body> {
    let frames = futures_util::stream::iter(
        events
            .into_iter()
            .map(|event| Ok::<_, hyper::Error>(Frame::data(Bytes::from(event)))),
    );
    let mut response = Response::new(StreamBody::new(frames).boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn state() -> State {
        let packages = ["escape-html@1.0.3".parse().unwrap()];
        State::new(
            Some(Script {
                write_path: "/a.html".to_owned(),
                write_content: "a".to_owned(),
                final_text: "b".to_owned(),
                replace: None,
            }),
            None,
            Registry::new(&packages).unwrap(),
            "registry.lab.example".to_owned(),
            None,
            false,
        )
    }

    async fn bytes(response: Response<Body>) -> Bytes {
        response.into_body().collect().await.unwrap().to_bytes()
    }

    async fn body(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn unknown_routes_are_not_found_errors() {
        for (method, path) in [
            (Method::GET, "/v1/messages"),
            (Method::POST, "/v1/complete"),
            (Method::GET, "/"),
        ] {
            let response = route(&state(), &method, path, None, b"");
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
            let body: Value = serde_json::from_str(&body(response).await).unwrap();
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "not_found_error");
        }
    }

    #[tokio::test]
    async fn a_body_that_is_no_request_is_refused() {
        let response = route(
            &state(),
            &Method::POST,
            "/v1/messages",
            None,
            b"{\"model\":1}",
        );
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body: Value = serde_json::from_str(&body(response).await).unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let response = route(&state(), &Method::POST, "/v1/chat/completions", None, b"[]");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn answers_are_numbered_from_one() {
        let state = state();
        let request = json!({ "model": "m", "messages": [{ "role": "user", "content": "go" }] });
        for n in 1..=2 {
            let response = route(
                &state,
                &Method::POST,
                "/v1/messages",
                None,
                request.to_string().as_bytes(),
            );
            let body: Value = serde_json::from_str(&body(response).await).unwrap();
            assert_eq!(body["id"], format!("msg_lab_{n}"));
        }
    }

    #[tokio::test]
    async fn a_streamed_chat_completion_ends_with_done() {
        let request = json!({ "model": "m", "stream": true, "messages": [{ "role": "user", "content": "go" }] });
        let response = route(
            &state(),
            &Method::POST,
            "/v1/chat/completions",
            None,
            request.to_string().as_bytes(),
        );
        assert_eq!(response.headers()[CONTENT_TYPE], "text/event-stream");
        assert!(body(response).await.ends_with("}\n\ndata: [DONE]\n\n"));
    }

    /// The packument of escape-html as served with `host`.
    async fn packument(host: Option<&str>) -> Value {
        let response = route(&state(), &Method::GET, "/escape-html", host, b"");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        serde_json::from_str(&body(response).await).unwrap()
    }

    #[tokio::test]
    async fn the_packument_names_the_tarball_at_the_host_asked() {
        let document = packument(Some("127.0.0.1:8443")).await;
        assert_eq!(document["name"], "escape-html");
        assert_eq!(document["dist-tags"]["latest"], "1.0.3");
        assert_eq!(
            document["versions"]["1.0.3"]["dist"]["tarball"],
            "https://127.0.0.1:8443/escape-html/-/escape-html-1.0.3.tgz"
        );
        // No Host, or one that is no plain host[:port]: the first --host.
        for host in [None, Some(""), Some("a/b"), Some("x@evil.example")] {
            let document = packument(host).await;
            assert_eq!(
                document["versions"]["1.0.3"]["dist"]["tarball"],
                "https://registry.lab.example/escape-html/-/escape-html-1.0.3.tgz",
                "{host:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_tarball_is_served_as_bytes_matching_its_integrity() {
        let document = packument(Some("registry.lab.example")).await;
        let response = route(
            &state(),
            &Method::GET,
            "/escape-html/-/escape-html-1.0.3.tgz",
            Some("registry.lab.example"),
            b"",
        );
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/octet-stream");
        let tarball = bytes(response).await;
        let package = registry::Package::make(&"escape-html@1.0.3".parse().unwrap()).unwrap();
        assert_eq!(tarball, package.tarball);
        let dist = &document["versions"]["1.0.3"]["dist"];
        assert_eq!(dist["integrity"], package.integrity);
        assert_eq!(dist["shasum"], package.shasum);
    }

    #[tokio::test]
    async fn unknown_packages_are_npm_not_found_errors() {
        for path in [
            "/left-pad",
            "/left-pad/-/left-pad-1.0.0.tgz",
            "/escape-html/-/escape-html-9.9.9.tgz",
        ] {
            let response = route(&state(), &Method::GET, path, None, b"");
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
            assert_eq!(body(response).await, r#"{"error":"not found"}"#);
        }
    }

    #[tokio::test]
    async fn the_registry_answers_gets_only() {
        let response = route(&state(), &Method::POST, "/escape-html", None, b"{}");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body: Value = serde_json::from_str(&body(response).await).unwrap();
        assert_eq!(body["error"]["type"], "not_found_error");
    }

    #[test]
    fn the_default_authority_is_the_first_host_on_the_listen_port() {
        let listen = |text: &str| text.parse::<SocketAddr>().unwrap();
        let host = "registry.lab.example".to_owned();
        assert_eq!(
            default_authority(Some(&host), listen("198.18.7.2:443")),
            "registry.lab.example"
        );
        assert_eq!(
            default_authority(Some(&host), listen("127.0.0.1:8443")),
            "registry.lab.example:8443"
        );
        assert_eq!(
            default_authority(Some(&"::1".to_owned()), listen("[::1]:8443")),
            "[::1]:8443"
        );
        assert_eq!(
            default_authority(None, listen("127.0.0.1:8443")),
            "127.0.0.1:8443"
        );
    }

    #[test]
    fn the_ca_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }
}
