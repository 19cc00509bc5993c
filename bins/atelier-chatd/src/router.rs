//! Routing under `/admin/api/ai/`: the bearer gate, the Origin check, the session check with the
//! CMS, the route table in the original's dispatch order, and the one mapping from [`ApiError`]
//! to status and body.

use std::sync::Arc;
use std::time::Instant;

use atelier_http::{json_response, Request, Response};
use hyper::header::{HeaderValue, CACHE_CONTROL};
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::auth::{Authenticator, Clock, SystemClock};
use crate::bridge::Bridges;
use crate::chat::{self, TurnRunner};
use crate::cms::{CmsClient, CmsProblem};
use crate::metrics::Metrics;
use crate::providers::{Credentials, Services};
use crate::settings::Settings;
use crate::store::{Leases, Scope, Store, StoreError};
use crate::{audit, catalogue, conversations, credentials, defaults};

/// The prefix every chatd route lives under.
pub const API_PREFIX: &str = "/admin/api/ai/";

/// Every way a request can fail, each with exactly one status and body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// No or a wrong service token, or no session the CMS knows.
    #[error("Unauthorized")]
    Unauthorized,
    /// The session exists but has not passed its second factor (the CMS's own answer).
    #[error("mfa_required")]
    MfaRequired,
    /// The CMS could not be asked, or answered something chatd cannot read.
    #[error("{0}")]
    CmsUnavailable(CmsProblem),
    /// The caller lacks the route's capability.
    #[error("Forbidden")]
    Forbidden,
    /// A state-changing request from an origin that is not allowed.
    #[error("Forbidden: invalid origin")]
    InvalidOrigin,
    /// No route matches.
    #[error("Not found")]
    NotFound,
    /// The route exists but not for this method.
    #[error("Method not allowed")]
    MethodNotAllowed,
    /// The body is not JSON or breaks the route's schema.
    #[error("Invalid request body.")]
    InvalidBody,
    /// The list's `scope` query parameter is missing or unknown.
    #[error("Query parameter `scope` is required (one of: site, content, data, plugin)")]
    ScopeQueryRequired,
    /// The chat body is over its byte limit.
    #[error("Chat request is too large.")]
    ChatTooLarge,
    /// The conversation is missing, deleted or someone else's.
    #[error("Conversation not found")]
    ConversationNotFound,
    /// The image is missing, not a JPEG, or not the caller's.
    #[error("Conversation image not found")]
    ImageNotFound,
    /// The chat URL's scope is not the conversation's.
    #[error("Conversation scope is \"{actual}\", not \"{requested}\".")]
    ScopeMismatch {
        /// The conversation's scope.
        actual: &'static str,
        /// The scope in the URL.
        requested: &'static str,
    },
    /// The conversation's credential was deleted.
    #[error("Conversation has no credential set. Open AI settings to configure a provider.")]
    NoCredential,
    /// Another turn holds the conversation's lease; retry once it finishes.
    #[error("This conversation is already generating a response. Wait for it to finish.")]
    ConversationBusy,
    /// The conversation's credential or model changed while the send was being checked.
    #[error("The conversation model changed while this message was being prepared. Send again.")]
    ModelChanged,
    /// The turn carries an image and the conversation's model cannot see.
    #[error("The selected model does not support image input. Choose a vision-capable model.")]
    ModelWithoutVision,
    /// The turn offers tools and the conversation's model does not call them.
    #[error("The selected model does not support tool calling. Choose an agent-capable model.")]
    ModelWithoutTools,
    /// The bridge or the request is unknown, finished, or someone else's.
    #[error(
        "The AI tool bridge is no longer active. The server may have restarted; send the message again."
    )]
    BridgeGone,
    /// The conversation's credential is not the caller's (or is gone) — the chat route's 404.
    #[error("Credential not found or no longer accessible.")]
    CredentialInaccessible,
    /// The caller has no such credential.
    #[error("Credential not found")]
    CredentialNotFound,
    /// The credential cannot be opened; the message says why (409).
    #[error("{0}")]
    CredentialUnusable(String),
    /// The caller already has a credential with this label for the provider.
    #[error("A credential named \"{0}\" already exists for this provider.")]
    DuplicateCredential(String),
    /// A key must be sealed and chatd has no master key.
    #[error(
        "AI credential encryption is not configured: no CHATD_MASTER_KEY credential was provided."
    )]
    EncryptionNotConfigured,
    /// Creating a credential failed for a reason the log names.
    #[error("Failed to create credential.")]
    CredentialCreateFailed,
    /// An API-key credential's key cannot be cleared.
    #[error("API key cannot be empty for apiKey-mode credentials.")]
    EmptyApiKey,
    /// The body's auth mode is not the one the provider takes.
    #[error("{provider} credentials use {expected} authentication.")]
    WrongAuthMode {
        /// The provider's label.
        provider: &'static str,
        /// The mode it takes.
        expected: &'static str,
    },
    /// A base URL that is not an `http`/`https` URL with a host.
    #[error("Base URL must be an http or https URL with a host.")]
    BadBaseUrl,
    /// A default still points at the credential.
    #[error("This credential is currently set as a default — change the default in /admin/ai/defaults before deleting.")]
    CredentialIsDefault,
    /// The defaults route names an unknown scope.
    #[error("Unknown scope \"{0}\". Must be one of: site, content, data, plugin")]
    UnknownScope(String),
    /// A default names a credential that does not exist.
    #[error("Credential not found. Pick an existing credential.")]
    DefaultCredentialMissing,
    /// The models route names an unknown provider.
    #[error("Unknown provider \"{0}\". Must be one of: anthropic, openai, ollama, openrouter, openai-compatible")]
    UnknownProvider(String),
    /// The audit's `tz` is not an IANA time zone.
    #[error("Unknown time zone \"{0}\". Use an IANA time zone name such as Europe/Bratislava.")]
    BadTimeZone(String),
    /// The audit log's `limit` is not a whole number from 1 to 500.
    #[error("Invalid limit \"{0}\". Use a whole number from 1 to 500.")]
    BadLimit(String),
    /// A user image is refused; 413 when it is too large, else 400.
    #[error("{message}")]
    ImageRefused {
        /// Whether the refusal is about size.
        too_large: bool,
        /// What is wrong.
        message: String,
    },
    /// Anything unexpected; the detail is logged, never sent.
    #[error("Internal server error")]
    Internal(String),
}

impl ApiError {
    /// One error of every kind [`ApiError::reason`] tells apart, each reason once (its
    /// message fields are placeholders); the API document's reason list is held against it.
    pub const ALL: [ApiError; 39] = [
        ApiError::Unauthorized,
        ApiError::MfaRequired,
        ApiError::CmsUnavailable(CmsProblem::SessionUnreachable),
        ApiError::CmsUnavailable(CmsProblem::SessionUnreadable),
        ApiError::CmsUnavailable(CmsProblem::ForwardFailed),
        ApiError::Forbidden,
        ApiError::InvalidOrigin,
        ApiError::NotFound,
        ApiError::MethodNotAllowed,
        ApiError::InvalidBody,
        ApiError::ScopeQueryRequired,
        ApiError::ChatTooLarge,
        ApiError::ConversationNotFound,
        ApiError::ImageNotFound,
        ApiError::ScopeMismatch {
            actual: "site",
            requested: "content",
        },
        ApiError::NoCredential,
        ApiError::ConversationBusy,
        ApiError::ModelChanged,
        ApiError::ModelWithoutVision,
        ApiError::ModelWithoutTools,
        ApiError::BridgeGone,
        ApiError::CredentialInaccessible,
        ApiError::CredentialNotFound,
        ApiError::CredentialUnusable(String::new()),
        ApiError::DuplicateCredential(String::new()),
        ApiError::EncryptionNotConfigured,
        ApiError::CredentialCreateFailed,
        ApiError::EmptyApiKey,
        ApiError::WrongAuthMode {
            provider: "Ollama",
            expected: "baseUrl",
        },
        ApiError::BadBaseUrl,
        ApiError::CredentialIsDefault,
        ApiError::UnknownScope(String::new()),
        ApiError::DefaultCredentialMissing,
        ApiError::UnknownProvider(String::new()),
        ApiError::BadTimeZone(String::new()),
        ApiError::BadLimit(String::new()),
        ApiError::ImageRefused {
            too_large: false,
            message: String::new(),
        },
        ApiError::ImageRefused {
            too_large: true,
            message: String::new(),
        },
        ApiError::Internal(String::new()),
    ];

    /// The stable name of the error's kind, as the API document lists it. It is not sent: the
    /// wire carries only the message, which is the original's.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::MfaRequired => "mfa_required",
            ApiError::CmsUnavailable(CmsProblem::SessionUnreachable) => "cms_session_unreachable",
            ApiError::CmsUnavailable(CmsProblem::SessionUnreadable) => "cms_session_unreadable",
            ApiError::CmsUnavailable(CmsProblem::ForwardFailed) => "cms_forward_failed",
            ApiError::Forbidden => "forbidden",
            ApiError::InvalidOrigin => "invalid_origin",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::InvalidBody => "invalid_body",
            ApiError::ScopeQueryRequired => "scope_query_required",
            ApiError::ChatTooLarge => "chat_too_large",
            ApiError::ConversationNotFound => "conversation_not_found",
            ApiError::ImageNotFound => "image_not_found",
            ApiError::ScopeMismatch { .. } => "scope_mismatch",
            ApiError::NoCredential => "no_credential",
            ApiError::ConversationBusy => "conversation_busy",
            ApiError::ModelChanged => "model_changed",
            ApiError::ModelWithoutVision => "model_without_vision",
            ApiError::ModelWithoutTools => "model_without_tools",
            ApiError::BridgeGone => "bridge_gone",
            ApiError::CredentialInaccessible => "credential_inaccessible",
            ApiError::CredentialNotFound => "credential_not_found",
            ApiError::CredentialUnusable(_) => "credential_unusable",
            ApiError::DuplicateCredential(_) => "duplicate_credential",
            ApiError::EncryptionNotConfigured => "encryption_not_configured",
            ApiError::CredentialCreateFailed => "credential_create_failed",
            ApiError::EmptyApiKey => "empty_api_key",
            ApiError::WrongAuthMode { .. } => "wrong_auth_mode",
            ApiError::BadBaseUrl => "bad_base_url",
            ApiError::CredentialIsDefault => "credential_is_default",
            ApiError::UnknownScope(_) => "unknown_scope",
            ApiError::DefaultCredentialMissing => "default_credential_missing",
            ApiError::UnknownProvider(_) => "unknown_provider",
            ApiError::BadTimeZone(_) => "bad_time_zone",
            ApiError::BadLimit(_) => "bad_limit",
            ApiError::ImageRefused {
                too_large: false, ..
            } => "image_refused",
            ApiError::ImageRefused {
                too_large: true, ..
            } => "image_too_large",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized | ApiError::MfaRequired => StatusCode::UNAUTHORIZED,
            ApiError::CmsUnavailable(_) => StatusCode::BAD_GATEWAY,
            ApiError::Forbidden | ApiError::InvalidOrigin => StatusCode::FORBIDDEN,
            ApiError::NotFound
            | ApiError::ConversationNotFound
            | ApiError::ImageNotFound
            | ApiError::CredentialInaccessible
            | ApiError::CredentialNotFound
            | ApiError::BridgeGone => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::InvalidBody
            | ApiError::ScopeQueryRequired
            | ApiError::ScopeMismatch { .. }
            | ApiError::NoCredential
            | ApiError::EmptyApiKey
            | ApiError::WrongAuthMode { .. }
            | ApiError::BadBaseUrl
            | ApiError::UnknownScope(_)
            | ApiError::DefaultCredentialMissing
            | ApiError::UnknownProvider(_)
            | ApiError::BadTimeZone(_)
            | ApiError::BadLimit(_)
            | ApiError::ImageRefused {
                too_large: false, ..
            } => StatusCode::BAD_REQUEST,
            ApiError::ChatTooLarge
            | ApiError::ImageRefused {
                too_large: true, ..
            } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::ConversationBusy
            | ApiError::ModelChanged
            | ApiError::CredentialUnusable(_)
            | ApiError::DuplicateCredential(_)
            | ApiError::CredentialIsDefault => StatusCode::CONFLICT,
            ApiError::EncryptionNotConfigured | ApiError::CredentialCreateFailed => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::ModelWithoutVision | ApiError::ModelWithoutTools => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The answer: `{"error": <message>}` with the error's status.
    pub fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "request failed");
        }
        json_response(self.status(), &json!({ "error": self.to_string() }))
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::ConversationNotFound => ApiError::ConversationNotFound,
            StoreError::CredentialNotFound => ApiError::CredentialNotFound,
            StoreError::DuplicateLabel => ApiError::DuplicateCredential(String::new()),
            StoreError::CredentialIsDefault => ApiError::CredentialIsDefault,
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// A JSON answer marked `Cache-Control: private, no-store`, as the detail and chat answers are.
pub(crate) fn private_json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    let mut response = json_response(status, value);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    response
}

/// Everything a request handler may use.
pub(crate) struct State {
    pub(crate) store: Arc<Store>,
    pub(crate) leases: Leases,
    pub(crate) bridges: Bridges,
    pub(crate) runner: Arc<dyn TurnRunner>,
    pub(crate) services: Services,
    pub(crate) authenticator: Authenticator,
    pub(crate) metrics: Metrics,
}

/// Answers every request chatd receives.
#[derive(Clone)]
pub struct Router {
    state: Arc<State>,
}

impl Router {
    /// A router over `store` whose chat turns are run by `runner`, with the settings'
    /// credentials, catalogue and pricing services.
    pub fn new(settings: &Settings, store: Arc<Store>, runner: Arc<dyn TurnRunner>) -> Self {
        Self::with_services(settings, services(settings, store), runner)
    }

    /// A router over `services` (shared with a runner that uses them) whose chat turns are run
    /// by `runner`.
    pub fn with_services(
        settings: &Settings,
        services: Services,
        runner: Arc<dyn TurnRunner>,
    ) -> Self {
        Self::with_clock(settings, services, runner, Arc::new(SystemClock))
    }

    /// [`Router::with_services`] counting its turns in `metrics`.
    pub fn with_metrics(
        settings: &Settings,
        services: Services,
        runner: Arc<dyn TurnRunner>,
        metrics: Metrics,
    ) -> Self {
        Self::build(settings, services, runner, Arc::new(SystemClock), metrics)
    }

    /// [`Router::with_services`] whose cache of the CMS's session answers reads `clock` (tests
    /// move one by hand to see answers expire).
    pub fn with_clock(
        settings: &Settings,
        services: Services,
        runner: Arc<dyn TurnRunner>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::build(settings, services, runner, clock, Metrics::unregistered())
    }

    fn build(
        settings: &Settings,
        services: Services,
        runner: Arc<dyn TurnRunner>,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
    ) -> Self {
        Self {
            state: Arc::new(State {
                store: Arc::clone(&services.store),
                services,
                leases: Leases::default(),
                bridges: Bridges::default(),
                runner,
                authenticator: Authenticator::new(
                    settings.service_token.clone(),
                    settings.public_origins.clone(),
                    CmsClient::new(settings.cms_origin),
                    clock,
                ),
                metrics,
            }),
        }
    }

    /// The live browser bridges (for inspection and tests).
    pub fn bridges(&self) -> &Bridges {
        &self.state.bridges
    }

    /// The services behind the settings routes (for inspection and tests).
    pub fn services(&self) -> &Services {
        &self.state.services
    }

    /// The single-writer leases (for inspection and tests).
    pub fn leases(&self) -> &Leases {
        &self.state.leases
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request) -> Response {
        // A chat turn's first byte is timed from here, the checks and the CMS's answer included.
        let arrived = Instant::now();
        match self.dispatch(request, arrived).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        }
    }

    async fn dispatch(&self, request: Request, arrived: Instant) -> Result<Response, ApiError> {
        // The token comes first: without it nothing, not even which paths exist, is answered,
        // and the CMS is never asked about a request that did not come through the web server.
        let authenticator = &self.state.authenticator;
        authenticator.check_service_token(request.headers())?;
        let path = request.uri().path().to_owned();
        let Some(rest) = path.strip_prefix(API_PREFIX) else {
            return Err(ApiError::NotFound);
        };
        // A cross-site write is refused before its cookie is shown to the CMS.
        authenticator.check_origin(request.method(), request.headers())?;
        let (caller, session) = authenticator.identify(request.headers()).await?;
        let segments: Vec<&str> = rest.split('/').collect();
        let (route, params) = Route::find(&segments).ok_or(ApiError::NotFound)?;
        let method = request.method().clone();
        if !route.methods.contains(&method.as_str()) {
            return Err(ApiError::MethodNotAllowed);
        }
        let query = request.uri().query().map(str::to_owned);
        let query = query.as_deref();
        let state = &self.state;
        match route.endpoint {
            Endpoint::Audit => audit::handle(state, &caller, query).await,
            Endpoint::AuditEvents => audit::events(state, &caller, query).await,
            Endpoint::Chat => {
                // `find` only matches a known scope.
                let scope = Scope::parse(params.at(0)).ok_or(ApiError::NotFound)?;
                chat::handle(state, &caller, &session, scope, request, arrived).await
            }
            Endpoint::ToolResult => {
                crate::bridge::handle_tool_result(state, &caller, &session, request).await
            }
            Endpoint::Credentials if method == Method::GET => {
                credentials::list(state, &caller).await
            }
            Endpoint::Credentials => credentials::create(state, &caller, request).await,
            Endpoint::Credential => {
                let id = params.at(0).to_owned();
                if method == Method::PUT {
                    credentials::update(state, &caller, id, request).await
                } else {
                    credentials::delete(state, &caller, id).await
                }
            }
            Endpoint::CredentialTest => {
                credentials::test(state, &caller, params.at(0).to_owned()).await
            }
            Endpoint::Conversations if method == Method::GET => {
                conversations::list(state, &caller, query).await
            }
            Endpoint::Conversations => conversations::create(state, &caller, request).await,
            Endpoint::Conversation => {
                let id = params.at(0).to_owned();
                match method {
                    Method::GET => conversations::detail(state, &caller, id).await,
                    Method::PUT => conversations::update(state, &caller, id, request).await,
                    _ => conversations::delete(state, &caller, id).await,
                }
            }
            Endpoint::ConversationImage => {
                let (conversation, message) = (params.at(0).to_owned(), params.at(1).to_owned());
                conversations::image(state, &caller, conversation, message, params.at(2)).await
            }
            Endpoint::Defaults => defaults::list(state, &caller).await,
            Endpoint::Default => {
                let scope = params.at(0).to_owned();
                defaults::scoped(state, &caller, &method, &scope, request).await
            }
            Endpoint::ProviderModels => {
                catalogue::models(state, &caller, params.at(0), query).await
            }
        }
    }
}

/// Which handler a route runs; each is named by exactly one entry of [`ROUTES`], the only way a
/// request reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Audit,
    AuditEvents,
    Chat,
    ToolResult,
    Credentials,
    Credential,
    CredentialTest,
    Conversations,
    Conversation,
    ConversationImage,
    Defaults,
    Default,
    ProviderModels,
}

/// One entry of the route table.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// The path under [`API_PREFIX`]; `{name}` stands for one path segment.
    pub path: &'static str,
    /// The methods answered; any other is 405.
    pub methods: &'static [&'static str],
    endpoint: Endpoint,
}

/// Every route chatd serves, in the original's dispatch order. Requests are matched against
/// this table alone, so a route is served exactly when it is listed here (and the API document
/// is held against this list).
pub const ROUTES: &[Route] = &[
    route("audit", &["GET"], Endpoint::Audit),
    route("audit/events", &["GET"], Endpoint::AuditEvents),
    route("chat/{scope}", &["POST"], Endpoint::Chat),
    route("tool-result", &["POST"], Endpoint::ToolResult),
    route("credentials", &["GET", "POST"], Endpoint::Credentials),
    route("credentials/{id}", &["PUT", "DELETE"], Endpoint::Credential),
    route("credentials/{id}/test", &["POST"], Endpoint::CredentialTest),
    route("conversations", &["GET", "POST"], Endpoint::Conversations),
    route(
        "conversations/{id}",
        &["GET", "PUT", "DELETE"],
        Endpoint::Conversation,
    ),
    route(
        "conversations/{conversationId}/messages/{messageId}/images/{index}",
        &["GET"],
        Endpoint::ConversationImage,
    ),
    route("defaults", &["GET"], Endpoint::Defaults),
    route("defaults/{scope}", &["PUT", "DELETE"], Endpoint::Default),
    route("providers/{id}/models", &["GET"], Endpoint::ProviderModels),
];

const fn route(path: &'static str, methods: &'static [&'static str], endpoint: Endpoint) -> Route {
    Route {
        path,
        methods,
        endpoint,
    }
}

/// The path segments a route's `{name}` placeholders matched, in order.
struct Params<'a>(Vec<&'a str>);

impl<'a> Params<'a> {
    fn at(&self, index: usize) -> &'a str {
        self.0.get(index).copied().unwrap_or_default()
    }
}

impl Route {
    /// The first route whose template matches `segments` (the path after [`API_PREFIX`], split
    /// on `/`) and whose placeholders hold what the route takes; a path that names no
    /// resource (an empty id, an unknown chat scope, a non-numeric image index) matches none.
    fn find<'a>(segments: &[&'a str]) -> Option<(&'static Route, Params<'a>)> {
        ROUTES.iter().find_map(|route| {
            let params = route.matches(segments)?;
            route.takes(&params).then_some((route, params))
        })
    }

    fn matches<'a>(&self, segments: &[&'a str]) -> Option<Params<'a>> {
        let template: Vec<&str> = self.path.split('/').collect();
        if template.len() != segments.len() {
            return None;
        }
        let mut params = Vec::new();
        for (expected, actual) in template.iter().zip(segments) {
            if expected.starts_with('{') {
                params.push(*actual);
            } else if expected != actual {
                return None;
            }
        }
        Some(Params(params))
    }

    fn takes(&self, params: &Params<'_>) -> bool {
        match self.endpoint {
            Endpoint::Chat => Scope::parse(params.at(0)).is_some(),
            Endpoint::Credential | Endpoint::CredentialTest | Endpoint::Conversation => {
                !params.at(0).is_empty()
            }
            Endpoint::ConversationImage => {
                let index = params.at(2);
                !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
            }
            // The defaults route names an unknown scope itself (400), after the method.
            _ => true,
        }
    }
}

/// The services a router builds from its settings when none are given.
pub fn services(settings: &Settings, store: Arc<Store>) -> Services {
    let credentials = Credentials::new(
        settings.master_key.clone(),
        settings.provider_urls.clone(),
        reqwest::Client::new(),
    );
    Services::new(store, credentials)
}

/// Runs a store call off the async threads: every write waits for an fsync.
pub(crate) async fn blocking<T, F>(store: &Arc<Store>, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
{
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || work(&store))
        .await
        .map_err(|error| ApiError::Internal(format!("store task: {error}")))?
        .map_err(ApiError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(path: &str) -> Option<(Endpoint, Vec<String>)> {
        let segments: Vec<&str> = path.split('/').collect();
        Route::find(&segments).map(|(route, params)| {
            let params = params.0.iter().map(|p| (*p).to_owned()).collect();
            (route.endpoint, params)
        })
    }

    #[test]
    fn paths_find_their_route_and_only_resources_match_placeholders() {
        let cases: [(&str, Option<Endpoint>); 14] = [
            ("audit", Some(Endpoint::Audit)),
            ("audit/events", Some(Endpoint::AuditEvents)),
            ("chat/site", Some(Endpoint::Chat)),
            ("chat/garden", None),
            ("credentials/c-1", Some(Endpoint::Credential)),
            ("credentials/", None),
            ("credentials//test", None),
            (
                "conversations/c-1/messages/m-1/images/12",
                Some(Endpoint::ConversationImage),
            ),
            ("conversations/c-1/messages/m-1/images/1a", None),
            ("conversations/c-1/messages/m-1/images/", None),
            // The defaults route answers an unknown scope itself, after the method.
            ("defaults/garden", Some(Endpoint::Default)),
            ("providers/nobody/models", Some(Endpoint::ProviderModels)),
            ("conversations/c-1/extra", None),
            ("", None),
        ];
        for (path, expected) in cases {
            assert_eq!(endpoint(path).map(|(e, _)| e), expected, "{path:?}");
        }
        assert_eq!(
            endpoint("conversations/c-1/messages/m-1/images/3").map(|(_, p)| p),
            Some(vec!["c-1".to_owned(), "m-1".to_owned(), "3".to_owned()])
        );
    }

    #[test]
    fn every_error_kind_has_one_reason() {
        let reasons: std::collections::HashSet<&str> =
            ApiError::ALL.iter().map(ApiError::reason).collect();
        assert_eq!(reasons.len(), ApiError::ALL.len());
    }
}
