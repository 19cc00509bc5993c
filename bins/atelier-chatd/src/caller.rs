//! Who the acting user is, once the CMS has said so: the [`Caller`] and the capabilities routes
//! require of them, and the browser's session cookie ([`SessionCookie`]) found the way the CMS
//! finds it. The CMS client and the handlers take these; [`crate::auth`] decides them.

use std::collections::BTreeSet;
use std::fmt;

use hyper::header::{HeaderMap, HeaderValue, COOKIE};
use sha2::{Digest as _, Sha256};

use crate::error::ApiError;

/// The name of the CMS's session cookie.
pub const SESSION_COOKIE: &str = "instatic_admin_session";

/// The longest session cookie value sent on to the CMS. Its own are 43 characters; anything far
/// longer cannot be one of its sessions, and is refused the way the CMS would refuse it.
pub const MAX_SESSION_COOKIE_LEN: usize = 512;

/// A capability a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Chat and manage one's own conversations.
    Chat,
    /// Post browser tool results (the editor's write tools run through them).
    ToolsWrite,
    /// Manage provider credentials and the per-scope defaults.
    ProvidersManage,
    /// Read the usage audit.
    AuditRead,
}

impl Capability {
    /// The capability's name, matched exactly against the CMS's list.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Chat => "ai.chat",
            Capability::ToolsWrite => "ai.tools.write",
            Capability::ProvidersManage => "ai.providers.manage",
            Capability::AuditRead => "ai.audit.read",
        }
    }
}

/// The acting user, as the CMS named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The CMS's user id; every query is scoped to it.
    pub user_id: String,
    /// The user's capabilities, exact strings.
    pub capabilities: BTreeSet<String>,
    /// What the CMS calls the user (display name, else email), when it said.
    pub label: Option<String>,
}

impl Caller {
    /// Returns true if and only if the caller holds `capability`.
    pub fn has(&self, capability: Capability) -> bool {
        self.capabilities.contains(capability.as_str())
    }

    /// `Ok` when the caller holds `capability`, else 403 `Forbidden`.
    pub fn require(&self, capability: Capability) -> Result<(), ApiError> {
        if self.has(capability) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
}

/// What the `Cookie` header says about the session cookie, read the way the CMS reads it:
/// pairs split on `;` and trimmed, the first whose name is exactly [`SESSION_COOKIE`] decides,
/// and its value is everything after the first `=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieLookup<'a> {
    /// The value, as sent (quotes and all).
    Found(&'a [u8]),
    /// The first session pair has no value.
    Empty,
    /// The first session pair's value is over [`MAX_SESSION_COOKIE_LEN`].
    TooLong,
    /// No pair names the session cookie.
    Missing,
}

/// Finds the session cookie in one `Cookie` header value.
pub fn find_session_cookie(header: &[u8]) -> CookieLookup<'_> {
    for part in header.split(|&b| b == b';') {
        let part = part.trim_ascii();
        let (name, value) = match part.iter().position(|&b| b == b'=') {
            Some(eq) => (&part[..eq], &part[eq + 1..]),
            None => (part, &[][..]),
        };
        if name != SESSION_COOKIE.as_bytes() {
            continue;
        }
        return if value.is_empty() {
            CookieLookup::Empty
        } else if value.len() > MAX_SESSION_COOKIE_LEN {
            CookieLookup::TooLong
        } else {
            CookieLookup::Found(value)
        };
    }
    CookieLookup::Missing
}

/// A browser's session cookie, ready to be sent on as `instatic_admin_session=<value>`. Never
/// printed: its `Debug` is redacted, and only its hash is kept past the request.
#[derive(Clone)]
pub struct SessionCookie {
    header: HeaderValue,
    /// The SHA-256 of the value: the identity cache keys its answers by it.
    pub(crate) key: [u8; 32],
}

impl fmt::Debug for SessionCookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionCookie([redacted])")
    }
}

impl SessionCookie {
    /// The session cookie of a request: the first session pair across its `Cookie` headers (a
    /// second header continues the first, as HTTP/2 splits them). Missing, empty or over-long
    /// is 401 `Unauthorized`, as the CMS would answer.
    pub fn from_headers(headers: &HeaderMap) -> Result<SessionCookie, ApiError> {
        for header in headers.get_all(COOKIE) {
            match find_session_cookie(header.as_bytes()) {
                CookieLookup::Found(value) => return SessionCookie::from_value(value),
                CookieLookup::Empty | CookieLookup::TooLong => break,
                CookieLookup::Missing => {}
            }
        }
        Err(ApiError::Unauthorized)
    }

    fn from_value(value: &[u8]) -> Result<SessionCookie, ApiError> {
        let mut pair = Vec::with_capacity(SESSION_COOKIE.len() + 1 + value.len());
        pair.extend_from_slice(SESSION_COOKIE.as_bytes());
        pair.push(b'=');
        pair.extend_from_slice(value);
        let mut header = HeaderValue::from_bytes(&pair).map_err(|_| ApiError::Unauthorized)?;
        header.set_sensitive(true);
        Ok(SessionCookie {
            header,
            key: Sha256::digest(value).into(),
        })
    }

    /// `instatic_admin_session=<value>`, for a `Cookie` header to the CMS.
    pub fn header(&self) -> &HeaderValue {
        &self.header
    }
}
