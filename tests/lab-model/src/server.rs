//! Serving: bind, write the CA (the ready signal), then TLS and HTTP/1.1 on every connection,
//! each request recorded and routed, until SIGTERM or SIGINT.

use std::convert::Infallible;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_rustls::TlsAcceptor;

use crate::record::Recorder;
use crate::script::Script;
use crate::{anthropic, openai, tls, Cli, LabError};

/// The largest request body read: far above an agent's prompt with its tool list.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024; // 32 MiB

/// A response body: whole, or a stream of server-sent events.
pub type Body = BoxBody<Bytes, Infallible>;

/// What every request shares.
#[derive(Debug)]
pub struct State {
    script: Script,
    recorder: Option<Recorder>,
    answered: AtomicU64,
}

impl State {
    /// The state of a lab model following `script`, logging to `recorder` if any.
    pub fn new(script: Script, recorder: Option<Recorder>) -> State {
        State {
            script,
            recorder,
            answered: AtomicU64::new(0),
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
    let state = Arc::new(State::new(
        Script {
            write_path: cli.write_path,
            write_content: cli.write_content,
            final_text: cli.final_text,
        },
        recorder,
    ));
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
    if let Some(recorder) = &state.recorder {
        if let Err(error) =
            recorder.record(&parts.method, &parts.uri, &parts.headers, &recorded_body)
        {
            // A request the test cannot see must not look answered.
            eprintln!("atelier-lab-model: record: {error}");
            return Ok(json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &anthropic::error("api_error", "the lab model could not record the request"),
            ));
        }
    }
    Ok(match body {
        Ok(_) => route(&state, &parts.method, parts.uri.path(), &recorded_body),
        Err(_) => json(
            StatusCode::PAYLOAD_TOO_LARGE,
            &anthropic::error("request_too_large", "the request body is too large"),
        ),
    })
}

/// The answer to one request (the query string plays no part).
pub fn route(state: &State, method: &Method, path: &str, body: &[u8]) -> Response<Body> {
    match (method, path) {
        (&Method::POST, "/v1/messages") => messages(state, body),
        (&Method::POST, "/v1/messages/count_tokens") => {
            json(StatusCode::OK, &anthropic::count_tokens())
        }
        (&Method::POST, "/v1/chat/completions") => chat_completions(state, body),
        _ => json(
            StatusCode::NOT_FOUND,
            &anthropic::error(
                "not_found_error",
                &format!("the lab model has no {method} {path}"),
            ),
        ),
    }
}

fn messages(state: &State, body: &[u8]) -> Response<Body> {
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
    if request.stream {
        let events = anthropic::events(&request, &state.script, n);
        event_stream(events.iter().map(anthropic::Event::frame).collect())
    } else {
        json(
            StatusCode::OK,
            &anthropic::message(&request, &state.script, n),
        )
    }
}

fn chat_completions(state: &State, body: &[u8]) -> Response<Body> {
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
    if request.stream {
        let mut chunks = openai::chunks(&request, &state.script, n);
        chunks.push(openai::DONE.to_owned());
        event_stream(chunks)
    } else {
        json(
            StatusCode::OK,
            &openai::completion(&request, &state.script, n),
        )
    }
}

fn json(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A `text/event-stream` response whose events go out as separate chunks, as a real
/// provider's do.
fn event_stream(events: Vec<String>) -> Response<Body> {
    let frames = futures_util::stream::iter(
        events
            .into_iter()
            .map(|event| Ok::<_, Infallible>(Frame::data(Bytes::from(event)))),
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
        State::new(
            Script {
                write_path: "/a.html".to_owned(),
                write_content: "a".to_owned(),
                final_text: "b".to_owned(),
            },
            None,
        )
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
            let response = route(&state(), &method, path, b"");
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
            let body: Value = serde_json::from_str(&body(response).await).unwrap();
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], "not_found_error");
        }
    }

    #[tokio::test]
    async fn a_body_that_is_no_request_is_refused() {
        let response = route(&state(), &Method::POST, "/v1/messages", b"{\"model\":1}");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body: Value = serde_json::from_str(&body(response).await).unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let response = route(&state(), &Method::POST, "/v1/chat/completions", b"[]");
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
            request.to_string().as_bytes(),
        );
        assert_eq!(response.headers()[CONTENT_TYPE], "text/event-stream");
        assert!(body(response).await.ends_with("}\n\ndata: [DONE]\n\n"));
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
