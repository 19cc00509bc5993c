//! Every way a chatd request can fail, and the one exhaustive mapping from each to the status
//! and `{"error": …}` body it is answered with. Handlers and the router return [`ApiError`];
//! the router turns it into the answer with [`ApiError::into_response`].

use atelier_http::{json_response, Response};
use hyper::StatusCode;
use serde_json::json;

use crate::store::StoreError;

/// What the browser is told when the CMS could not settle a request; the log has the details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmsProblem {
    /// The session check could not be made.
    #[error("The CMS could not be reached to check the session. Try again shortly.")]
    SessionUnreachable,
    /// The session check's answer was not the CMS's.
    #[error("The CMS gave an unexpected answer to the session check.")]
    SessionUnreadable,
    /// A tool result for one of the CMS's bridges could not be handed over.
    #[error("The CMS could not be reached to deliver the tool result. Try again shortly.")]
    ForwardFailed,
}

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
    pub const ALL: [ApiError; 38] = [
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_one_reason() {
        let reasons: std::collections::HashSet<&str> =
            ApiError::ALL.iter().map(ApiError::reason).collect();
        assert_eq!(reasons.len(), ApiError::ALL.len());
    }
}
