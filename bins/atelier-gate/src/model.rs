//! The model relay on the turn door: plain HTTP beside the MCP relay on its socket, under
//! `/model/<api>/…`, relayed to the route's declared base URL with the provider's key added. A
//! confined coding agent can read its own environment and files, so it is given the relay's
//! URL (`/model/<api>` followed by the base URL's path) and a placeholder key; the real key
//! lives in the gate alone. The key goes only to the model API's own endpoints below the base
//! path, never to whatever else its host serves (batches, files, a gateway's key minting or
//! another account's route on a gateway that tells accounts apart by path).
//!
//! Per request, in order, all decided by [`route_target`]: an API with a route in the plan
//! (else 404 `not_found`); a path below the route's base path that cannot leave it (else 400
//! `bad_path`); GET or POST (else 405 `method_not_allowed`); and, below the base path, one of
//! the API's [`endpoints`] for that method (else 404 `endpoint_not_relayed`). Then request
//! headers by allowlist ([`REQUEST_HEADERS`], and the betas [`kept_betas`] keeps), then the
//! key header ([`key_header`]) of the API the target was mapped to, from the gate's
//! credential, so the agent's own `authorization` or `x-api-key` never goes upstream; the
//! body, for POST only, bounded at [`MAX_REQUEST_BODY`] (else 413) and read within 60 s, then
//! vetted ([`body::inspect`]): one JSON object (else 400 `body_not_json`) asking the provider
//! to run no tool of its own and to connect to nothing (else 403 `provider_tool`), naming no
//! URL for it to fetch (else 403 `provider_fetch`), listing no models for a gateway to fall
//! back to and, when the route pins a model, naming that one (else 403 `model_not_declared`),
//! since the provider would reach those hosts around
//! the gate. The whole body is held for that (a stream could not be vetted before its first
//! byte went upstream). The upstream's host is dialled only when every address it resolves to
//! is public ([`PublicOnly`]); otherwise a 502, like an upstream that cannot be
//! reached. Upstream redirects are never followed: any 3xx is a 502. The status and the body
//! pass through as they arrive (SSE streams are not buffered), with response headers by
//! allowlist ([`RESPONSE_HEADERS`], [`RESPONSE_HEADER_PREFIXES`]). At most [`MAX_BODIES_HELD`]
//! bodies are held at once. Every outcome is a decision of the turn door (host [`MODEL_HOST`],
//! no port, the reason `<method> /model/<api> <status or refusal>`), recorded in the door's
//! [`DecisionLog`] before the agent gets its answer. The reason never holds the rest of the
//! path or the query, which may carry anything; a path naming no API the relay knows reads
//! `/model`, and a method other than GET or POST reads `OTHER`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use atelier_http::{Request, Response};
use atelier_layout::services::{split_origin, MODEL_RELAY_PATH};
use atelier_proto::egress::{Verdict, MODEL_HOST};
use atelier_sd::credentials::Secret;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION};
use hyper::{Method, StatusCode};

use crate::address::{AnswersRefused, Policy};
use crate::metrics::{Metrics, ModelOutcome};
use crate::relay::{self, Bodies, BodyRefusal};
use crate::serve::DecisionLog;

pub use atelier_layout::files::{ModelApi, ModelRoute};

pub mod body;

use body::BodyFinding;

/// The methods relayed, in the order a 405's `Allow` names them.
const METHODS: [Method; 2] = [Method::GET, Method::POST];

/// The largest request body relayed: a long conversation with its tool results and images.
pub const MAX_REQUEST_BODY: usize = 32 * 1024 * 1024; // 32 MiB

/// Request headers passed upstream as they are; every other one is dropped, the agent's
/// placeholder `authorization` and `x-api-key` among them, but `anthropic-beta`, passed without
/// the betas of server-side features ([`kept_betas`]).
pub const REQUEST_HEADERS: [&str; 4] =
    ["content-type", "accept", "anthropic-version", "user-agent"];

/// The beta header, whose values switch on features of the provider's.
const BETA_HEADER: &str = "anthropic-beta";

/// Prefixes of the betas dropped from [`BETA_HEADER`]: those of the provider's own tools and
/// of its stores (the MCP connector, code execution, web fetch and search, skills, the files
/// API, through which a request could read the operator's uploaded files). The body vetting
/// refuses what they would enable; dropping them keeps a feature that needs no body field shut
/// as well.
pub const DROPPED_BETA_PREFIXES: [&str; 6] = [
    "mcp-client-",
    "code-execution-",
    "web-fetch-",
    "web-search-",
    "skills-",
    "files-api-",
];

/// Response headers passed back to the agent, besides those starting with one of
/// [`RESPONSE_HEADER_PREFIXES`]; every other one is dropped.
pub const RESPONSE_HEADERS: [&str; 5] = [
    "content-type",
    "cache-control",
    "request-id",
    "x-request-id",
    "retry-after",
];

/// The prefixes of the rate-limit headers passed back, by which the agent paces itself.
pub const RESPONSE_HEADER_PREFIXES: [&str; 2] = ["anthropic-ratelimit-", "x-ratelimit-"];

/// How many request bodies are held at once (each up to [`MAX_REQUEST_BODY`], from its first
/// byte until it was sent upstream): a run opening many large POSTs and stalling them waits
/// for its own earlier ones instead of growing the gate past its memory cap. Two of 32 MiB
/// and the MCP relay's eight of 4 MiB ([`crate::mcp::MAX_BODIES_HELD`]) are 96 MiB, well
/// within the gate's `MemoryMax=256M`.
pub const MAX_BODIES_HELD: usize = 2;

/// How long a POST body may take to arrive in full.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Percent-encodings a path segment may not hold: each decodes to `.`, `/` or `\`, which an
/// upstream (or a URL parser on the way) could read as a step out of the base path.
const ENCODED_SEPARATORS: [&str; 3] = ["%2e", "%2f", "%5c"];

/// Why the relay answers something other than the upstream's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ModelRefusal {
    /// The path names no API, or one with no route in the plan (404).
    #[error("only /model/<api>/… of an API with a route is relayed")]
    NotFound,
    /// The path below the API is not below the route's base path, is nothing more than it, or
    /// could step out of it: a `.` or `..` segment, an empty one, a backslash, a
    /// percent-encoded `.`, `/` or `\`, or a byte that is not visible ASCII (400).
    #[error("the path is not below the model API's base path, or could leave it")]
    BadPath,
    /// The method is not GET or POST (405).
    #[error("only GET and POST are relayed")]
    MethodNotAllowed,
    /// The path below the base path, with the method, is none of the API's [`endpoints`]: a
    /// batch or file API, a gateway's own endpoints (404).
    #[error("only the model API's own endpoints are relayed")]
    EndpointNotRelayed,
    /// The POST body exceeds [`MAX_REQUEST_BODY`] (413).
    #[error("the request body is too large")]
    BodyTooLarge,
    /// The POST body could not be read from the agent, or did not arrive in full within 60 s
    /// (400).
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// The POST body is not one JSON object, or not one the relay can vet (400); see
    /// [`body::inspect`].
    #[error("the request body is not a JSON object the relay can vet")]
    BodyNotJson,
    /// The POST body asks the provider to run a tool of its own (web search, web fetch, code
    /// execution) or to connect to something (an MCP server, a container, a gateway's search
    /// or plugins), or carries members a gateway passes on unread (403).
    #[error("the request asks the model provider to run a tool of its own, which the gate does not allow")]
    ProviderTool,
    /// The POST body names a URL the provider would fetch: an image or document by URL (403).
    #[error("the request asks the model provider to fetch a URL, which the gate does not allow")]
    ProviderFetch,
    /// The POST body names a model other than the one the route pins, or lists models for a
    /// gateway to fall back to (403).
    #[error("the request names a model other than the one declared for this API, or lists models to fall back to")]
    ModelNotDeclared,
    /// The upstream answered with a redirect, which is never followed (502).
    #[error("the model provider answered with a redirect, which is not followed")]
    UpstreamRedirect,
    /// The upstream could not be reached or failed before answering (502).
    #[error("the model provider could not be reached")]
    UpstreamUnreachable,
}

impl ModelRefusal {
    /// Every refusal.
    pub const ALL: [ModelRefusal; 12] = [
        ModelRefusal::NotFound,
        ModelRefusal::BadPath,
        ModelRefusal::MethodNotAllowed,
        ModelRefusal::EndpointNotRelayed,
        ModelRefusal::BodyTooLarge,
        ModelRefusal::BodyUnreadable,
        ModelRefusal::BodyNotJson,
        ModelRefusal::ProviderTool,
        ModelRefusal::ProviderFetch,
        ModelRefusal::ModelNotDeclared,
        ModelRefusal::UpstreamRedirect,
        ModelRefusal::UpstreamUnreachable,
    ];

    /// The stable snake_case name used in logs and in the problem's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelRefusal::NotFound => "not_found",
            ModelRefusal::BadPath => "bad_path",
            ModelRefusal::MethodNotAllowed => "method_not_allowed",
            ModelRefusal::EndpointNotRelayed => "endpoint_not_relayed",
            ModelRefusal::BodyTooLarge => "body_too_large",
            ModelRefusal::BodyUnreadable => "body_unreadable",
            ModelRefusal::BodyNotJson => "body_not_json",
            ModelRefusal::ProviderTool => "provider_tool",
            ModelRefusal::ProviderFetch => "provider_fetch",
            ModelRefusal::ModelNotDeclared => "model_not_declared",
            ModelRefusal::UpstreamRedirect => "upstream_redirect",
            ModelRefusal::UpstreamUnreachable => "upstream_unreachable",
        }
    }

    /// The HTTP status the agent gets.
    pub fn status(self) -> StatusCode {
        match self {
            ModelRefusal::NotFound | ModelRefusal::EndpointNotRelayed => StatusCode::NOT_FOUND,
            ModelRefusal::BadPath | ModelRefusal::BodyUnreadable | ModelRefusal::BodyNotJson => {
                StatusCode::BAD_REQUEST
            }
            ModelRefusal::ProviderTool
            | ModelRefusal::ProviderFetch
            | ModelRefusal::ModelNotDeclared => StatusCode::FORBIDDEN,
            ModelRefusal::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ModelRefusal::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ModelRefusal::UpstreamRedirect | ModelRefusal::UpstreamUnreachable => {
                StatusCode::BAD_GATEWAY
            }
        }
    }
}

/// Why the relay cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A route's credential holds bytes no header may carry (a newline inside, say). The value
    /// is never part of the message.
    #[error("the {} model key is not a valid header value", .0.as_str())]
    BadKey(ModelApi),
    /// Two routes for one API (the plan check refuses those first).
    #[error("more than one model route for {}", .0.as_str())]
    RouteRepeated(ModelApi),
    /// The HTTP client could not be built.
    #[error("building the model relay's HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// The header name and value carrying `key` upstream for `api`, the value marked sensitive:
/// `x-api-key: <key>` for Anthropic, `authorization: Bearer <key>` for OpenAI.
pub fn key_header(
    api: ModelApi,
    key: &Secret<String>,
) -> Result<(HeaderName, HeaderValue), ModelError> {
    let (name, value) = match api {
        ModelApi::Anthropic => (
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_str(key.expose()),
        ),
        ModelApi::Openai => (
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", key.expose())),
        ),
    };
    let mut value = value.map_err(|_| ModelError::BadKey(api))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// `value` of the beta header without the betas [`DROPPED_BETA_PREFIXES`] name (compared in
/// any case), the others in their order, `, `-separated; `None` when none is left or the
/// value is not visible ASCII.
pub fn kept_betas(value: &HeaderValue) -> Option<HeaderValue> {
    let kept: Vec<&str> = value
        .to_str()
        .ok()?
        .split(',')
        .map(str::trim)
        .filter(|beta| {
            let beta = beta.to_ascii_lowercase();
            !beta.is_empty()
                && !DROPPED_BETA_PREFIXES
                    .iter()
                    .any(|prefix| beta.starts_with(prefix))
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join(", ")).ok()
}

/// The API the path's first segment below `/model/` names, if the relay knows it: the label
/// of a refused request's decision and count. Whether the plan has a route for it is
/// [`route_target`]'s question, and only the API it maps a target to gets a key.
pub fn named_api(path: &str) -> Option<ModelApi> {
    let below = path.strip_prefix(MODEL_RELAY_PATH)?.strip_prefix('/')?;
    let segment = below.split(['/', '?']).next().unwrap_or(below);
    ModelApi::ALL
        .into_iter()
        .find(|api| api.as_str() == segment)
}

/// The endpoints of `api` the relay serves, each a method and a path below the route's base
/// path, where `*` stands for one non-empty segment (a model id). Anthropic's: messages, token
/// counts, models. An OpenAI-compatible API's: chat completions and models, each with or
/// without `v1/` first (atelier-agent appends `/v1/chat/completions` to a base that does not
/// end in `/v1`).
pub fn endpoints(api: ModelApi) -> &'static [(&'static str, &'static str)] {
    match api {
        ModelApi::Anthropic => &[
            ("POST", "v1/messages"),
            ("POST", "v1/messages/count_tokens"),
            ("GET", "v1/models"),
            ("GET", "v1/models/*"),
        ],
        ModelApi::Openai => &[
            ("POST", "chat/completions"),
            ("POST", "v1/chat/completions"),
            ("GET", "models"),
            ("GET", "v1/models"),
            ("GET", "models/*"),
            ("GET", "v1/models/*"),
        ],
    }
}

/// Returns true if and only if `endpoint` matches `pattern` segment by segment, `*` matching
/// any non-empty segment.
fn endpoint_matches(pattern: &str, endpoint: &str) -> bool {
    let (mut pattern, mut endpoint) = (pattern.split('/'), endpoint.split('/'));
    loop {
        match (pattern.next(), endpoint.next()) {
            (None, None) => return true,
            (Some("*"), Some(segment)) if !segment.is_empty() => {}
            (Some(want), Some(segment)) if want == segment => {}
            _ => return false,
        }
    }
}

/// Maps a request `method` and target `/model/<api>/<rest>[?<query>]` to the route's API and
/// the upstream URL `<origin>/<rest>[?<query>]`, `<origin>` the route's base URL without its
/// path, the query kept as it is. `/<rest>` must be the base URL's path, then `/` and an
/// endpoint: the agent is given `/model/<api>` followed by that path as its base URL.
///
/// In order: [`ModelRefusal::NotFound`] when the target is not below `/model/`, names no API,
/// or one with no route in `routes`; [`ModelRefusal::BadPath`] when `<rest>` is empty or any
/// of its segments is `.`, `..`, empty (but the last: a trailing `/` is kept), or holds a
/// backslash or a percent-encoded `.`, `/` or `\` (either case), when the target holds a byte
/// that is not visible ASCII or a `#`, or when `/<rest>` is not the base path (compared
/// exactly, segment by segment) followed by `/` and a non-empty endpoint;
/// [`ModelRefusal::MethodNotAllowed`] when `method` is not `GET` or `POST`;
/// [`ModelRefusal::EndpointNotRelayed`] when the endpoint with `method` is none of the API's
/// [`endpoints`]. What is accepted cannot leave the route's base path, however the upstream
/// or a URL parser on the way normalises it. No I/O; every input is safe to give it.
pub fn route_target(
    method: &str,
    path_and_query: &str,
    routes: &[ModelRoute],
) -> Result<(ModelApi, String), ModelRefusal> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let below = path
        .strip_prefix(MODEL_RELAY_PATH)
        .and_then(|below| below.strip_prefix('/'))
        .ok_or(ModelRefusal::NotFound)?;
    let (segment, rest) = below.split_once('/').unwrap_or((below, ""));
    let api = ModelApi::ALL
        .into_iter()
        .find(|api| api.as_str() == segment)
        .ok_or(ModelRefusal::NotFound)?;
    let route = routes
        .iter()
        .find(|route| route.api == api)
        .ok_or(ModelRefusal::NotFound)?;
    // Tabs and line breaks among them: a URL parser drops those, which could join `.` and `.`.
    let visible = path_and_query
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'#');
    if !visible || rest.is_empty() {
        return Err(ModelRefusal::BadPath);
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (at, segment) in segments.into_iter().enumerate() {
        let lower = segment.to_ascii_lowercase();
        let steps_out = matches!(segment, "." | "..")
            || (segment.is_empty() && at != last)
            || segment.contains('\\')
            || ENCODED_SEPARATORS
                .iter()
                .any(|encoded| lower.contains(encoded));
        if steps_out {
            return Err(ModelRefusal::BadPath);
        }
    }
    // `/<rest>` below the base path (empty, or `/`-separated segments): `/v1x/…` is not below
    // `/v1`, nor is `/v1` itself.
    let (origin, base_path) = split_origin(&route.upstream);
    let base_path = base_path.trim_end_matches('/');
    let endpoint = match base_path.strip_prefix('/') {
        Some(base) => rest
            .strip_prefix(base)
            .and_then(|endpoint| endpoint.strip_prefix('/')),
        None => Some(rest),
    };
    let endpoint = endpoint
        .filter(|endpoint| !endpoint.is_empty())
        .ok_or(ModelRefusal::BadPath)?;
    if !METHODS.iter().any(|served| served.as_str() == method) {
        return Err(ModelRefusal::MethodNotAllowed);
    }
    let relayed = endpoints(api)
        .iter()
        .any(|&(served, pattern)| served == method && endpoint_matches(pattern, endpoint));
    if !relayed {
        return Err(ModelRefusal::EndpointNotRelayed);
    }
    let mut upstream = format!("{origin}/{rest}");
    if let Some(query) = query {
        upstream.push('?');
        upstream.push_str(query);
    }
    Ok((api, upstream))
}

/// The model relay's resolver: the system's (`getaddrinfo`), under the rule a CONNECT keeps
/// ([`Policy::vet`]): a host is dialled only when every address it resolves to is public, so a
/// loopback or private answer of a declared host (rebound, or mistyped) refuses the host. An
/// address written in the URL itself is not resolved, so the plan refuses one
/// ([`crate::plan`]).
#[derive(Debug, Clone, Copy)]
pub struct PublicOnly {
    /// What counts as public.
    pub policy: Policy,
}

/// Why a model host is not dialled: `<host>: <why>`, the addresses that are not public named
/// with their reasons.
#[derive(Debug, thiserror::Error)]
#[error("{host}: {refused}")]
pub struct NoPublicAddress {
    host: String,
    refused: AnswersRefused,
}

impl PublicOnly {
    /// `answers` when [`Policy::vet`] passes them, in the resolver's order; why not otherwise.
    pub fn vet(
        &self,
        host: &str,
        answers: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, NoPublicAddress> {
        let answers: Vec<SocketAddr> = answers.into_iter().collect();
        match self.policy.vet(answers.iter().map(SocketAddr::ip)) {
            Ok(()) => Ok(answers),
            Err(refused) => Err(NoPublicAddress {
                host: host.to_owned(),
                refused,
            }),
        }
    }
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = *self;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            // Port 0: the connector puts the URL's port in.
            let answers = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let public = this.vet(&host, answers)?;
            let addrs: reqwest::dns::Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
}

/// Everything the relay needs.
pub struct ModelDoor {
    /// The routes, from the plan.
    routes: Vec<ModelRoute>,
    /// Each route's key header, the value marked sensitive; none for a route without a key.
    keys: BTreeMap<ModelApi, (HeaderName, HeaderValue)>,
    client: reqwest::Client,
    /// The decisions of the door the relay serves (the turn door's).
    pub log: Arc<DecisionLog>,
    /// Where each request's outcome is counted.
    metrics: Metrics,
    /// The request bodies held (see [`MAX_BODIES_HELD`]).
    bodies: Bodies,
}

impl ModelDoor {
    /// A relay over `routes`, each with the key its credential holds (when it declares one),
    /// recording its decisions in `log`, the log of the door it serves. The client follows no
    /// redirect, uses no proxy from the environment, and dials a host only when `policy` counts
    /// every address it resolves to as public ([`PublicOnly`]).
    pub fn new(
        routes: Vec<(ModelRoute, Option<Secret<String>>)>,
        log: Arc<DecisionLog>,
        policy: Policy,
    ) -> Result<ModelDoor, ModelError> {
        let mut keys = BTreeMap::new();
        let mut kept = Vec::with_capacity(routes.len());
        for (route, key) in routes {
            if kept.iter().any(|other: &ModelRoute| other.api == route.api) {
                return Err(ModelError::RouteRepeated(route.api));
            }
            if let Some(key) = key {
                keys.insert(route.api, key_header(route.api, &key)?);
            }
            kept.push(route);
        }
        Ok(ModelDoor {
            routes: kept,
            keys,
            client: relay::client_builder()
                .dns_resolver(Arc::new(PublicOnly { policy }))
                .build()
                .map_err(ModelError::Client)?,
            log,
            metrics: Metrics::default(),
            bodies: Bodies::new(MAX_BODIES_HELD, MAX_REQUEST_BODY, BODY_READ_TIMEOUT),
        })
    }

    /// The same relay, counting each request's outcome into `metrics`.
    pub fn with_metrics(self, metrics: Metrics) -> ModelDoor {
        ModelDoor { metrics, ..self }
    }

    /// The routes relayed, in plan order.
    pub fn routes(&self) -> &[ModelRoute] {
        &self.routes
    }

    /// Records a decision about a `method` request for `api`: the method as itself only when
    /// it is GET or POST ([`relay::recorded_method`]).
    fn record(&self, method: &Method, api: Option<ModelApi>, verdict: Verdict, outcome: &str) {
        let path = match api {
            Some(api) => format!("{MODEL_RELAY_PATH}/{}", api.as_str()),
            None => MODEL_RELAY_PATH.to_owned(),
        };
        let method = relay::recorded_method(method, &METHODS);
        self.log.record(
            MODEL_HOST,
            None,
            verdict,
            &format!("{method} {path} {outcome}"),
        );
    }

    /// Records and counts `refusal`; its problem+json answer, with `Allow` on a 405.
    fn refuse(&self, method: &Method, api: Option<ModelApi>, refusal: ModelRefusal) -> Response {
        self.record(method, api, Verdict::Refused, refusal.as_str());
        self.metrics
            .model_request(api, ModelOutcome::Refused(refusal));
        let allow = (refusal == ModelRefusal::MethodNotAllowed).then_some(&METHODS[..]);
        relay::problem(
            refusal.status(),
            refusal.as_str(),
            refusal.to_string(),
            allow,
        )
    }
}

impl std::fmt::Debug for ModelDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.keys.keys().map(|api| api.as_str()).collect();
        f.debug_struct("ModelDoor")
            .field("routes", &self.routes)
            .field("keys_for", &keys)
            .finish()
    }
}

/// Returns true if and only if the upstream's response header `name` is passed back.
fn passes_back(name: &HeaderName) -> bool {
    let name = name.as_str();
    RESPONSE_HEADERS.contains(&name)
        || RESPONSE_HEADER_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// Relays one request; see the module documentation for the order of checks.
pub async fn relay(door: Arc<ModelDoor>, request: Request) -> Response {
    let method = request.method().clone();
    let target = request
        .uri()
        .path_and_query()
        .map_or(request.uri().path(), |target| target.as_str());
    let (api, url) = match route_target(method.as_str(), target, &door.routes) {
        Ok(mapped) => mapped,
        // Labelled by the API its path names, if any; nothing goes upstream.
        Err(refusal) => return door.refuse(&method, named_api(target), refusal),
    };
    let upstream = door.client.request(method.clone(), url);
    let mut upstream = relay::pass_on(upstream, request.headers(), &REQUEST_HEADERS);
    for value in request.headers().get_all(BETA_HEADER) {
        if let Some(kept) = kept_betas(value) {
            upstream = upstream.header(BETA_HEADER, kept);
        }
    }
    // The key of the API the target was mapped to, and of no other.
    if let Some((name, value)) = door.keys.get(&api) {
        upstream = upstream.header(name.clone(), value.clone());
    }
    let api = Some(api);
    // Held until the body went upstream (see [`MAX_BODIES_HELD`]).
    let (body, _holding) = match door.bodies.take(request).await {
        Ok(taken) => taken,
        Err(BodyRefusal::TooLarge) => return door.refuse(&method, api, ModelRefusal::BodyTooLarge),
        Err(BodyRefusal::Unreadable) => {
            return door.refuse(&method, api, ModelRefusal::BodyUnreadable)
        }
    };
    if let Some(body) = body {
        let pinned = door
            .routes
            .iter()
            .find(|route| Some(route.api) == api)
            .and_then(|route| route.model.as_deref());
        if let Err(finding) = body::inspect(&body, pinned) {
            // What was found is the agent's own text, quoted and cut short: the operator sees
            // which tool or URL it was.
            tracing::warn!(%finding, "a model request was refused");
            let refusal = match finding {
                BodyFinding::NotJson => ModelRefusal::BodyNotJson,
                BodyFinding::ProviderTool(_) => ModelRefusal::ProviderTool,
                BodyFinding::ProviderFetch(_) => ModelRefusal::ProviderFetch,
                BodyFinding::OtherModel(_) | BodyFinding::ModelList(_) => {
                    ModelRefusal::ModelNotDeclared
                }
            };
            return door.refuse(&method, api, refusal);
        }
        upstream = upstream.body(body);
    }
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(error) => {
            // Without its URL: the query is the agent's and may carry anything.
            let error = relay::failure(error);
            tracing::warn!(%error, "the model upstream failed");
            return door.refuse(&method, api, ModelRefusal::UpstreamUnreachable);
        }
    };
    if answer.status().is_redirection() {
        // Dropping the answer cancels its body; the Location is not followed, nor shown.
        return door.refuse(&method, api, ModelRefusal::UpstreamRedirect);
    }
    door.record(&method, api, Verdict::Relayed, answer.status().as_str());
    door.metrics.model_request(api, ModelOutcome::Relayed);
    // By the allowlist, in the upstream's order.
    let headers: Vec<(HeaderName, HeaderValue)> = answer
        .headers()
        .iter()
        .filter(|(name, _)| passes_back(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    relay::stream_back(answer, headers)
        .unwrap_or_else(|| door.refuse(&method, api, ModelRefusal::UpstreamUnreachable))
}

#[cfg(test)]
mod tests;
