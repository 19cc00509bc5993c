//! The one mapping from every error sited answers with to its RFC 9457 problem: status, `type`
//! URI, title and machine `reason` (the complete reason list is [`Reason`]).

use atelier_http::{Problem, Response};
use hyper::{Method, StatusCode};

use crate::actor::BodyRefusal;
use crate::builds::BuildError;
use crate::drivers::AdmitError;
use crate::git::GitError;
use crate::publishing::PublishError;
use crate::sessions::SessionError;
use crate::sites::SiteError;
use atelier_site_api::Reason;

/// Problem `type` URIs are the original daemon's, so the engine's error mapping keeps working.
pub const PROBLEM_TYPE_BASE: &str = "https://dedalo.dev/site-builder/problems/";

/// An error as the router answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 400 `validation-error`.
    Validation(String),
    /// 401 `unauthorized`.
    Unauthorized(&'static str),
    /// 404 `not-found`.
    NotFound(String),
    /// 405 `method-not-allowed`, with the allowed methods.
    MethodNotAllowed(String, Vec<Method>),
    /// 413: the body is over the limit.
    TooLarge(String),
    /// A refusal with a machine reason (409, 429 or 503 by reason).
    Refused(Reason, String),
    /// 500 `internal-error`; the detail is logged, never sent.
    Internal(String),
}

impl ApiError {
    /// The problem response.
    pub fn into_response(self) -> Response {
        let plain = |status, slug: &str, title: &str, detail: String| {
            Problem::new(status, format!("{PROBLEM_TYPE_BASE}{slug}"), title).with_detail(detail)
        };
        let problem = match self {
            ApiError::Validation(detail) => plain(
                StatusCode::BAD_REQUEST,
                "validation-error",
                "Validation Error",
                detail,
            ),
            ApiError::Unauthorized(detail) => plain(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Unauthorized",
                detail.to_owned(),
            ),
            ApiError::NotFound(detail) => {
                plain(StatusCode::NOT_FOUND, "not-found", "Not Found", detail)
            }
            ApiError::MethodNotAllowed(detail, mut allowed) => {
                // The contract sorts the Allow header's methods.
                allowed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                plain(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method-not-allowed",
                    "Method Not Allowed",
                    detail,
                )
                .with_allow(&allowed)
            }
            ApiError::TooLarge(detail) => plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "validation-error",
                "Payload Too Large",
                detail,
            ),
            ApiError::Refused(reason, detail) => {
                let (status, slug, title) = class(reason);
                // The detail is prose for the operator: the engine sees only the reason.
                if status.is_server_error() {
                    tracing::warn!(reason = reason.as_str(), "refused: {detail}");
                } else {
                    tracing::info!(reason = reason.as_str(), "refused: {detail}");
                }
                plain(status, &slug, title, detail).with_reason(reason.as_str())
            }
            ApiError::Internal(detail) => {
                tracing::error!("internal error: {detail}");
                plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal-error",
                    "Internal Server Error",
                    "Internal server error".to_owned(),
                )
            }
        };
        problem.into_response()
    }
}

/// A reason's status, `type` suffix and title.
fn class(reason: Reason) -> (StatusCode, String, &'static str) {
    match reason {
        Reason::MaxSites | Reason::MaxConcurrentSessions | Reason::DiskQuota => (
            StatusCode::TOO_MANY_REQUESTS,
            "limit-exceeded".into(),
            "Limit Exceeded",
        ),
        Reason::ConfinementUnavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "confinement-unavailable".into(),
            "Agent Confinement Unavailable",
        ),
        Reason::ConfinementSiteBusy
        | Reason::ConfinementIdentityMissing
        | Reason::ConfinementIdentityQuarantined
        | Reason::ConfinementUnitRefused
        | Reason::ConfinementUnitNonconformant
        | Reason::ConfinementDaemonStopping
        | Reason::ConfinementAgentCliUnsupported
        | Reason::ConfinementAgentCliUnproved => {
            let code = reason.as_str().trim_start_matches("confinement.");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("confinement-{}", code.replace('_', "-")),
                "Agent Run Refused",
            )
        }
        _ => (StatusCode::CONFLICT, "conflict".into(), "Conflict"),
    }
}

impl From<BodyRefusal> for ApiError {
    fn from(refusal: BodyRefusal) -> Self {
        ApiError::Validation(refusal.to_string())
    }
}

impl From<SiteError> for ApiError {
    fn from(error: SiteError) -> Self {
        let detail = error.to_string();
        match error {
            SiteError::BadSlug(_)
            | SiteError::BadName
            | SiteError::BadDomain(_)
            | SiteError::UnknownTemplate(_) => ApiError::Validation(detail),
            SiteError::NotFound(_) => ApiError::NotFound(detail),
            SiteError::SlugExists(_) => ApiError::Refused(Reason::SlugExists, detail),
            SiteError::WorkspaceExists(_) => ApiError::Refused(Reason::WorkspaceExists, detail),
            SiteError::DomainTaken(_) => ApiError::Refused(Reason::DomainTaken, detail),
            SiteError::Webspace(_) => ApiError::Refused(Reason::WebspaceUnavailable, detail),
            SiteError::Busy(busy) => ApiError::Refused(busy.0.busy_reason(), detail),
            SiteError::MaxSites(_) => ApiError::Refused(Reason::MaxSites, detail),
            SiteError::DiskQuota { .. } => ApiError::Refused(Reason::DiskQuota, detail),
            SiteError::Git(GitError::Refused(refusal)) => {
                ApiError::Refused(refusal.reason(), detail)
            }
            SiteError::Manifest(_)
            | SiteError::Fs(_)
            | SiteError::Template(_)
            | SiteError::Git(_)
            | SiteError::Task(_) => ApiError::Internal(detail),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        let detail = error.to_string();
        match error {
            SessionError::Validation(_) => ApiError::Validation(detail),
            SessionError::UnknownSession(_) => ApiError::NotFound(detail),
            SessionError::Site(site) => ApiError::from(site),
            SessionError::Busy(busy) => ApiError::Refused(busy.0.busy_reason(), detail),
            SessionError::MaxConcurrent(_) => {
                ApiError::Refused(Reason::MaxConcurrentSessions, detail)
            }
            SessionError::NoDriverRecord(_) => {
                ApiError::Refused(Reason::ConfinementUnavailable, detail)
            }
            SessionError::Driver(AdmitError::Unsupported { .. }) => {
                ApiError::Refused(Reason::ConfinementAgentCliUnsupported, detail)
            }
            SessionError::Driver(AdmitError::Unproved { .. }) => {
                ApiError::Refused(Reason::ConfinementAgentCliUnproved, detail)
            }
            SessionError::Driver(AdmitError::Run(refusal)) | SessionError::Run(refusal) => {
                ApiError::Refused(refusal.reason(), detail)
            }
            SessionError::NotRunning => ApiError::Refused(Reason::NotRunning, detail),
            SessionError::AlreadyRunning(_) => ApiError::Refused(Reason::SessionRunning, detail),
            SessionError::Log(_) | SessionError::Task(_) => ApiError::Internal(detail),
        }
    }
}

impl From<BuildError> for ApiError {
    fn from(error: BuildError) -> Self {
        let detail = error.to_string();
        match error {
            BuildError::Site(site) => ApiError::from(site),
            BuildError::Busy(busy) => ApiError::Refused(busy.0.busy_reason(), detail),
            BuildError::UnknownBuild { .. } => ApiError::NotFound(detail),
            BuildError::Run(refusal) => ApiError::Refused(refusal.reason(), detail),
            BuildError::Unreadable { .. } | BuildError::Corrupt(_) => ApiError::Internal(detail),
        }
    }
}

impl From<PublishError> for ApiError {
    fn from(error: PublishError) -> Self {
        let detail = error.to_string();
        match error {
            PublishError::Site(site) => ApiError::from(site),
            PublishError::Validation(_) => ApiError::Validation(detail),
            PublishError::NoBuild(_) => ApiError::Refused(Reason::NoBuild, detail),
            PublishError::UnknownRelease { .. } => ApiError::NotFound(detail),
            PublishError::Release(_) => ApiError::Internal(detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_distinct_and_classed_as_the_contract_says() {
        let mut seen = std::collections::BTreeSet::new();
        for reason in Reason::ALL {
            assert!(seen.insert(reason.as_str()), "{reason:?}");
            let (status, slug, _) = class(reason);
            let want = match reason.as_str() {
                "max_sites" | "max_concurrent_sessions" | "disk_quota" => 429,
                r if r.starts_with("confinement") => 503,
                _ => 409,
            };
            assert_eq!(status.as_u16(), want, "{reason:?}");
            if reason == Reason::ConfinementSiteBusy {
                assert_eq!(slug, "confinement-site-busy");
            }
        }
    }
}
