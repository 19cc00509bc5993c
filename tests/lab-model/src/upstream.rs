//! Forwarding to a real model on this machine (`--upstream`): the lab model keeps its TLS name,
//! its CA and its record, and hands chat completions to a plain-HTTP OpenAI-compatible server
//! on loopback (llama.cpp's, from `scripts/local-model serve PORT`), streaming the answer back
//! as it comes. Only loopback IP literals are accepted: a test fixture must never carry an
//! agent's request off the machine, and a name could resolve anywhere.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::openai;
use crate::server::{json, Body};

/// An upstream as `--upstream` names it: `http://` a loopback IP literal and a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upstream {
    addr: SocketAddr,
}

/// Why an `--upstream` URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// Not a URL at all.
    #[error("{url} is not a URL; give one like http://127.0.0.1:8081")]
    NotUrl {
        /// What was given.
        url: String,
    },
    /// A scheme other than `http` (or none).
    #[error(
        "{url} is not http://: the upstream is a plain-HTTP server on this machine, \
         e.g. http://127.0.0.1:8081"
    )]
    NotHttp {
        /// What was given.
        url: String,
    },
    /// User information in the authority.
    #[error("{url} carries credentials; the upstream takes none")]
    Credentials {
        /// What was given.
        url: String,
    },
    /// A path other than `/`, or a query.
    #[error(
        "{url} has a path or a query; give the server's origin only, e.g. http://127.0.0.1:8081"
    )]
    Path {
        /// What was given.
        url: String,
    },
    /// A host that is no IP address.
    #[error(
        "{host} is not an IP address: the upstream must be a loopback address \
         (127.0.0.0/8 or ::1), never a name that could resolve off the machine"
    )]
    NotIp {
        /// The host given.
        host: String,
    },
    /// An IP address off loopback.
    #[error(
        "{ip} is not a loopback address: the lab model forwards only on this machine \
         (127.0.0.0/8 or ::1)"
    )]
    NotLoopback {
        /// The address given.
        ip: IpAddr,
    },
    /// No port, or port 0.
    #[error(
        "{url} names no port; give the one the upstream listens on, e.g. http://127.0.0.1:8081"
    )]
    NoPort {
        /// What was given.
        url: String,
    },
}

impl Upstream {
    /// The address the upstream listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(url: &str) -> Result<Upstream, UpstreamError> {
        let not_url = || UpstreamError::NotUrl {
            url: url.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| not_url())?;
        if uri.scheme_str() != Some("http") {
            return Err(UpstreamError::NotHttp {
                url: url.to_owned(),
            });
        }
        let authority = uri.authority().ok_or_else(not_url)?;
        if authority.as_str().contains('@') {
            return Err(UpstreamError::Credentials {
                url: url.to_owned(),
            });
        }
        if uri.path() != "/" || uri.query().is_some() {
            return Err(UpstreamError::Path {
                url: url.to_owned(),
            });
        }
        let host = authority.host();
        let bare = host
            .strip_prefix('[')
            .and_then(|inner| inner.strip_suffix(']'))
            .unwrap_or(host);
        let ip: IpAddr = bare.parse().map_err(|_| UpstreamError::NotIp {
            host: host.to_owned(),
        })?;
        if !ip.is_loopback() {
            return Err(UpstreamError::NotLoopback { ip });
        }
        let port = match authority.port_u16() {
            Some(port) if port != 0 => port,
            _ => {
                return Err(UpstreamError::NoPort {
                    url: url.to_owned(),
                })
            }
        };
        Ok(Upstream {
            addr: SocketAddr::new(ip, port),
        })
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SocketAddr writes an IPv6 address in brackets, as a URL wants it.
        write!(f, "http://{}", self.addr)
    }
}

/// The client that forwards to one [`Upstream`].
#[derive(Debug)]
pub struct Forwarder {
    upstream: Upstream,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Forwarder {
    /// A forwarder to `upstream`. Must be made inside the Tokio runtime that serves.
    pub fn new(upstream: Upstream) -> Forwarder {
        let mut connector = HttpConnector::new();
        // Server-sent events are small writes; nothing should sit waiting for more.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            // A fresh connection per request: an idle one the upstream closes (uvicorn's
            // keep-alive is short) could take a request down with it, a spurious 502, and on
            // loopback a connection costs nothing.
            .pool_max_idle_per_host(0)
            .build(connector);
        Forwarder { upstream, client }
    }

    /// The upstream forwarded to.
    pub fn upstream(&self) -> Upstream {
        self.upstream
    }

    /// `method path` with `body` sent upstream, its answer streamed back: the status, the
    /// content type and the body as it arrives. Nothing of the client's headers goes along:
    /// the upstream needs none, and its credentials must not leave. A body is sent as
    /// `application/json`. An upstream that cannot be reached, or answers no HTTP, is a 502
    /// with an OpenAI error.
    pub async fn forward(&self, method: Method, path: &str, body: Bytes) -> Response<Body> {
        let has_body = !body.is_empty();
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method.clone();
        let uri = format!("{}{path}", self.upstream);
        *request.uri_mut() = match uri.parse() {
            Ok(uri) => uri,
            Err(error) => return self.bad_gateway(&method, path, &error),
        };
        if has_body {
            request
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let answer = match self.client.request(request).await {
            Ok(answer) => answer,
            Err(error) => return self.bad_gateway(&method, path, &error),
        };
        let (parts, incoming) = answer.into_parts();
        let mut response = Response::new(incoming.boxed());
        *response.status_mut() = parts.status;
        if let Some(content_type) = parts.headers.get(CONTENT_TYPE) {
            response
                .headers_mut()
                .insert(CONTENT_TYPE, content_type.clone());
        }
        response
    }

    fn bad_gateway(
        &self,
        method: &Method,
        path: &str,
        error: &dyn std::error::Error,
    ) -> Response<Body> {
        // The client's message is short; the log says why, with the whole chain.
        let mut reason = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            reason.push_str(": ");
            reason.push_str(&cause.to_string());
            source = cause.source();
        }
        eprintln!(
            "atelier-lab-model: upstream {}: {method} {path}: {reason}",
            self.upstream
        );
        json(
            StatusCode::BAD_GATEWAY,
            &openai::error(
                "upstream_error",
                &format!(
                    "the lab model cannot reach its upstream {}: {reason}",
                    self.upstream
                ),
            ),
        )
    }
}

/// A chat completion whose message contents are arrays of text parts, with each such content
/// joined into one string; `None` when there is nothing to join (or the body is not JSON).
/// OpenAI's API takes both shapes, and agents send the array; llama.cpp's server renders the
/// model's chat template with the content concatenated as a string and fails on an array. Parts
/// other than text (an image) are left as they are, and so is the message.
pub fn flatten_text_parts(body: &[u8]) -> Option<Bytes> {
    let mut request: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut changed = false;
    for message in request.get_mut("messages")?.as_array_mut()? {
        let Some(parts) = message.get("content").and_then(serde_json::Value::as_array) else {
            continue;
        };
        let texts: Option<Vec<&str>> = parts
            .iter()
            .map(|part| {
                (part.get("type")? == "text")
                    .then(|| part.get("text")?.as_str())
                    .flatten()
            })
            .collect();
        if let Some(texts) = texts {
            let joined = texts.concat();
            message["content"] = serde_json::Value::String(joined);
            changed = true;
        }
    }
    changed.then(|| Bytes::from(request.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn text_part_arrays_are_joined_and_nothing_else_changes() {
        use serde_json::json;
        let flat = |body: serde_json::Value| {
            flatten_text_parts(body.to_string().as_bytes())
                .map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap())
        };
        let parts = json!({"model": "m", "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]});
        assert_eq!(
            flat(parts),
            Some(json!({"model": "m", "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "ab"},
            ]}))
        );
        for (name, body) in [
            (
                "strings already",
                json!({"messages": [{"role": "user", "content": "a"}]}),
            ),
            (
                "an image part",
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            ),
            ("no messages", json!({"model": "m"})),
        ] {
            assert_eq!(flat(body), None, "{name}");
        }
        assert_eq!(flatten_text_parts(b"not json"), None);
    }

    #[test]
    fn loopback_http_urls_with_a_port_are_accepted() {
        for (name, url, addr) in [
            ("ipv4", "http://127.0.0.1:8081", "127.0.0.1:8081"),
            ("trailing slash", "http://127.0.0.1:8081/", "127.0.0.1:8081"),
            ("elsewhere in 127/8", "http://127.1.2.3:9", "127.1.2.3:9"),
            ("ipv6", "http://[::1]:8081", "[::1]:8081"),
        ] {
            let upstream: Upstream = url
                .parse()
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            assert_eq!(upstream.addr(), addr.parse().unwrap(), "{name}");
            assert_eq!(
                upstream.to_string(),
                url.trim_end_matches('/'),
                "{name}: shown as given"
            );
        }
    }

    #[test]
    fn anything_else_is_refused_saying_why() {
        let not_http = |url: &str| UpstreamError::NotHttp {
            url: url.to_owned(),
        };
        let not_loopback = |ip: &str| UpstreamError::NotLoopback {
            ip: ip.parse().unwrap(),
        };
        let no_port = |url: &str| UpstreamError::NoPort {
            url: url.to_owned(),
        };
        for (name, url, refusal) in [
            (
                "https",
                "https://127.0.0.1:1",
                not_http("https://127.0.0.1:1"),
            ),
            ("no scheme", "127.0.0.1:8081", not_http("127.0.0.1:8081")),
            (
                "a name",
                "http://example.com:80",
                UpstreamError::NotIp {
                    host: "example.com".to_owned(),
                },
            ),
            (
                "localhost is a name too",
                "http://localhost:8081",
                UpstreamError::NotIp {
                    host: "localhost".to_owned(),
                },
            ),
            (
                "private ipv4",
                "http://10.0.0.1:80",
                not_loopback("10.0.0.1"),
            ),
            ("unspecified", "http://0.0.0.0:80", not_loopback("0.0.0.0")),
            (
                "ipv6 off loopback",
                "http://[fe80::1]:80",
                not_loopback("fe80::1"),
            ),
            ("no port", "http://127.0.0.1", no_port("http://127.0.0.1")),
            (
                "empty port",
                "http://127.0.0.1:",
                no_port("http://127.0.0.1:"),
            ),
            (
                "port zero",
                "http://127.0.0.1:0",
                no_port("http://127.0.0.1:0"),
            ),
            ("ipv6 no port", "http://[::1]", no_port("http://[::1]")),
            (
                "a path",
                "http://127.0.0.1:8081/v1",
                UpstreamError::Path {
                    url: "http://127.0.0.1:8081/v1".to_owned(),
                },
            ),
            (
                "a query",
                "http://127.0.0.1:8081/?a=b",
                UpstreamError::Path {
                    url: "http://127.0.0.1:8081/?a=b".to_owned(),
                },
            ),
            (
                "credentials",
                "http://u:p@127.0.0.1:8081",
                UpstreamError::Credentials {
                    url: "http://u:p@127.0.0.1:8081".to_owned(),
                },
            ),
            (
                "not a URL",
                "http://",
                UpstreamError::NotUrl {
                    url: "http://".to_owned(),
                },
            ),
        ] {
            assert_eq!(url.parse::<Upstream>(), Err(refusal), "{name}");
        }
    }
}
