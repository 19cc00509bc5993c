//! Routing under `/admin/api/ai/`: the bearer gate, the Origin check, the route table in the
//! original's dispatch order, and the one mapping from [`ApiError`] to status and body.

use std::sync::Arc;

use atelier_http::{json_response, Request, Response};
use hyper::header::{HeaderValue, CACHE_CONTROL};
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::auth::Authenticator;
use crate::bridge::Bridges;
use crate::chat::{self, TurnRunner};
use crate::conversations;
use crate::settings::Settings;
use crate::store::{Leases, Scope, Store, StoreError};

/// The prefix every chatd route lives under.
pub const API_PREFIX: &str = "/admin/api/ai/";

/// Every way a request can fail, each with exactly one status and body (§1.1–1.4).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// No or a wrong service token, or no acting user.
    #[error("Unauthorized")]
    Unauthorized,
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
    /// Anything unexpected; the detail is logged, never sent.
    #[error("Internal server error")]
    Internal(String),
}

impl ApiError {
    /// The status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden | ApiError::InvalidOrigin => StatusCode::FORBIDDEN,
            ApiError::NotFound
            | ApiError::ConversationNotFound
            | ApiError::ImageNotFound
            | ApiError::BridgeGone => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::InvalidBody
            | ApiError::ScopeQueryRequired
            | ApiError::ScopeMismatch { .. }
            | ApiError::NoCredential => StatusCode::BAD_REQUEST,
            ApiError::ChatTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::ConversationBusy | ApiError::ModelChanged => StatusCode::CONFLICT,
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
    authenticator: Authenticator,
}

/// Answers every request chatd receives.
#[derive(Clone)]
pub struct Router {
    state: Arc<State>,
}

impl Router {
    /// A router over `store` whose chat turns are run by `runner`.
    pub fn new(settings: &Settings, store: Arc<Store>, runner: Arc<dyn TurnRunner>) -> Self {
        Self {
            state: Arc::new(State {
                store,
                leases: Leases::default(),
                bridges: Bridges::default(),
                runner,
                authenticator: Authenticator::new(
                    settings.service_token.clone(),
                    settings.public_origins.clone(),
                ),
            }),
        }
    }

    /// The live browser bridges (for inspection and tests).
    pub fn bridges(&self) -> &Bridges {
        &self.state.bridges
    }

    /// The single-writer leases (for inspection and tests).
    pub fn leases(&self) -> &Leases {
        &self.state.leases
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request) -> Response {
        match self.dispatch(request).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        }
    }

    async fn dispatch(&self, request: Request) -> Result<Response, ApiError> {
        // The token comes first: without it nothing, not even which paths exist, is answered.
        let caller = self.state.authenticator.caller(request.headers())?;
        let path = request.uri().path().to_owned();
        let Some(rest) = path.strip_prefix(API_PREFIX) else {
            return Err(ApiError::NotFound);
        };
        self.state
            .authenticator
            .check_origin(request.method(), request.headers())?;
        let segments: Vec<&str> = rest.split('/').collect();
        let method = request.method().clone();
        let state = &self.state;
        match segments.as_slice() {
            ["chat", scope] => {
                let scope = Scope::parse(scope).ok_or(ApiError::NotFound)?;
                only(&method, Method::POST)?;
                chat::handle(state, &caller, scope, request).await
            }
            ["tool-result"] => {
                only(&method, Method::POST)?;
                crate::bridge::handle_tool_result(state, &caller, request).await
            }
            ["conversations"] => match method {
                Method::GET => conversations::list(state, &caller, request.uri().query()).await,
                Method::POST => conversations::create(state, &caller, request).await,
                _ => Err(ApiError::MethodNotAllowed),
            },
            ["conversations", id] if !id.is_empty() => {
                let id = (*id).to_owned();
                match method {
                    Method::GET => conversations::detail(state, &caller, id).await,
                    Method::PUT => conversations::update(state, &caller, id, request).await,
                    Method::DELETE => conversations::delete(state, &caller, id).await,
                    _ => Err(ApiError::MethodNotAllowed),
                }
            }
            ["conversations", conversation, "messages", message, "images", index]
                if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) =>
            {
                only(&method, Method::GET)?;
                let (conversation, message) = ((*conversation).to_owned(), (*message).to_owned());
                conversations::image(state, &caller, conversation, message, index).await
            }
            _ => Err(ApiError::NotFound),
        }
    }
}

fn only(method: &Method, allowed: Method) -> Result<(), ApiError> {
    if *method == allowed {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed)
    }
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
