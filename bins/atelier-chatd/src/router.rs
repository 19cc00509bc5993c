//! Routing under `/admin/api/ai/`: the bearer gate, the Origin check, the session check with the
//! CMS, and the route table in the original's dispatch order. It only matches and dispatches:
//! handlers get what they share from `crate::state` and answer with [`crate::error`]'s
//! [`ApiError`], so no module but the crate root's wiring reaches into the router.

use std::sync::Arc;
use std::time::Instant;

use atelier_http::{Request, Response};
use hyper::header::{
    HeaderName, HeaderValue, CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use hyper::Method;

use crate::auth::{Authenticator, Clock, SystemClock};
use crate::bridge::Bridges;
use crate::chat;
use crate::cms::CmsClient;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::providers::{Credentials, Services};
use crate::settings::Settings;
use crate::state::State;
use crate::store::{Leases, Scope, Store};
use crate::turn::TurnRunner;
use crate::{audit, catalogue, conversations, credentials, defaults};

/// What the CMS sets on every answer under `/admin`, ours included: nothing of it is framed,
/// sniffed, or given a base or plugins, and a cross-origin link is told the origin only.
const ADMIN_HEADERS: [(HeaderName, &str); 4] = [
    (X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (REFERRER_POLICY, "strict-origin-when-cross-origin"),
    (X_FRAME_OPTIONS, "DENY"),
    (
        CONTENT_SECURITY_POLICY,
        "frame-ancestors 'none'; base-uri 'self'; object-src 'none'",
    ),
];

/// What the CMS adds when it is served over HTTPS: browsers keep to HTTPS for two years. Never
/// on an install served over plain HTTP, which it would lock its browsers out of.
const HSTS: &str = "max-age=63072000; includeSubDomains";

/// Whether the editor is served over HTTPS only: every public origin is an `https` one.
fn served_over_https(public_origins: &[String]) -> bool {
    public_origins
        .iter()
        .all(|origin| origin.starts_with("https://"))
}

pub use crate::state::API_PREFIX;

/// Answers every request chatd receives.
#[derive(Clone)]
pub struct Router {
    state: Arc<State>,
}

impl Router {
    /// A router over `store` whose chat turns are run by `runner`, with the settings'
    /// credentials, catalogue and pricing services; fails as [`services`] does.
    pub fn new(
        settings: &Settings,
        store: Arc<Store>,
        runner: Arc<dyn TurnRunner>,
    ) -> Result<Self, reqwest::Error> {
        Ok(Self::with_services(
            settings,
            services(settings, store)?,
            runner,
        ))
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
                https: served_over_https(&settings.public_origins),
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

    /// Answers one request, with the headers the CMS puts on every `/admin` answer.
    pub async fn handle(&self, request: Request) -> Response {
        // A chat turn's first byte is timed from here, the checks and the CMS's answer included.
        let arrived = Instant::now();
        let mut response = match self.dispatch(request, arrived).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        };
        let headers = response.headers_mut();
        for (name, value) in ADMIN_HEADERS {
            headers.insert(name, HeaderValue::from_static(value));
        }
        if self.state.https {
            headers.insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
        }
        response
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
        // As the original: an unknown path, a method a route does not answer and the defaults'
        // unknown scope are said before the session is asked for (404, 405, 400, not 401).
        let segments: Vec<&str> = rest.split('/').collect();
        let (route, params) = Route::find(&segments).ok_or(ApiError::NotFound)?;
        let method = request.method().clone();
        if !route.methods.contains(&method.as_str()) {
            return Err(ApiError::MethodNotAllowed);
        }
        let default_scope = match route.endpoint {
            Endpoint::Default => {
                let scope = params.at(0);
                Some(Scope::parse(scope).ok_or_else(|| ApiError::UnknownScope(scope.to_owned()))?)
            }
            _ => None,
        };
        let (caller, session) = authenticator.identify(request.headers()).await?;
        if let Some(label) = &caller.label {
            // The audit's name for the user; a failure only leaves the id there.
            if let Err(error) = self.state.store.note_user_label(&caller.user_id, label) {
                tracing::warn!(%error, "remembering a user's name failed");
            }
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
                crate::bridge::handle_tool_result(
                    &state.bridges,
                    state.authenticator.cms(),
                    &caller,
                    &session,
                    request,
                )
                .await
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
                let scope = default_scope.ok_or(ApiError::NotFound)?;
                defaults::scoped(state, &caller, &method, scope, request).await
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

/// The services a router builds from its settings when none are given; fails only when the
/// providers' HTTP client cannot be built (no TLS backend).
pub fn services(settings: &Settings, store: Arc<Store>) -> Result<Services, reqwest::Error> {
    let client = atelier_llm::provider_client_builder().build()?;
    let credentials = Credentials::new(
        settings.master_key.clone(),
        settings.provider_urls.clone(),
        settings.provider_idle_timeout,
        client,
    );
    Ok(Services::new(store, credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_editor_served_over_https_alone_is_told_to_keep_to_it() {
        let origins = |list: &[&str]| list.iter().map(|o| (*o).to_owned()).collect::<Vec<_>>();
        assert!(served_over_https(&origins(&["https://cms.example"])));
        assert!(served_over_https(&origins(&[
            "https://cms.example",
            "https://admin.example:8443"
        ])));
        assert!(!served_over_https(&origins(&["http://cms.example"])));
        assert!(!served_over_https(&origins(&[
            "https://cms.example",
            "http://localhost:5173"
        ])));
    }

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
}
