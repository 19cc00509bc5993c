//! RFC 9457 problem details (`application/problem+json`) with a fixed member order.

use hyper::header::{HeaderName, HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{HeaderMap, Method, StatusCode};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::response::full_body;
use crate::{Response, NO_STORE};

const APPLICATION_PROBLEM_JSON: HeaderValue =
    HeaderValue::from_static("application/problem+json; charset=utf-8");

/// Member names written by [`Problem`] itself; extensions by these names are never written.
const RESERVED_MEMBERS: [&str; 5] = ["type", "title", "status", "detail", "reason"];

/// An RFC 9457 problem: an error response whose JSON body is
/// `{"type","title","status","detail"?,"reason"?, ...extensions}` in exactly that order.
///
/// The crate has no opinion on `type` URIs: each surface passes its own.
///
/// ```
/// use atelier_http::Problem;
/// use hyper::{Method, StatusCode};
///
/// let response = Problem::new(StatusCode::METHOD_NOT_ALLOWED, "https://example.test/problems/method-not-allowed", "Method Not Allowed")
///     .with_detail("POST is not allowed here")
///     .with_allow(&[Method::GET, Method::HEAD])
///     .into_response();
/// assert_eq!(response.headers()["allow"], "GET, HEAD");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// The `type` member: a URI naming the problem class.
    pub type_uri: String,
    /// The `title` member: a short summary of the problem class.
    pub title: String,
    /// The HTTP status, also written as the `status` member.
    pub status: StatusCode,
    /// The `detail` member, omitted when `None`: prose about this occurrence.
    pub detail: Option<String>,
    /// The `reason` member, omitted when `None`: a stable machine code for this refusal.
    pub reason: Option<String>,
    /// Extra members written after the standard ones, in the map's iteration order (sorted by
    /// name, or insertion order if serde_json's `preserve_order` is on in the build). Entries
    /// named like a standard member (`type`, `title`, `status`, `detail`, `reason`) are
    /// skipped so the body never holds a duplicate key.
    pub extensions: Map<String, Value>,
    /// Extra response headers (`Allow` on a 405, `Retry-After`, ...). Applied after the
    /// standard `Content-Type` and `Cache-Control`, so a header of the same name replaces them.
    pub headers: HeaderMap,
}

// === impl Problem ===

impl Problem {
    /// A problem with the three required members and nothing else.
    pub fn new(status: StatusCode, type_uri: impl Into<String>, title: impl Into<String>) -> Self {
        Problem {
            type_uri: type_uri.into(),
            title: title.into(),
            status,
            detail: None,
            reason: None,
            extensions: Map::new(),
            headers: HeaderMap::new(),
        }
    }

    /// The surface-neutral 500 used when the crate itself fails to build a response.
    pub(crate) fn internal_error() -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "about:blank",
            "Internal Server Error",
        )
    }

    /// Sets the `detail` member.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Sets the `reason` member.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Adds (or replaces) the extension member `name`. A standard member name is ignored.
    pub fn with_extension(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        let name = name.into();
        if RESERVED_MEMBERS.contains(&name.as_str()) {
            tracing::debug!(%name, "ignoring a problem extension named like a standard member");
        } else {
            self.extensions.insert(name, value.into());
        }
        self
    }

    /// Adds (or replaces) the response header `name`.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Sets `Allow` to `methods` joined by `", "`, as a 405 must.
    pub fn with_allow(self, methods: &[Method]) -> Self {
        let joined = methods
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        match HeaderValue::from_str(&joined) {
            Ok(value) => self.with_header(ALLOW, value),
            // Method names are tokens, always valid header text; nothing to add otherwise.
            Err(_) => self,
        }
    }

    /// The JSON body, byte for byte as [`Problem::into_response`] sends it.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|error| {
            // Unreachable with string keys and `Value`s; keep a valid body regardless.
            tracing::error!(%error, "failed to serialize a problem body");
            br#"{"type":"about:blank","title":"Internal Server Error","status":500}"#.to_vec()
        })
    }

    /// The response: `status`, the JSON body, `Content-Type: application/problem+json;
    /// charset=utf-8`, `Cache-Control: no-store`, then [`Problem::headers`].
    pub fn into_response(self) -> Response {
        let mut response = Response::new(full_body(self.to_json()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, APPLICATION_PROBLEM_JSON);
        headers.insert(CACHE_CONTROL, NO_STORE);
        for (name, value) in &self.headers {
            headers.insert(name, value.clone());
        }
        response
    }
}

impl Serialize for Problem {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", &self.type_uri)?;
        map.serialize_entry("title", &self.title)?;
        map.serialize_entry("status", &self.status.as_u16())?;
        if let Some(detail) = &self.detail {
            map.serialize_entry("detail", detail)?;
        }
        if let Some(reason) = &self.reason {
            map.serialize_entry("reason", reason)?;
        }
        for (name, value) in &self.extensions {
            if !RESERVED_MEMBERS.contains(&name.as_str()) {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

impl From<Problem> for Response {
    fn from(problem: Problem) -> Self {
        problem.into_response()
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::RETRY_AFTER;
    use serde_json::json;

    use super::*;
    use crate::test_support::{collect, get, TestServer};

    const TYPE: &str = "https://example.test/problems/conflict";

    #[test]
    fn members_come_in_the_fixed_order_then_extensions() {
        let problem = Problem::new(StatusCode::CONFLICT, TYPE, "Conflict")
            // Inserted in name order so the test holds whether or not some crate in the
            // build turns on serde_json's `preserve_order`.
            .with_extension("alpha", json!({"k": [true, null]}))
            .with_reason("webspace_unavailable")
            .with_extension("zeta", json!(1))
            .with_detail("the \"site\" table is locked");
        assert_eq!(
            String::from_utf8(problem.to_json()).unwrap(),
            concat!(
                r#"{"type":"https://example.test/problems/conflict","title":"Conflict","#,
                r#""status":409,"detail":"the \"site\" table is locked","#,
                r#""reason":"webspace_unavailable","alpha":{"k":[true,null]},"zeta":1}"#
            )
        );
    }

    #[test]
    fn absent_detail_and_reason_are_omitted() {
        let problem = Problem::new(StatusCode::NOT_FOUND, TYPE, "Not Found");
        assert_eq!(
            String::from_utf8(problem.to_json()).unwrap(),
            r#"{"type":"https://example.test/problems/conflict","title":"Not Found","status":404}"#
        );
    }

    #[test]
    fn extensions_cannot_shadow_standard_members() {
        let mut problem = Problem::new(StatusCode::BAD_REQUEST, TYPE, "Validation Error")
            .with_extension("status", json!(200))
            .with_extension("field", json!("name"));
        // Also when written into the public map directly.
        problem
            .extensions
            .insert("type".into(), json!("about:blank"));
        assert_eq!(
            String::from_utf8(problem.to_json()).unwrap(),
            concat!(
                r#"{"type":"https://example.test/problems/conflict","#,
                r#""title":"Validation Error","status":400,"field":"name"}"#
            )
        );
    }

    #[tokio::test]
    async fn response_over_a_socket_has_problem_headers_and_allow() {
        let server = TestServer::start(|_req| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "https://example.test/problems/method-not-allowed",
                "Method Not Allowed",
            )
            .with_detail("Method DELETE not allowed")
            .with_allow(&[Method::GET, Method::POST])
            .with_header(RETRY_AFTER, HeaderValue::from_static("5"))
            .into_response()
        });
        let response = get(&server.path, "/x").await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        let headers = response.headers();
        assert_eq!(
            headers["content-type"],
            "application/problem+json; charset=utf-8"
        );
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(headers["allow"], "GET, POST");
        assert_eq!(headers["retry-after"], "5");
        assert_eq!(
            collect(response).await,
            concat!(
                r#"{"type":"https://example.test/problems/method-not-allowed","#,
                r#""title":"Method Not Allowed","status":405,"detail":"Method DELETE not allowed"}"#
            )
        );
    }
}
