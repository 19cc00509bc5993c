//! Who is asking. The web server proves a request came through it with the service bearer
//! token; the browser's session cookie (`instatic_admin_session`) is the only user credential,
//! and the CMS alone says whose it is: chatd asks it (see [`crate::cms`]) and keeps the answer
//! for at most [`IDENTITY_TTL`], keyed by a hash of the cookie, never the cookie itself. Also the
//! Origin allowlist that stands in for CSRF protection. What it decides — the [`Caller`] and
//! their [`SessionCookie`] — lives in [`crate::caller`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hyper::header::{HeaderMap, AUTHORIZATION, ORIGIN};
use hyper::Method;
use subtle::ConstantTimeEq;

use crate::caller::{Caller, SessionCookie};
use crate::cms::{CmsClient, SessionCheck};
use crate::error::ApiError;

/// How long the CMS's answer about a session is trusted: a signed-out or demoted user keeps
/// chatd's access at most this long.
pub const IDENTITY_TTL: Duration = Duration::from_secs(30);

/// How many sessions' answers are kept at once; past it the expired go, then the oldest.
const IDENTITY_CACHE_CAPACITY: usize = 4096;

/// Where the identity cache reads the time; tests inject one they move by hand.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Instant;
}

/// The monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (for tests and benches).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Instant>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            now: Mutex::new(Instant::now()),
        }
    }
}

impl ManualClock {
    /// Moves the clock `by` forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The CMS's recent answers, by the SHA-256 of the session cookie.
struct IdentityCache {
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<[u8; 32], (Instant, Caller)>>,
}

impl IdentityCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], (Instant, Caller)>> {
        // Every update is one insert, remove or retain: the map is consistent after a panic.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: &[u8; 32]) -> Option<Caller> {
        let now = self.clock.now();
        let mut entries = self.lock();
        match entries.get(key) {
            Some((expires, caller)) if *expires > now => Some(caller.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn put(&self, key: [u8; 32], caller: Caller) {
        let now = self.clock.now();
        let mut entries = self.lock();
        if entries.len() >= IDENTITY_CACHE_CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= IDENTITY_CACHE_CAPACITY {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (expires, _))| *expires)
                    .map(|(key, _)| *key);
                if let Some(oldest) = oldest {
                    entries.remove(&oldest);
                }
            }
        }
        entries.insert(key, (now + IDENTITY_TTL, caller));
    }
}

/// Checks the service token and asks the CMS who the session's user is.
#[derive(Clone)]
pub struct Authenticator {
    service_token: String,
    public_origins: Vec<String>,
    cms: CmsClient,
    cache: Arc<IdentityCache>,
}

impl Authenticator {
    /// An authenticator for `service_token` that admits state-changing requests from
    /// `public_origins` (already normalised), asks `cms` about sessions and times its cache by
    /// `clock`.
    pub fn new(
        service_token: String,
        public_origins: Vec<String>,
        cms: CmsClient,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            service_token,
            public_origins,
            cms,
            cache: Arc::new(IdentityCache {
                clock,
                entries: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The CMS this authenticator asks.
    pub fn cms(&self) -> &CmsClient {
        &self.cms
    }

    /// The bearer token must match (in constant time): it proves the request came through the
    /// web server. Anything else is 401 `Unauthorized`, before the CMS is asked anything.
    pub fn check_service_token(&self, headers: &HeaderMap) -> Result<(), ApiError> {
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
        Ok(())
    }

    /// The caller of a request and their session cookie: the CMS's answer about the cookie,
    /// from the cache when it is younger than [`IDENTITY_TTL`]. A refusal is the CMS's (401
    /// `Unauthorized` or `mfa_required`) and is not cached; a CMS that cannot be asked or
    /// answers garbage is 502, never a signed-in user.
    pub async fn identify(&self, headers: &HeaderMap) -> Result<(Caller, SessionCookie), ApiError> {
        let cookie = SessionCookie::from_headers(headers)?;
        if let Some(caller) = self.cache.get(&cookie.key) {
            return Ok((caller, cookie));
        }
        match self.cms.check_session(&cookie).await {
            Ok(SessionCheck::SignedIn(caller)) => {
                self.cache.put(cookie.key, caller.clone());
                Ok((caller, cookie))
            }
            Ok(SessionCheck::Unauthorized) => Err(ApiError::Unauthorized),
            Ok(SessionCheck::MfaRequired) => Err(ApiError::MfaRequired),
            Err(error) => {
                tracing::warn!(%error, cms = %self.cms.origin(), "the session check failed");
                Err(ApiError::CmsUnavailable(error.session_problem()))
            }
        }
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

/// Reduces an origin or URL to lower-cased `scheme://host[:port]`, keeping the port only when it
/// is explicit and not the scheme's default; path, query, fragment and user info are dropped.
/// `None` for anything that is not an `http`/`https` URL with a host.
pub fn normalize_origin(value: &str) -> Option<String> {
    let value = value.trim();
    let (scheme, rest) = value.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    // An IPv6 literal keeps its brackets; its colons are not a port separator.
    let (host, port) = match host_port.rfind(':') {
        Some(colon) if !host_port[colon..].contains(']') => {
            (&host_port[..colon], Some(&host_port[colon + 1..]))
        }
        _ => (host_port.as_str(), None),
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':' | '_'));
    if !host_ok {
        return None;
    }
    match port {
        None => Some(format!("{scheme}://{host}")),
        Some("") => Some(format!("{scheme}://{host}")),
        Some(port) if port.len() <= 5 && port.chars().all(|c| c.is_ascii_digit()) => {
            let port = port.trim_start_matches('0');
            if port == default_port {
                Some(format!("{scheme}://{host}"))
            } else {
                port.parse::<u16>().ok()?;
                Some(format!("{scheme}://{host}:{port}"))
            }
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;
    use std::collections::BTreeSet;

    use crate::caller::{find_session_cookie, Capability, CookieLookup, MAX_SESSION_COOKIE_LEN};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn authenticator() -> Authenticator {
        let cms = CmsClient::new("http://127.0.0.1:9".parse().unwrap());
        Authenticator::new(
            TOKEN.into(),
            vec!["https://cms.example".into()],
            cms,
            Arc::new(SystemClock),
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_service_token_must_match_exactly() {
        let bearer = format!("Bearer {TOKEN}");
        let cases: Vec<(&str, HeaderMap, Result<(), ApiError>)> = vec![
            ("the token", headers(&[("authorization", &bearer)]), Ok(())),
            ("nothing", headers(&[]), Err(ApiError::Unauthorized)),
            (
                "lowercase scheme",
                headers(&[("authorization", &format!("bearer {TOKEN}"))]),
                Err(ApiError::Unauthorized),
            ),
            (
                "wrong token of the same length",
                headers(&[("authorization", &format!("Bearer {}", "x".repeat(32)))]),
                Err(ApiError::Unauthorized),
            ),
            (
                "token with a suffix",
                headers(&[("authorization", &format!("{bearer}x"))]),
                Err(ApiError::Unauthorized),
            ),
            (
                "a session cookie is no token",
                headers(&[("cookie", "instatic_admin_session=abc")]),
                Err(ApiError::Unauthorized),
            ),
        ];
        for (name, map, expected) in cases {
            assert_eq!(
                authenticator().check_service_token(&map),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn the_session_cookie_is_found_as_the_cms_finds_it() {
        let long = format!(
            "instatic_admin_session={}",
            "a".repeat(MAX_SESSION_COOKIE_LEN + 1)
        );
        let longest = format!(
            "instatic_admin_session={}",
            "a".repeat(MAX_SESSION_COOKIE_LEN)
        );
        let cases: Vec<(&str, &str, CookieLookup<'_>)> = vec![
            (
                "alone",
                "instatic_admin_session=abc",
                CookieLookup::Found(b"abc"),
            ),
            (
                "several cookies",
                "theme=dark; instatic_admin_session=abc; lang=sk",
                CookieLookup::Found(b"abc"),
            ),
            (
                "no spaces",
                "a=1;instatic_admin_session=abc;b=2",
                CookieLookup::Found(b"abc"),
            ),
            (
                "padded pair",
                "a=1;   instatic_admin_session=abc  ; b=2",
                CookieLookup::Found(b"abc"),
            ),
            (
                "quoted, kept as sent",
                "instatic_admin_session=\"abc\"",
                CookieLookup::Found(b"\"abc\""),
            ),
            (
                "value with =",
                "instatic_admin_session=ab=c=",
                CookieLookup::Found(b"ab=c="),
            ),
            (
                "duplicate: the first wins",
                "instatic_admin_session=one; instatic_admin_session=two",
                CookieLookup::Found(b"one"),
            ),
            (
                "duplicate with the first empty: the first still decides",
                "instatic_admin_session=; instatic_admin_session=two",
                CookieLookup::Empty,
            ),
            ("empty", "instatic_admin_session=", CookieLookup::Empty),
            (
                "no equals sign",
                "instatic_admin_session",
                CookieLookup::Empty,
            ),
            ("missing", "theme=dark; lang=sk", CookieLookup::Missing),
            ("empty header", "", CookieLookup::Missing),
            (
                "name with a suffix",
                "instatic_admin_session2=abc",
                CookieLookup::Missing,
            ),
            (
                "name with a prefix",
                "xinstatic_admin_session=abc",
                CookieLookup::Missing,
            ),
            (
                "space before equals",
                "instatic_admin_session =abc",
                CookieLookup::Missing,
            ),
            (
                "other case",
                "Instatic_Admin_Session=abc",
                CookieLookup::Missing,
            ),
            ("over-long", &long, CookieLookup::TooLong),
        ];
        for (name, header, expected) in cases {
            assert_eq!(find_session_cookie(header.as_bytes()), expected, "{name}");
        }
        let at_limit = find_session_cookie(longest.as_bytes());
        assert!(matches!(at_limit, CookieLookup::Found(v) if v.len() == MAX_SESSION_COOKIE_LEN));
    }

    #[test]
    fn the_first_session_pair_across_cookie_headers_decides() {
        let cases: Vec<(&str, HeaderMap, Option<&str>)> = vec![
            (
                "second header",
                headers(&[("cookie", "a=1"), ("cookie", "instatic_admin_session=abc")]),
                Some("instatic_admin_session=abc"),
            ),
            (
                "first header wins",
                headers(&[
                    ("cookie", "instatic_admin_session=one"),
                    ("cookie", "instatic_admin_session=two"),
                ]),
                Some("instatic_admin_session=one"),
            ),
            (
                "an empty first pair ends the search",
                headers(&[
                    ("cookie", "instatic_admin_session="),
                    ("cookie", "instatic_admin_session=two"),
                ]),
                None,
            ),
            ("no cookie header", headers(&[]), None),
        ];
        for (name, map, expected) in cases {
            let found = SessionCookie::from_headers(&map)
                .map(|c| c.header().to_str().unwrap().to_owned())
                .ok();
            assert_eq!(found.as_deref(), expected, "{name}");
        }
        let cookie = SessionCookie::from_headers(&headers(&[(
            "cookie",
            "instatic_admin_session=secret-value",
        )]))
        .unwrap();
        assert!(!format!("{cookie:?}").contains("secret"));
        assert!(cookie.header().is_sensitive());
    }

    #[test]
    fn cached_answers_expire_and_the_cache_stays_bounded() {
        let clock = Arc::new(ManualClock::default());
        let cache = IdentityCache {
            clock: Arc::clone(&clock) as Arc<dyn Clock>,
            entries: Mutex::new(HashMap::new()),
        };
        let caller = |id: &str| Caller {
            user_id: id.into(),
            capabilities: BTreeSet::new(),
            label: None,
        };
        cache.put([1; 32], caller("a"));
        clock.advance(IDENTITY_TTL - Duration::from_millis(1));
        assert_eq!(cache.get(&[1; 32]), Some(caller("a")));
        clock.advance(Duration::from_millis(1));
        assert_eq!(cache.get(&[1; 32]), None);
        assert!(cache.lock().is_empty(), "an expired answer is dropped");

        for n in 0..=IDENTITY_CACHE_CAPACITY {
            let mut key = [0; 32];
            key[..8].copy_from_slice(&(n as u64).to_le_bytes());
            cache.put(key, caller("b"));
            clock.advance(Duration::from_nanos(1));
        }
        let entries = cache.lock();
        assert_eq!(entries.len(), IDENTITY_CACHE_CAPACITY);
        assert!(!entries.contains_key(&[0; 32]), "the oldest made room");
    }

    #[test]
    fn capabilities_match_exactly() {
        let caller = Caller {
            user_id: "u".into(),
            capabilities: ["AI.CHAT".to_owned(), "ai.chat.x".to_owned()].into(),
            label: None,
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
