//! chatd's side of the CMS it serves: where the CMS listens on loopback ([`CmsOrigin`]), asking
//! it who a browser's session cookie belongs to ([`CmsClient::check_session`]), handing it the
//! tool results meant for its own editor bridges ([`CmsClient::forward_tool_result`]), and
//! reading its content as the chatting user ([`reads`]).
//!
//! The CMS is the only authority on sessions and content: chatd never reads its database, it
//! asks the CMS's own routes with the cookie and nothing else of the browser's request. The
//! client speaks plain HTTP/1.1 to a loopback address only, follows no redirects, reads no proxy
//! from the environment, and gives up after [`CMS_TIMEOUT`].

pub mod reads;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use atelier_http::{full_body, Response};
use bytes::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE, COOKIE};
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use crate::caller::{Caller, SessionCookie};
use crate::error::CmsProblem;

/// The route that names a session's user, role and capabilities.
pub const ME_PATH: &str = "/admin/api/cms/me";

/// The route the CMS's own editor bridges take their results on (and chatd's, on its socket).
pub const TOOL_RESULT_PATH: &str = "/admin/api/ai/tool-result";

/// The longest any one call to the CMS may take, connection and body included: the CMS answers
/// the session check and the content reads from memory and indexed lookups, so anything slower
/// is a CMS in trouble.
pub const CMS_TIMEOUT: Duration = Duration::from_secs(5);

/// Connecting to loopback either works at once or nothing listens.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The largest `/me` body read: a user, a role and at most a few dozen capabilities are a few
/// kilobytes.
const MAX_ME_BODY: usize = 256 * 1024;

/// The largest answer to a forwarded tool result relayed: the CMS answers `{"ok":true}` or an
/// error message.
const MAX_RELAYED_BODY: usize = 256 * 1024;

/// The longest user id accepted; ids are the CMS's, opaque to chatd (its own are 21 chars).
const MAX_USER_ID_LEN: usize = 128;

/// The most capabilities one user may carry; the CMS knows a few dozen.
const MAX_CAPABILITIES: usize = 1024;

/// The longest capability name accepted.
const MAX_CAPABILITY_LEN: usize = 128;

/// The most of a user's name kept for the audit, in characters.
const MAX_LABEL_CHARS: usize = 200;

/// Where the CMS listens: `http://` and a loopback IP address with a port, nothing else, so a
/// session cookie never leaves the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmsOrigin(SocketAddr);

/// Why a CMS origin was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmsOriginError {
    /// Only plain `http://` is spoken: the CMS is on the same machine.
    #[error("must start with http://")]
    NotHttp,
    /// Host names are refused: resolving one could lead off the machine.
    #[error("must be an IP address with a port, e.g. http://127.0.0.1:3001")]
    NotAddressAndPort,
    /// The address is not 127.0.0.0/8 or ::1.
    #[error("must be a loopback address (127.0.0.0/8 or [::1])")]
    NotLoopback,
    /// Port 0 names no listener.
    #[error("must name a port other than 0")]
    PortZero,
}

impl CmsOrigin {
    /// The address the CMS listens on.
    pub fn addr(self) -> SocketAddr {
        self.0
    }

    fn uri(self, path: &str) -> Result<hyper::Uri, CmsError> {
        format!("{self}{path}")
            .parse()
            .map_err(|error: hyper::http::uri::InvalidUri| CmsError::Unreachable(error.to_string()))
    }
}

impl FromStr for CmsOrigin {
    type Err = CmsOriginError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let value = value.trim();
        let rest = value
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
            .and_then(|_| value.get(7..))
            .ok_or(CmsOriginError::NotHttp)?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| CmsOriginError::NotAddressAndPort)?;
        if !addr.ip().is_loopback() {
            return Err(CmsOriginError::NotLoopback);
        }
        if addr.port() == 0 {
            return Err(CmsOriginError::PortZero);
        }
        Ok(CmsOrigin(addr))
    }
}

impl fmt::Display for CmsOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.0)
    }
}

/// Why a call to the CMS gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmsError {
    /// Nothing answered, or the connection broke.
    #[error("cannot reach the CMS: {0}")]
    Unreachable(String),
    /// The CMS took longer than [`CMS_TIMEOUT`].
    #[error("the CMS did not answer within {0:?}")]
    TimedOut(Duration),
    /// The CMS answered with a status its route does not give.
    #[error("the CMS answered with status {0}")]
    UnexpectedStatus(u16),
    /// The answer's body is not what the route returns.
    #[error("the CMS's answer cannot be read: {0}")]
    BadAnswer(String),
    /// The answer's body is larger than the route's bound, in bytes.
    #[error("the CMS's answer is larger than the {0} bytes read of it")]
    TooLarge(usize),
}

impl CmsError {
    /// What the browser is told when a session check fails this way.
    pub fn session_problem(&self) -> CmsProblem {
        match self {
            CmsError::Unreachable(_) | CmsError::TimedOut(_) => CmsProblem::SessionUnreachable,
            CmsError::UnexpectedStatus(_) | CmsError::BadAnswer(_) | CmsError::TooLarge(_) => {
                CmsProblem::SessionUnreadable
            }
        }
    }
}

/// The CMS's verdict on a session cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionCheck {
    /// A signed-in user with these capabilities.
    SignedIn(Caller),
    /// No such session (or it expired, or its user is disabled).
    Unauthorized,
    /// The session exists but has not passed its second factor yet.
    MfaRequired,
}

#[derive(Deserialize)]
struct MeBody {
    user: MeUser,
    capabilities: Vec<String>,
}

#[derive(Deserialize)]
struct MeUser {
    id: String,
    // Read leniently: a name that is not a string leaves the user unnamed, still signed in.
    #[serde(default, rename = "displayName")]
    display_name: Option<serde_json::Value>,
    #[serde(default)]
    email: Option<serde_json::Value>,
}

impl MeUser {
    /// What the audit calls the user: the trimmed display name, else the email, at most
    /// [`MAX_LABEL_CHARS`] characters; nothing when the CMS gave neither.
    fn label(&self) -> Option<String> {
        let text = |value: &Option<serde_json::Value>| {
            value
                .as_ref()
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let name = text(&self.display_name).map(|name| name.trim().to_owned());
        let label = name
            .filter(|name| !name.is_empty())
            .or_else(|| text(&self.email).filter(|email| !email.is_empty()))?;
        Some(label.chars().take(MAX_LABEL_CHARS).collect())
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
}

/// Reads the CMS's answer to `GET /admin/api/cms/me`: a 200 must carry a usable user id and the
/// capability list; a 401 is a refusal (`mfa_required` told apart); any other status, and any
/// 200 body that is not the route's, is an error, never a signed-in user.
pub fn parse_me_answer(status: u16, body: &[u8]) -> Result<SessionCheck, CmsError> {
    match status {
        200 => {
            let me: MeBody = serde_json::from_slice(body)
                .map_err(|error| CmsError::BadAnswer(error.to_string()))?;
            let label = me.user.label();
            let id = me.user.id;
            if id.is_empty()
                || id.len() > MAX_USER_ID_LEN
                || !id.bytes().all(|b| b.is_ascii_graphic())
            {
                return Err(CmsError::BadAnswer(
                    "the user id is empty, too long or not printable ASCII".into(),
                ));
            }
            if me.capabilities.len() > MAX_CAPABILITIES
                || me
                    .capabilities
                    .iter()
                    .any(|c| c.is_empty() || c.len() > MAX_CAPABILITY_LEN)
            {
                return Err(CmsError::BadAnswer(
                    "the capability list is too long or holds an empty or over-long name".into(),
                ));
            }
            Ok(SessionCheck::SignedIn(Caller {
                user_id: id,
                capabilities: me.capabilities.into_iter().collect(),
                label,
            }))
        }
        // A 401 is a refusal whatever its body says; only the CMS's MFA marker is told apart.
        401 => match serde_json::from_slice::<ErrorBody>(body) {
            Ok(error) if error.error == "mfa_required" => Ok(SessionCheck::MfaRequired),
            _ => Ok(SessionCheck::Unauthorized),
        },
        other => Err(CmsError::UnexpectedStatus(other)),
    }
}

/// The CMS's answer to a forwarded tool result, relayed to the browser as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// The CMS's status.
    pub status: StatusCode,
    /// The CMS's `Content-Type`, if any.
    pub content_type: Option<HeaderValue>,
    /// The CMS's body.
    pub body: Bytes,
}

impl Relayed {
    /// The answer to send on.
    pub fn into_response(self) -> Response {
        let mut response = Response::new(full_body(self.body));
        *response.status_mut() = self.status;
        if let Some(content_type) = self.content_type {
            response.headers_mut().insert(CONTENT_TYPE, content_type);
        }
        response
    }
}

/// Calls the CMS on loopback.
#[derive(Clone)]
pub struct CmsClient {
    origin: CmsOrigin,
    http: Client<HttpConnector, atelier_http::Body>,
}

impl fmt::Debug for CmsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmsClient")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl CmsClient {
    /// A client of the CMS at `origin`.
    pub fn new(origin: CmsOrigin) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new()).build(connector);
        CmsClient { origin, http }
    }

    /// Where the CMS listens.
    pub fn origin(&self) -> CmsOrigin {
        self.origin
    }

    /// Asks the CMS whose session `cookie` is.
    pub async fn check_session(&self, cookie: &SessionCookie) -> Result<SessionCheck, CmsError> {
        let request = self.get_request(ME_PATH, cookie)?;
        let (status, _, body) = self.exchange(request, MAX_ME_BODY).await?;
        parse_me_answer(status.as_u16(), &body)
    }

    /// `GET path_and_query` carrying the session `cookie` and nothing else.
    fn get_request(
        &self,
        path_and_query: &str,
        cookie: &SessionCookie,
    ) -> Result<hyper::Request<atelier_http::Body>, CmsError> {
        hyper::Request::builder()
            .method(Method::GET)
            .uri(self.origin.uri(path_and_query)?)
            .header(COOKIE, cookie.header().clone())
            .body(atelier_http::empty_body())
            .map_err(|error| CmsError::Unreachable(error.to_string()))
    }

    /// Hands a tool result to the CMS's `POST /admin/api/ai/tool-result` as the browser sent
    /// it (the same session cookie, body and content type, nothing else) and returns its
    /// answer.
    pub async fn forward_tool_result(
        &self,
        cookie: &SessionCookie,
        content_type: Option<HeaderValue>,
        body: Bytes,
    ) -> Result<Relayed, CmsError> {
        let mut request = hyper::Request::builder()
            .method(Method::POST)
            .uri(self.origin.uri(TOOL_RESULT_PATH)?)
            .header(COOKIE, cookie.header().clone());
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let request = request
            .body(full_body(body))
            .map_err(|error| CmsError::Unreachable(error.to_string()))?;
        let (status, content_type, body) = self.exchange(request, MAX_RELAYED_BODY).await?;
        Ok(Relayed {
            status,
            content_type,
            body,
        })
    }

    async fn exchange(
        &self,
        request: hyper::Request<atelier_http::Body>,
        limit: usize,
    ) -> Result<(StatusCode, Option<HeaderValue>, Bytes), CmsError> {
        let call = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|error| CmsError::Unreachable(error_chain(&error)))?;
            let status = response.status();
            let content_type = response.headers().get(CONTENT_TYPE).cloned();
            let body = atelier_http::read_body(response.into_body(), limit)
                .await
                .map_err(|error| match error {
                    atelier_http::BodyError::TooLarge { .. } => CmsError::TooLarge(limit),
                    atelier_http::BodyError::Read(_) => CmsError::BadAnswer(error.to_string()),
                })?;
            Ok::<_, CmsError>((status, content_type, body))
        };
        tokio::time::timeout(CMS_TIMEOUT, call)
            .await
            .map_err(|_| CmsError::TimedOut(CMS_TIMEOUT))?
    }
}

/// An error and its causes on one line ("client error (Connect): connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_loopback_addresses_with_a_port() {
        let cases: [(&str, &str, Result<&str, CmsOriginError>); 12] = [
            ("ipv4", "http://127.0.0.1:3001", Ok("http://127.0.0.1:3001")),
            (
                "trailing slash",
                "http://127.0.0.1:3001/",
                Ok("http://127.0.0.1:3001"),
            ),
            (
                "upper-case scheme",
                "HTTP://127.0.0.2:80",
                Ok("http://127.0.0.2:80"),
            ),
            ("ipv6", "http://[::1]:3001", Ok("http://[::1]:3001")),
            (
                "https",
                "https://127.0.0.1:3001",
                Err(CmsOriginError::NotHttp),
            ),
            ("no scheme", "127.0.0.1:3001", Err(CmsOriginError::NotHttp)),
            (
                "host name",
                "http://localhost:3001",
                Err(CmsOriginError::NotAddressAndPort),
            ),
            (
                "no port",
                "http://127.0.0.1",
                Err(CmsOriginError::NotAddressAndPort),
            ),
            (
                "a path",
                "http://127.0.0.1:3001/admin",
                Err(CmsOriginError::NotAddressAndPort),
            ),
            (
                "user info",
                "http://u@127.0.0.1:3001",
                Err(CmsOriginError::NotAddressAndPort),
            ),
            (
                "not loopback",
                "http://10.0.0.1:3001",
                Err(CmsOriginError::NotLoopback),
            ),
            (
                "port zero",
                "http://127.0.0.1:0",
                Err(CmsOriginError::PortZero),
            ),
        ];
        for (name, input, expected) in cases {
            let parsed = input.parse::<CmsOrigin>().map(|o| o.to_string());
            assert_eq!(parsed, expected.map(str::to_owned), "{name}");
        }
    }

    #[test]
    fn me_answers_become_typed_verdicts_or_errors() {
        let signed_in = |id: &str, caps: &[&str], label: Option<&str>| -> Result<_, ()> {
            Ok(SessionCheck::SignedIn(Caller {
                user_id: id.to_owned(),
                capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
                label: label.map(str::to_owned),
            }))
        };
        let long_id = format!(
            r#"{{"user":{{"id":"{}"}},"capabilities":[]}}"#,
            "a".repeat(129)
        );
        let long_name = format!(
            r#"{{"user":{{"id":"u","displayName":"{}"}},"capabilities":[]}}"#,
            "é".repeat(MAX_LABEL_CHARS + 1)
        );
        let kept_name = "é".repeat(MAX_LABEL_CHARS);
        let cases: Vec<(&str, u16, &str, Result<SessionCheck, ()>)> = vec![
            (
                "the CMS's shape",
                200,
                r#"{"user":{"id":"V1StGXR8_Z5jdHi6B-myT","email":"e@x"},"role":{"slug":"admin"},"capabilities":["ai.chat","site.read"]}"#,
                signed_in(
                    "V1StGXR8_Z5jdHi6B-myT",
                    &["ai.chat", "site.read"],
                    Some("e@x"),
                ),
            ),
            (
                "no capabilities",
                200,
                r#"{"user":{"id":"u"},"capabilities":[]}"#,
                signed_in("u", &[], None),
            ),
            (
                "named: the display name, trimmed",
                200,
                r#"{"user":{"id":"u","displayName":"  Ada ","email":"a@x"},"capabilities":[]}"#,
                signed_in("u", &[], Some("Ada")),
            ),
            (
                "a blank display name: the email",
                200,
                r#"{"user":{"id":"u","displayName":"   ","email":"ada@x"},"capabilities":[]}"#,
                signed_in("u", &[], Some("ada@x")),
            ),
            (
                "neither: unnamed",
                200,
                r#"{"user":{"id":"u","displayName":"","email":""},"capabilities":[]}"#,
                signed_in("u", &[], None),
            ),
            (
                "names that are not strings: unnamed, still signed in",
                200,
                r#"{"user":{"id":"u","displayName":7,"email":null},"capabilities":[]}"#,
                signed_in("u", &[], None),
            ),
            (
                "a long name: its first characters",
                200,
                &long_name,
                signed_in("u", &[], Some(&kept_name)),
            ),
            (
                "unauthorized",
                401,
                r#"{"error":"Unauthorized"}"#,
                Ok(SessionCheck::Unauthorized),
            ),
            (
                "mfa",
                401,
                r#"{"error":"mfa_required"}"#,
                Ok(SessionCheck::MfaRequired),
            ),
            (
                "401 with garbage",
                401,
                "<html>",
                Ok(SessionCheck::Unauthorized),
            ),
            ("200 with garbage", 200, "<html>", Err(())),
            (
                "200 without capabilities",
                200,
                r#"{"user":{"id":"u"}}"#,
                Err(()),
            ),
            (
                "200 with a numeric id",
                200,
                r#"{"user":{"id":7},"capabilities":[]}"#,
                Err(()),
            ),
            (
                "200 with an empty id",
                200,
                r#"{"user":{"id":""},"capabilities":[]}"#,
                Err(()),
            ),
            (
                "200 with a spaced id",
                200,
                r#"{"user":{"id":"a b"},"capabilities":[]}"#,
                Err(()),
            ),
            ("200 with a long id", 200, &long_id, Err(())),
            (
                "200 with an empty capability",
                200,
                r#"{"user":{"id":"u"},"capabilities":[""]}"#,
                Err(()),
            ),
            ("403", 403, r#"{"error":"Forbidden"}"#, Err(())),
            ("500", 500, "", Err(())),
            ("redirect", 302, "", Err(())),
        ];
        for (name, status, body, expected) in cases {
            let got = parse_me_answer(status, body.as_bytes()).map_err(|_| ());
            assert_eq!(got, expected, "{name}");
        }
    }
}
