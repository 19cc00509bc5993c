//! Who is asking: the CMS's reverse proxy proves itself with the service bearer token and names
//! the acting user and their capabilities in headers; chatd trusts those headers only after the
//! token matched. Also the Origin allowlist that stands in for CSRF protection.

use std::collections::BTreeSet;

use hyper::header::{HeaderMap, AUTHORIZATION, ORIGIN};
use hyper::Method;
use subtle::ConstantTimeEq;

use crate::router::ApiError;
use crate::settings::normalize_origin;

/// The header naming the acting user, set by the CMS's proxy.
pub const USER_ID_HEADER: &str = "x-atelier-user-id";

/// The header listing the acting user's capabilities, comma-separated
/// (`ai.chat,ai.tools.write`), set by the CMS's proxy.
pub const USER_CAPABILITIES_HEADER: &str = "x-atelier-user-capabilities";

/// The longest user id accepted; ids are the CMS's, opaque to chatd.
const MAX_USER_ID_LEN: usize = 128;

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
    /// The capability's name, matched exactly against the header's entries.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Chat => "ai.chat",
            Capability::ToolsWrite => "ai.tools.write",
            Capability::ProvidersManage => "ai.providers.manage",
            Capability::AuditRead => "ai.audit.read",
        }
    }
}

/// The acting user, as the proxy named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The CMS's user id; every query is scoped to it.
    pub user_id: String,
    /// The user's capabilities, exact strings.
    pub capabilities: BTreeSet<String>,
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

/// Checks the service token and reads the acting user.
#[derive(Clone)]
pub struct Authenticator {
    service_token: String,
    public_origins: Vec<String>,
}

impl Authenticator {
    /// An authenticator for `service_token` that admits state-changing requests from
    /// `public_origins` (already normalised).
    pub fn new(service_token: String, public_origins: Vec<String>) -> Self {
        Self {
            service_token,
            public_origins,
        }
    }

    /// The caller of a request: the bearer token must match (in constant time) and the user id
    /// header must be present; anything else is 401 `Unauthorized`.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let header = headers
            .get(AUTHORIZATION)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let token = header.strip_prefix(b"Bearer ").unwrap_or_default();
        let expected = self.service_token.as_bytes();
        // Length is not secret (the minimum is public); the bytes are compared in constant time.
        if token.len() != expected.len() || !bool::from(token.ct_eq(expected)) {
            return Err(ApiError::Unauthorized);
        }
        let user_id = headers
            .get(USER_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|id| {
                !id.is_empty()
                    && id.len() <= MAX_USER_ID_LEN
                    && id.chars().all(|c| c.is_ascii_graphic())
            })
            .ok_or(ApiError::Unauthorized)?;
        let capabilities = headers
            .get_all(USER_CAPABILITIES_HEADER)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(Caller {
            user_id: user_id.to_owned(),
            capabilities,
        })
    }

    /// The Origin allowlist for state-changing methods: a request without `Origin` passes (the
    /// proxy's own calls), one whose normalised `Origin` is a public origin passes, anything
    /// else is 403 `Forbidden: invalid origin`.
    pub fn check_origin(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        let state_changing = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
        if !state_changing.contains(method) {
            return Ok(());
        }
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        let normalized = origin.to_str().ok().and_then(normalize_origin);
        match normalized {
            Some(origin) if self.public_origins.contains(&origin) => Ok(()),
            _ => Err(ApiError::InvalidOrigin),
        }
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn authenticator() -> Authenticator {
        Authenticator::new(TOKEN.into(), vec!["https://cms.example".into()])
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_token_and_the_user_are_both_required() {
        let bearer = format!("Bearer {TOKEN}");
        let refused: Vec<(&str, HeaderMap)> = vec![
            ("nothing", headers(&[])),
            ("no user", headers(&[("authorization", &bearer)])),
            (
                "lowercase scheme",
                headers(&[
                    ("authorization", &format!("bearer {TOKEN}")),
                    ("x-atelier-user-id", "u1"),
                ]),
            ),
            (
                "wrong token of the same length",
                headers(&[
                    ("authorization", &format!("Bearer {}", "x".repeat(32))),
                    ("x-atelier-user-id", "u1"),
                ]),
            ),
            (
                "token with a suffix",
                headers(&[
                    ("authorization", &format!("{bearer}x")),
                    ("x-atelier-user-id", "u1"),
                ]),
            ),
            (
                "blank user",
                headers(&[("authorization", &bearer), ("x-atelier-user-id", "  ")]),
            ),
        ];
        for (name, map) in refused {
            assert_eq!(
                authenticator().caller(&map).unwrap_err(),
                ApiError::Unauthorized,
                "{name}"
            );
        }
        let caller = authenticator()
            .caller(&headers(&[
                ("authorization", &bearer),
                ("x-atelier-user-id", "u1"),
                ("x-atelier-user-capabilities", "ai.chat, ,ai.tools.write"),
                ("x-atelier-user-capabilities", "site.read"),
            ]))
            .unwrap();
        assert_eq!(caller.user_id, "u1");
        assert!(caller.has(Capability::Chat) && caller.has(Capability::ToolsWrite));
        assert!(caller.capabilities.contains("site.read"));
        assert_eq!(caller.capabilities.len(), 3);
    }

    #[test]
    fn capabilities_match_exactly() {
        let caller = Caller {
            user_id: "u".into(),
            capabilities: ["AI.CHAT".to_owned(), "ai.chat.x".to_owned()].into(),
        };
        assert_eq!(caller.require(Capability::Chat), Err(ApiError::Forbidden));
    }

    #[test]
    fn origin_is_checked_on_state_changing_methods_only() {
        let auth = authenticator();
        let evil = headers(&[("origin", "https://evil.example")]);
        assert_eq!(auth.check_origin(&Method::GET, &evil), Ok(()));
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(
                auth.check_origin(&method, &evil),
                Err(ApiError::InvalidOrigin)
            );
            assert_eq!(auth.check_origin(&method, &headers(&[])), Ok(()));
            assert_eq!(
                auth.check_origin(&method, &headers(&[("origin", "HTTPS://cms.example:443")])),
                Ok(())
            );
            assert_eq!(
                auth.check_origin(&method, &headers(&[("origin", "null")])),
                Err(ApiError::InvalidOrigin)
            );
        }
    }
}
