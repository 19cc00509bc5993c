//! [`Client`]: HTTP/1.1 over sited's unix socket, paired the way the engine pairs (`/health`
//! must carry the fingerprint of this instance and token) before the first byte of any other
//! call, so the token never reaches a daemon it does not belong to; then every route of the
//! table.

use std::borrow::Cow;
use std::time::Duration;

use atelier_site_api::DriverId;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::OnceCell;

use crate::config::{Target, DEFAULT_TIMEOUT};
use crate::error::{Error, Mismatch, Problem};
use atelier_layout::names::{self, InstanceName};

use crate::fingerprint::{fingerprint_matches, instance_fingerprint};
use crate::model::{
    AuditEntry, BuildStarted, BuildWithLog, Capabilities, DataList, DeleteReport, Health,
    MessageAccepted, Preview, Releases, Served, SessionStarted, SessionStopped, SessionSummary,
    SiteStatus,
};
use crate::params::{check_required, check_text, Actor, Id, Slug};
use crate::routes::{Call, NewSite, Route};
use crate::sse::EventStream;

/// The `Host` of every request, as the engine sends it over the socket.
pub const HOST_NAME: &str = "site-builder.invalid";
/// The largest answer read (a build's log is the largest sited sends).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// How much of an unexpected body an error shows.
const SNIPPET_CHARS: usize = 200;

/// The engine's user id header (sent on every authenticated call, like the engine).
const USER_ID_HEADER: &str = "x-dedalo-user-id";
/// The engine's username header.
const USERNAME_HEADER: &str = "x-dedalo-username";
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const JSON_OR_PROBLEM: HeaderValue =
    HeaderValue::from_static("application/json, application/problem+json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");

/// A successful answer: its status and its body exactly as sent (`{}` for a 204 or an empty
/// body, as the engine reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The body read as the route's shape.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::BadResponse {
            status: self.status,
            why: format!(
                "the body is not the route's shape: {e}: {}",
                snippet(&self.body)
            ),
        })
    }
}

/// The client of one sited instance, for one actor.
///
/// Pairing: before its first call the client asks `GET /health` with no credentials, and goes
/// on only if the `instance_fingerprint` is the one its instance and token make (compared in
/// constant time). A mismatch is [`Error::InstanceMismatch`] and nothing else is sent; only a
/// success is remembered. Each call then carries `Authorization: Bearer`, the actor's
/// `X-Dedalo-User-Id`/`X-Dedalo-Username` headers, and, when mutating, a JSON body with the
/// route's fields and `actor`.
#[derive(Debug)]
pub struct Client {
    target: Target,
    actor: Actor,
    timeout: Duration,
    expected_fingerprint: String,
    paired: OnceCell<()>,
}

impl Client {
    /// A client of `target` acting for `actor`; control calls time out after 30 s.
    pub fn new(target: Target, actor: Actor) -> Client {
        let expected_fingerprint =
            instance_fingerprint(target.instance.as_str(), target.token.expose());
        Client {
            target,
            actor,
            timeout: DEFAULT_TIMEOUT,
            expected_fingerprint,
            paired: OnceCell::new(),
        }
    }

    /// Sets the deadline of each control call (pairing included). Streams have none.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The actor.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// Returns true if and only if a pairing has succeeded.
    pub fn is_paired(&self) -> bool {
        self.paired.initialized()
    }

    /// Asks `/health` and verifies the fingerprint, whether or not pairing already succeeded.
    pub async fn pair(&self) -> Result<Health, Error> {
        self.send(&Route::Health).await?.parse()
    }

    /// Makes one call, pairing first if need be, and returns the successful answer as sent.
    /// `Route::Health` is the pairing itself (one request). `Route::Events` reads the whole
    /// stream under the control deadline; [`Client::follow`] reads it live.
    pub async fn send(&self, route: &Route) -> Result<Reply, Error> {
        self.deadline(async {
            if *route == Route::Health {
                let reply = self.ask_health().await?;
                // Another call may have paired meanwhile; either way it is paired now.
                let _ = self.paired.set(());
                return Ok(reply);
            }
            self.ensure_paired().await?;
            let response = self
                .exchange(self.request(&route.call(), route.is_stream())?)
                .await?;
            let status = response.status();
            let body = read_body(response.into_body(), status, &self.target).await?;
            answer(status, body)
        })
        .await
    }

    /// Opens a session's event stream after `after` (-1: from the start). Pairing and the
    /// answer's head are under the control deadline; the stream itself has none.
    pub async fn follow(&self, session: &Id, after: i64) -> Result<EventStream, Error> {
        if after < -1 {
            return Err(crate::error::Invalid::Cursor(after).into());
        }
        let route = Route::Events {
            session: session.clone(),
            after,
        };
        let response = self
            .deadline(async {
                self.ensure_paired().await?;
                self.exchange(self.request(&route.call(), true)?).await
            })
            .await?;
        let status = response.status();
        if !status.is_success() {
            let body = self
                .deadline(read_body(response.into_body(), status, &self.target))
                .await?;
            return Err(answer(status, body).err().unwrap_or(Error::BadResponse {
                status: status.as_u16(),
                why: "the stream answered without success".into(),
            }));
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !content_type.starts_with("text/event-stream") {
            return Err(Error::BadResponse {
                status: status.as_u16(),
                why: format!(
                    "the stream's content type is {content_type:?}, not text/event-stream"
                ),
            });
        }
        Ok(EventStream::new(response.into_body(), status.as_u16()))
    }

    // --- the routes, typed ---

    /// `GET /v1/capabilities`.
    pub async fn capabilities(&self) -> Result<Capabilities, Error> {
        self.send(&Route::Capabilities).await?.parse()
    }

    /// `POST /v1/sites` (201 SiteStatus).
    pub async fn create_site(&self, site: NewSite) -> Result<SiteStatus, Error> {
        check_required("name", &site.name)?;
        check_required("domain", &site.domain)?;
        self.send(&Route::CreateSite(site)).await?.parse()
    }

    /// `GET /v1/sites`.
    pub async fn list_sites(&self) -> Result<Vec<SiteStatus>, Error> {
        Ok(self
            .send(&Route::ListSites)
            .await?
            .parse::<DataList<_>>()?
            .data)
    }

    /// `GET /v1/sites/:slug`.
    pub async fn site(&self, slug: &Slug) -> Result<SiteStatus, Error> {
        self.send(&Route::GetSite(slug.clone())).await?.parse()
    }

    /// `DELETE /v1/sites/:slug` (production too when `purge_prod`; confirming is the
    /// caller's job).
    pub async fn delete_site(&self, slug: &Slug, purge_prod: bool) -> Result<DeleteReport, Error> {
        let route = Route::DeleteSite {
            slug: slug.clone(),
            purge_prod,
        };
        self.send(&route).await?.parse()
    }

    /// `POST /v1/sites/:slug/sessions`: the new session's id.
    pub async fn start_session(
        &self,
        slug: &Slug,
        prompt: &str,
        driver: Option<DriverId>,
    ) -> Result<Id, Error> {
        check_text("prompt", prompt)?;
        let route = Route::StartSession {
            slug: slug.clone(),
            prompt: prompt.to_owned(),
            driver,
        };
        let started: SessionStarted = self.send(&route).await?.parse()?;
        session_id(&started.session_id)
    }

    /// `GET /v1/sites/:slug/sessions`, newest first.
    pub async fn list_sessions(&self, slug: &Slug) -> Result<Vec<SessionSummary>, Error> {
        let reply = self.send(&Route::ListSessions(slug.clone())).await?;
        Ok(reply.parse::<DataList<_>>()?.data)
    }

    /// `POST /v1/sessions/:id/messages`.
    pub async fn send_message(
        &self,
        session: &Id,
        message: &str,
    ) -> Result<MessageAccepted, Error> {
        check_text("message", message)?;
        let route = Route::SendMessage {
            session: session.clone(),
            message: message.to_owned(),
        };
        self.send(&route).await?.parse()
    }

    /// `POST /v1/sessions/:id/stop`.
    pub async fn stop_session(&self, session: &Id) -> Result<SessionStopped, Error> {
        self.send(&Route::StopSession(session.clone()))
            .await?
            .parse()
    }

    /// `POST /v1/sites/:slug/build` (202): the build's id.
    pub async fn start_build(&self, slug: &Slug) -> Result<BuildStarted, Error> {
        self.send(&Route::StartBuild(slug.clone())).await?.parse()
    }

    /// `GET /v1/sites/:slug/builds/:id`.
    pub async fn build(&self, slug: &Slug, build: &Id) -> Result<BuildWithLog, Error> {
        let route = Route::GetBuild {
            slug: slug.clone(),
            build: build.clone(),
        };
        self.send(&route).await?.parse()
    }

    /// `GET /v1/sites/:slug/preview`.
    pub async fn preview(&self, slug: &Slug) -> Result<Preview, Error> {
        self.send(&Route::Preview(slug.clone())).await?.parse()
    }

    /// `POST /v1/sites/:slug/publish` with `confirm: true` (confirming is the caller's job).
    pub async fn publish(&self, slug: &Slug, note: Option<&str>) -> Result<Served, Error> {
        let route = Route::Publish {
            slug: slug.clone(),
            note: note.map(str::to_owned),
        };
        self.send(&route).await?.parse()
    }

    /// `GET /v1/sites/:slug/releases`.
    pub async fn releases(&self, slug: &Slug) -> Result<Releases, Error> {
        self.send(&Route::Releases(slug.clone())).await?.parse()
    }

    /// `POST /v1/sites/:slug/rollback`.
    pub async fn rollback(&self, slug: &Slug, release: &Id) -> Result<Served, Error> {
        let route = Route::Rollback {
            slug: slug.clone(),
            release: release.clone(),
        };
        self.send(&route).await?.parse()
    }

    /// `GET /v1/audit`, newest first.
    pub async fn audit(
        &self,
        site: Option<&Slug>,
        limit: Option<u32>,
    ) -> Result<Vec<AuditEntry>, Error> {
        crate::error::Invalid::check_audit_limit(limit)?;
        let route = Route::Audit {
            site: site.cloned(),
            limit,
        };
        Ok(self.send(&route).await?.parse::<DataList<_>>()?.data)
    }

    // --- the wire ---

    async fn deadline<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    socket: self.target.socket.clone(),
                    after: self.timeout,
                })
            })
    }

    async fn ensure_paired(&self) -> Result<(), Error> {
        self.paired
            .get_or_try_init(|| async { self.ask_health().await.map(|_| ()) })
            .await
            .map(|_| ())
    }

    /// `GET /health` without credentials, and the fingerprint check.
    async fn ask_health(&self) -> Result<Reply, Error> {
        let call = Route::Health.call();
        let request = hyper::Request::get(self.uri(&call)?)
            .header(HOST, HOST_NAME)
            .header(ACCEPT, JSON)
            .body(Full::new(Bytes::new()))
            .map_err(|e| self.unreachable(format!("building the request: {e}")))?;
        let response = self.exchange(request).await?;
        let status = response.status();
        let body = read_body(response.into_body(), status, &self.target).await?;
        if !status.is_success() {
            // A daemon that refused with a problem answered: its reason is the operator's
            // lead (a 401 here is a base path sited does not serve /health under).
            return Err(match Problem::parse(status.as_u16(), &body) {
                Some(problem) => Error::Problem(problem),
                None => self.unreachable(format!("GET /health answered {status}")),
            });
        }
        let value: Option<Value> = serde_json::from_slice(&body).ok();
        let received = value
            .as_ref()
            .and_then(|v| v.get("instance_fingerprint"))
            .and_then(Value::as_str);
        let why = match received {
            None => Mismatch::Missing,
            Some(f) if !fingerprint_matches(f, &self.expected_fingerprint) => Mismatch::Different,
            Some(_) => {
                return Ok(Reply {
                    status: status.as_u16(),
                    body,
                })
            }
        };
        Err(Error::InstanceMismatch {
            socket: self.target.socket.clone(),
            instance: self.target.instance.to_string(),
            why,
        })
    }

    fn uri(&self, call: &Call) -> Result<hyper::Uri, Error> {
        let text = format!("{}{}", self.target.base_path.as_str(), call.path_and_query);
        text.parse()
            .map_err(|e| self.unreachable(format!("the request path {text:?}: {e}")))
    }

    /// An authenticated request for `call`.
    fn request(&self, call: &Call, stream: bool) -> Result<hyper::Request<Full<Bytes>>, Error> {
        let mut bearer = HeaderValue::try_from(format!("Bearer {}", self.target.token.expose()))
            .map_err(|_| self.unreachable("the token cannot travel in a header".into()))?;
        bearer.set_sensitive(true);
        let username = HeaderValue::from_bytes(self.actor.username().as_bytes()).map_err(|_| {
            crate::error::Invalid::Actor("the actor's name cannot travel in a header".into())
        })?;
        let mut builder = hyper::Request::builder()
            .method(call.method.clone())
            .uri(self.uri(call)?)
            .header(HOST, HOST_NAME)
            .header(
                ACCEPT,
                if stream {
                    EVENT_STREAM
                } else {
                    JSON_OR_PROBLEM
                },
            )
            .header(AUTHORIZATION, bearer)
            .header(USER_ID_HEADER, self.actor.user_id())
            .header(USERNAME_HEADER, username);
        let body = match &call.fields {
            Some(fields) => {
                let mut fields = fields.clone();
                fields.insert("actor".into(), self.actor.to_json());
                builder = builder.header(CONTENT_TYPE, JSON);
                Bytes::from(Value::Object(fields).to_string())
            }
            None => Bytes::new(),
        };
        builder
            .body(Full::new(body))
            .map_err(|e| self.unreachable(format!("building the request: {e}")))
    }

    /// One request on a fresh connection; the connection lives until the answer's body is
    /// read or dropped.
    async fn exchange(
        &self,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        let socket = &self.target.socket;
        let stream = UnixStream::connect(socket).await.map_err(|e| {
            let hint = connect_hint(e.kind(), &self.target.instance);
            self.unreachable(format!("connecting: {e}{hint}"))
        })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(format!("HTTP handshake: {e}")))?;
        // A failure of the connection surfaces through the response or its body.
        tokio::spawn(connection);
        sender
            .send_request(request)
            .await
            .map_err(|e| self.unreachable(format!("sending the request: {e}")))
    }

    fn unreachable(&self, why: String) -> Error {
        Error::Unreachable {
            socket: self.target.socket.clone(),
            why,
        }
    }
}

/// What an operator can do about `instance`'s socket that would not connect, by the kind of
/// failure, naming the instance's own units.
fn connect_hint(kind: std::io::ErrorKind, instance: &InstanceName) -> String {
    let socket_unit = names::sited_socket_unit(instance);
    match kind {
        std::io::ErrorKind::NotFound => format!(
            "; nothing is there: check --socket, and that the daemon's socket unit is active \
             (systemctl status {socket_unit})"
        ),
        std::io::ErrorKind::PermissionDenied => "; this user may not open it: the socket is the \
             engine's group's, so run as a member of that group or as root"
            .to_owned(),
        std::io::ErrorKind::ConnectionRefused => format!(
            "; no one accepts on it: its socket unit is stopped; start it (systemctl start \
             {socket_unit}) and see journalctl -u {} for why",
            names::sited_service_unit(instance)
        ),
        _ => String::new(),
    }
}

/// A session id from sited, checked like any id the client sends.
fn session_id(text: &str) -> Result<Id, Error> {
    Id::parse("session", text).map_err(|_| Error::BadResponse {
        status: StatusCode::CREATED.as_u16(),
        why: format!("the new session's id {text:?} is not an id"),
    })
}

async fn read_body(
    body: hyper::body::Incoming,
    status: StatusCode,
    target: &Target,
) -> Result<Bytes, Error> {
    match Limited::new(body, MAX_RESPONSE_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Error::BadResponse {
            status: status.as_u16(),
            why: format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes"),
        }),
        Err(e) => Err(Error::Unreachable {
            socket: target.socket.clone(),
            why: format!("reading the answer: {e}"),
        }),
    }
}

/// A success as the engine reads it; an error as its problem.
fn answer(status: StatusCode, body: Bytes) -> Result<Reply, Error> {
    if status.is_success() {
        let empty = status == StatusCode::NO_CONTENT || body.iter().all(u8::is_ascii_whitespace);
        let body = if empty {
            Bytes::from_static(b"{}")
        } else {
            body
        };
        return Ok(Reply {
            status: status.as_u16(),
            body,
        });
    }
    match Problem::parse(status.as_u16(), &body) {
        Some(problem) => Err(Error::Problem(problem)),
        None => Err(Error::BadResponse {
            status: status.as_u16(),
            why: format!("not a problem+json answer: {}", snippet(&body)),
        }),
    }
}

/// The start of a body, printable.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut shown: String = text.chars().take(SNIPPET_CHARS).collect();
    if text.chars().count() > SNIPPET_CHARS {
        shown.push('…');
    }
    format!("{:?}", shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_the_engine_reads_them() {
        let ok = answer(StatusCode::OK, Bytes::from_static(b"{\"data\":[]}")).unwrap();
        assert_eq!(ok.body, Bytes::from_static(b"{\"data\":[]}"));
        let none = answer(StatusCode::NO_CONTENT, Bytes::new()).unwrap();
        assert_eq!((none.status, none.body), (204, Bytes::from_static(b"{}")));
        let empty = answer(StatusCode::OK, Bytes::from_static(b"\n")).unwrap();
        assert_eq!(empty.body, Bytes::from_static(b"{}"));

        let problem = br#"{"type":"https://dedalo.dev/site-builder/problems/conflict","title":"Conflict","status":409,"detail":"busy","reason":"session_running"}"#;
        let error = answer(StatusCode::CONFLICT, Bytes::from_static(problem)).unwrap_err();
        assert_eq!(error.code(), "session_running");
        assert_eq!(error.problem().map(|p| p.status), Some(409));

        let error = answer(
            StatusCode::BAD_GATEWAY,
            Bytes::from_static(b"<html>bad</html>"),
        )
        .unwrap_err();
        assert_eq!(error.code(), "bad_response");
        assert!(error.to_string().contains("<html>bad</html>"), "{error}");
    }

    #[test]
    fn a_reply_that_is_not_the_routes_shape_is_a_bad_response() {
        let reply = Reply {
            status: 200,
            body: Bytes::from_static(b"{\"data\":5}"),
        };
        let error = reply.parse::<DataList<SessionSummary>>().unwrap_err();
        assert_eq!(error.code(), "bad_response");
    }

    #[test]
    fn snippets_are_bounded_and_escaped() {
        let long = "x".repeat(1000);
        let shown = snippet(long.as_bytes());
        assert!(shown.chars().count() < 210, "{shown}");
        assert_eq!(snippet(b"a\x1b[31mb\n"), "\"a\\u{1b}[31mb\\n\"");
    }
}
