//! The client's one error type, sited's RFC 9457 problem as the client reads it, and the local
//! refusals that stop a call before anything is sent.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// A problem+json answer from sited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status of the answer.
    pub status: u16,
    /// The problem `type` URI, e.g. `https://dedalo.dev/site-builder/problems/conflict`.
    pub r#type: String,
    /// The problem's title, e.g. `Conflict`.
    pub title: String,
    /// The machine reason, when sited named one.
    pub reason: Option<String>,
    /// Prose for a log; `""` when sited sent none.
    pub detail: String,
}

/// The fields of a problem body the client reads; the rest (extensions) are ignored.
#[derive(Deserialize)]
struct ProblemBody {
    r#type: String,
    title: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    detail: Option<String>,
}

// === impl Problem ===

impl Problem {
    /// Reads an error answer's body as a problem; `None` when it is not one (a proxy's HTML
    /// page, an empty body, JSON without `type` and `title`).
    pub fn parse(status: u16, body: &[u8]) -> Option<Problem> {
        let body: ProblemBody = serde_json::from_slice(body).ok()?;
        Some(Problem {
            status,
            r#type: body.r#type,
            title: body.title,
            reason: body.reason,
            detail: body.detail.unwrap_or_default(),
        })
    }

    /// What a person or a script keys on: the machine reason, else the title.
    pub fn code(&self) -> &str {
        self.reason.as_deref().unwrap_or(&self.title)
    }

    /// The last segment of the problem's `type` URI, e.g. `not-found`: the class of a problem
    /// sited sent without a machine reason.
    pub fn type_name(&self) -> &str {
        self.r#type
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code(), self.status, self.detail)
    }
}

/// Why pairing refused the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// `/health` carried no string `instance_fingerprint`.
    Missing,
    /// The fingerprint is not the one this instance and token make.
    Different,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mismatch::Missing => "its /health carries no instance_fingerprint",
            Mismatch::Different => "its instance_fingerprint differs from this instance's",
        })
    }
}

/// A call the client refuses to make; nothing was sent. Each names its reason first (the
/// engine's own refusal names where it has one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// A slug that breaks `^[a-z][a-z0-9-]{1,39}$`; it would also not be a safe path segment.
    #[error(
        "invalid_slug: {0:?} is not a site slug (2-40 characters: a lowercase letter, then \
         lowercase letters, digits or '-')"
    )]
    Slug(String),
    /// An id (session, build, release) outside `[A-Za-z0-9._-]{1,200}` or holding `..`.
    #[error("invalid_id: {what} {value:?} is not an id (1-200 of A-Z a-z 0-9 . _ -, no '..')")]
    Id {
        /// Which id.
        what: &'static str,
        /// The text given.
        value: String,
    },
    /// A prompt, message, name or domain that is empty or only whitespace.
    #[error("text_required: the {0} must not be empty")]
    TextRequired(&'static str),
    /// A prompt or message over 32 KiB (counted in UTF-16 units, as the engine does).
    #[error("text_too_long: the {what} is {len} UTF-16 units long; the limit is {limit}")]
    TextTooLong {
        /// Which text.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A destructive call without its explicit confirmation.
    #[error("confirmation_required: {0} needs --confirm")]
    ConfirmationRequired(&'static str),
    /// An actor name sited would refuse, or one that cannot travel in a header.
    #[error("invalid_actor: {0}")]
    Actor(String),
    /// An `after` cursor below -1.
    #[error("invalid_cursor: after must be -1 (everything) or a seq, not {0}")]
    Cursor(i64),
    /// An audit `limit` of 0, or past the most sited answers with (it would cut the page
    /// short without a word).
    #[error(
        "invalid_limit: limit must be from 1 to {}",
        atelier_site_api::limits::MAX_AUDIT_LIMIT
    )]
    Limit,
}

impl Invalid {
    /// Refuses an audit `limit` outside 1 to [`MAX_AUDIT_LIMIT`](atelier_site_api::limits).
    pub fn check_audit_limit(limit: Option<u32>) -> Result<(), Invalid> {
        let most = atelier_site_api::limits::MAX_AUDIT_LIMIT;
        match limit.map(usize::try_from) {
            None => Ok(()),
            Some(Ok(n)) if (1..=most).contains(&n) => Ok(()),
            Some(_) => Err(Invalid::Limit),
        }
    }
}

// === impl Invalid ===

impl Invalid {
    /// The machine name the message starts with.
    pub fn reason(&self) -> &'static str {
        match self {
            Invalid::Slug(_) => "invalid_slug",
            Invalid::Id { .. } => "invalid_id",
            Invalid::TextRequired(_) => "text_required",
            Invalid::TextTooLong { .. } => "text_too_long",
            Invalid::ConfirmationRequired(_) => "confirmation_required",
            Invalid::Actor(_) => "invalid_actor",
            Invalid::Cursor(_) => "invalid_cursor",
            Invalid::Limit => "invalid_limit",
        }
    }
}

/// Everything a call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// sited refused with a problem.
    #[error("{0}")]
    Problem(Problem),
    /// The daemon at the socket did not prove it is the paired instance; nothing but the
    /// unauthenticated `GET /health` was sent.
    #[error("instance_mismatch: the daemon at {} is not instance {instance} paired with this token: {why}", .socket.display())]
    InstanceMismatch {
        /// The socket.
        socket: PathBuf,
        /// The instance expected.
        instance: String,
        /// What was wrong.
        why: Mismatch,
    },
    /// No answer: the socket refused or vanished, HTTP failed, or `/health` was not 2xx.
    #[error("unreachable: {}: {why}", .socket.display())]
    Unreachable {
        /// The socket.
        socket: PathBuf,
        /// What failed.
        why: String,
    },
    /// A control call took longer than its deadline.
    #[error("timeout: {} gave no complete answer within {after:?}", .socket.display())]
    Timeout {
        /// The socket.
        socket: PathBuf,
        /// The deadline.
        after: Duration,
    },
    /// An answer the contract does not allow: a non-problem error, a success body that is not
    /// the route's shape, a stream frame that is not a stored event.
    #[error("bad_response: HTTP {status}: {why}")]
    BadResponse {
        /// The HTTP status.
        status: u16,
        /// What was wrong.
        why: String,
    },
    /// The event stream broke off mid-frame or with a transport error.
    #[error("stream_lost: {0}")]
    StreamLost(String),
    /// The call was refused locally; nothing was sent.
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

// === impl Error ===

impl Error {
    /// A stable machine name for the failure: the problem's reason (else title) for sited's
    /// refusals, the client's own name otherwise.
    pub fn code(&self) -> &str {
        match self {
            Error::Problem(problem) => problem.code(),
            Error::InstanceMismatch { .. } => "instance_mismatch",
            Error::Unreachable { .. } => "unreachable",
            Error::Timeout { .. } => "timeout",
            Error::BadResponse { .. } => "bad_response",
            Error::StreamLost(_) => "stream_lost",
            Error::Invalid(invalid) => invalid.reason(),
        }
    }

    /// The problem, when sited refused with one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Problem(problem) => Some(problem),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_body_is_read_with_its_reason_and_without_extensions() {
        let body = br#"{"type":"https://dedalo.dev/site-builder/problems/conflict","title":"Conflict","status":409,"detail":"Site 'alpha' already exists","reason":"slug_exists","extra":1}"#;
        let problem = Problem::parse(409, body).unwrap();
        assert_eq!(
            problem,
            Problem {
                status: 409,
                r#type: "https://dedalo.dev/site-builder/problems/conflict".into(),
                title: "Conflict".into(),
                reason: Some("slug_exists".into()),
                detail: "Site 'alpha' already exists".into(),
            }
        );
        assert_eq!(
            problem.to_string(),
            "slug_exists (409): Site 'alpha' already exists"
        );
    }

    #[test]
    fn a_problem_without_reason_is_keyed_by_its_title() {
        let body = br#"{"type":"https://dedalo.dev/site-builder/problems/not-found","title":"Not Found","status":404,"detail":"No site named 'x'"}"#;
        let problem = Problem::parse(404, body).unwrap();
        assert_eq!(problem.reason, None);
        assert_eq!(problem.to_string(), "Not Found (404): No site named 'x'");
        assert_eq!(problem.type_name(), "not-found");
    }

    #[test]
    fn bodies_that_are_not_problems_are_not_read_as_one() {
        for (name, body) in [
            ("empty", &b""[..]),
            ("html", b"<html>502 Bad Gateway</html>"),
            ("json without title", br#"{"type":"x"}"#),
            ("json array", b"[1]"),
            ("title not a string", br#"{"type":"x","title":5}"#),
        ] {
            assert_eq!(Problem::parse(502, body), None, "{name}");
        }
    }
}
