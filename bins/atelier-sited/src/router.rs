//! Routing under `BASE_PATH`: the public health check, the bearer gate, then the route table.

use std::sync::Arc;

use atelier_http::{json_response, Problem, Request, Response};
use hyper::{Method, StatusCode};
use subtle::ConstantTimeEq;

use crate::health::{instance_fingerprint, Health};
use crate::settings::Settings;

/// The `service` name in `/health`, kept from the original daemon because the engine checks it.
pub const SERVICE_NAME: &str = "dedalo-site-builder";

/// Problem `type` URIs are the original daemon's, so the engine's error mapping keeps working.
const PROBLEM_TYPE_BASE: &str = "https://dedalo.dev/site-builder/problems/";

/// The authenticated routes: path segments and the methods each accepts.
const ROUTES: &[(&[&str], &[Method])] = &[(&["health"], &[Method::GET])];

/// Answers every request sited receives.
#[derive(Clone)]
pub struct Router {
    inner: Arc<RouterState>,
}

struct RouterState {
    base_path: String,
    service_token: String,
    health: Health,
}

impl Router {
    /// Builds the router for an instance.
    pub fn new(settings: &Settings) -> Self {
        let fingerprint = instance_fingerprint(settings.instance.as_str(), &settings.service_token);
        Self {
            inner: Arc::new(RouterState {
                base_path: settings.base_path.clone(),
                service_token: settings.service_token.clone(),
                health: Health::new(fingerprint, settings.default_driver),
            }),
        }
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request) -> Response {
        let path = self.route_path(request.uri().path());
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        self.dispatch(&request, request.method(), &segments, path)
    }

    fn dispatch(
        &self,
        request: &Request,
        method: &Method,
        segments: &[&str],
        path: &str,
    ) -> Response {
        // The only public request is exactly `GET /health`; everything else, unknown paths and
        // `POST /health` included, meets the same 401 first so a stranger learns nothing.
        if method == Method::GET && segments == ["health"] {
            return json_response(StatusCode::OK, &self.inner.health);
        }
        if let Err(detail) = self.authenticate(request) {
            return problem(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                detail,
            );
        }
        match ROUTES.iter().find(|(route, _)| *route == segments) {
            None => problem(
                StatusCode::NOT_FOUND,
                "not-found",
                "Not Found",
                &format!("Route not found: {path}"),
            ),
            Some((_, methods)) => {
                // The contract sorts the Allow header's methods.
                let mut allowed = methods.to_vec();
                allowed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                Problem::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{PROBLEM_TYPE_BASE}method-not-allowed"),
                    "Method Not Allowed",
                )
                .with_detail(format!("Method {method} not allowed for {path}"))
                .with_allow(&allowed)
                .into_response()
            }
        }
    }

    /// The request path with the mount prefix removed; `''` becomes `/`.
    fn route_path<'a>(&self, path: &'a str) -> &'a str {
        let base = self.inner.base_path.as_str();
        let rest = match path.strip_prefix(base) {
            Some(rest) if base != "/" && (rest.is_empty() || rest.starts_with('/')) => rest,
            _ => path,
        };
        if rest.is_empty() {
            "/"
        } else {
            rest
        }
    }

    /// Checks `Authorization: Bearer <token>` in constant time.
    fn authenticate(&self, request: &Request) -> Result<(), &'static str> {
        let header = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let mut parts = header.splitn(2, |&b| b == b' ');
        let scheme = parts.next().unwrap_or_default();
        // The original split on spaces and ignored text after a second one; keep that.
        let token = parts
            .next()
            .unwrap_or_default()
            .split(|&b| b == b' ')
            .next()
            .unwrap_or_default();
        if scheme != b"Bearer" || token.is_empty() {
            return Err("Missing bearer token");
        }
        let expected = self.inner.service_token.as_bytes();
        if token.len() == expected.len() && bool::from(token.ct_eq(expected)) {
            Ok(())
        } else {
            Err("Invalid bearer token")
        }
    }
}

fn problem(status: StatusCode, slug: &str, title: &str, detail: &str) -> Response {
    Problem::new(status, format!("{PROBLEM_TYPE_BASE}{slug}"), title)
        .with_detail(detail)
        .into_response()
}
