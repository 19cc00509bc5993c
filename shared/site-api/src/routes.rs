//! The route table, once: every endpoint of the contract with its method and its path under
//! the base path. sited dispatches from [`route`]; a client builds its request paths with
//! [`Endpoint::path`], so the two ends name the same paths by construction.

/// A request method the contract uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
    /// `DELETE`.
    Delete,
}

impl Verb {
    /// The method's name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Delete => "DELETE",
        }
    }
}

/// Every endpoint of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `GET /health`, the only unauthenticated request: liveness and the pairing proof.
    Health,
    /// `GET /v1/capabilities`.
    Capabilities,
    /// `GET /v1/sites`.
    ListSites,
    /// `POST /v1/sites`.
    CreateSite,
    /// `GET /v1/sites/:slug`.
    GetSite,
    /// `DELETE /v1/sites/:slug[?purge_prod=true]`.
    DeleteSite,
    /// `GET /v1/sites/:slug/sessions`.
    ListSessions,
    /// `POST /v1/sites/:slug/sessions`.
    StartSession,
    /// `GET /v1/sessions/:id/events[?after=N]`, an event stream.
    Events,
    /// `POST /v1/sessions/:id/messages`.
    SendMessage,
    /// `POST /v1/sessions/:id/stop`.
    StopSession,
    /// `POST /v1/sites/:slug/build`.
    StartBuild,
    /// `GET /v1/sites/:slug/builds/:id`.
    GetBuild,
    /// `GET /v1/sites/:slug/preview`.
    Preview,
    /// `POST /v1/sites/:slug/publish`.
    Publish,
    /// `GET /v1/sites/:slug/releases`.
    Releases,
    /// `POST /v1/sites/:slug/rollback`.
    Rollback,
    /// `GET /v1/audit[?site=..][&limit=..]`.
    Audit,
}

/// One row of the table: an endpoint, its method and its path segments (`:name` is a
/// parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteSpec {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its method.
    pub verb: Verb,
    /// Its path's segments under the base path.
    pub segments: &'static [&'static str],
}

const fn row(endpoint: Endpoint, verb: Verb, segments: &'static [&'static str]) -> RouteSpec {
    RouteSpec {
        endpoint,
        verb,
        segments,
    }
}

/// The table. Its order is the order a request is matched in and the order the contract lists
/// the endpoints.
pub const ROUTES: &[RouteSpec] = &[
    row(Endpoint::Health, Verb::Get, &["health"]),
    row(Endpoint::Capabilities, Verb::Get, &["v1", "capabilities"]),
    row(Endpoint::ListSites, Verb::Get, &["v1", "sites"]),
    row(Endpoint::CreateSite, Verb::Post, &["v1", "sites"]),
    row(Endpoint::GetSite, Verb::Get, &["v1", "sites", ":slug"]),
    row(
        Endpoint::DeleteSite,
        Verb::Delete,
        &["v1", "sites", ":slug"],
    ),
    row(
        Endpoint::ListSessions,
        Verb::Get,
        &["v1", "sites", ":slug", "sessions"],
    ),
    row(
        Endpoint::StartSession,
        Verb::Post,
        &["v1", "sites", ":slug", "sessions"],
    ),
    row(
        Endpoint::Events,
        Verb::Get,
        &["v1", "sessions", ":id", "events"],
    ),
    row(
        Endpoint::SendMessage,
        Verb::Post,
        &["v1", "sessions", ":id", "messages"],
    ),
    row(
        Endpoint::StopSession,
        Verb::Post,
        &["v1", "sessions", ":id", "stop"],
    ),
    row(
        Endpoint::StartBuild,
        Verb::Post,
        &["v1", "sites", ":slug", "build"],
    ),
    row(
        Endpoint::GetBuild,
        Verb::Get,
        &["v1", "sites", ":slug", "builds", ":id"],
    ),
    row(
        Endpoint::Preview,
        Verb::Get,
        &["v1", "sites", ":slug", "preview"],
    ),
    row(
        Endpoint::Publish,
        Verb::Post,
        &["v1", "sites", ":slug", "publish"],
    ),
    row(
        Endpoint::Releases,
        Verb::Get,
        &["v1", "sites", ":slug", "releases"],
    ),
    row(
        Endpoint::Rollback,
        Verb::Post,
        &["v1", "sites", ":slug", "rollback"],
    ),
    row(Endpoint::Audit, Verb::Get, &["v1", "audit"]),
];

impl Endpoint {
    /// The endpoint's row of the table.
    pub fn spec(self) -> &'static RouteSpec {
        // Every endpoint has its row; the table test holds that.
        ROUTES
            .iter()
            .find(|spec| spec.endpoint == self)
            .unwrap_or(&ROUTES[0])
    }

    /// Its method.
    pub fn verb(self) -> Verb {
        self.spec().verb
    }

    /// Its path under the base path, each `:name` filled in order from `params`. The caller
    /// passes checked names (a [`crate::Slug`], an id of the contract's grammar), so none
    /// needs escaping.
    pub fn path(self, params: &[&str]) -> String {
        let mut params = params.iter();
        let mut path = String::new();
        for segment in self.spec().segments {
            path.push('/');
            if segment.starts_with(':') {
                path.push_str(params.next().copied().unwrap_or_default());
            } else {
                path.push_str(segment);
            }
        }
        path
    }
}

/// What a request's method and path segments match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched<'a> {
    /// An endpoint, with its path parameters in order (still percent-encoded).
    Endpoint {
        /// The endpoint.
        endpoint: Endpoint,
        /// The parameters' raw segments.
        params: Vec<&'a str>,
    },
    /// The path is known but not with this method; these are its methods.
    MethodNotAllowed(Vec<Verb>),
    /// No endpoint has this path.
    NotFound,
}

/// Matches a request: `method` as the request names it, `segments` its path's non-empty
/// segments under the base path.
pub fn route<'a>(method: &str, segments: &[&'a str]) -> Matched<'a> {
    let shaped = |spec: &&RouteSpec| {
        spec.segments.len() == segments.len()
            && spec
                .segments
                .iter()
                .zip(segments)
                .all(|(pattern, segment)| pattern.starts_with(':') || pattern == segment)
    };
    let mut allowed = Vec::new();
    for spec in ROUTES.iter().filter(shaped) {
        if spec.verb.as_str() == method {
            let params = spec
                .segments
                .iter()
                .zip(segments)
                .filter(|(pattern, _)| pattern.starts_with(':'))
                .map(|(_, segment)| *segment)
                .collect();
            return Matched::Endpoint {
                endpoint: spec.endpoint,
                params,
            };
        }
        allowed.push(spec.verb);
    }
    if allowed.is_empty() {
        Matched::NotFound
    } else {
        Matched::MethodNotAllowed(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table, written out independently as method and path template.
    const CONTRACT: &[(&str, &str)] = &[
        ("GET", "/health"),
        ("GET", "/v1/capabilities"),
        ("GET", "/v1/sites"),
        ("POST", "/v1/sites"),
        ("GET", "/v1/sites/{slug}"),
        ("DELETE", "/v1/sites/{slug}"),
        ("GET", "/v1/sites/{slug}/sessions"),
        ("POST", "/v1/sites/{slug}/sessions"),
        ("GET", "/v1/sessions/{id}/events"),
        ("POST", "/v1/sessions/{id}/messages"),
        ("POST", "/v1/sessions/{id}/stop"),
        ("POST", "/v1/sites/{slug}/build"),
        ("GET", "/v1/sites/{slug}/builds/{id}"),
        ("GET", "/v1/sites/{slug}/preview"),
        ("POST", "/v1/sites/{slug}/publish"),
        ("GET", "/v1/sites/{slug}/releases"),
        ("POST", "/v1/sites/{slug}/rollback"),
        ("GET", "/v1/audit"),
    ];

    #[test]
    fn the_table_is_the_contracts_and_every_endpoint_has_its_own_row() {
        let ours: Vec<(&str, String)> = ROUTES
            .iter()
            .map(|spec| {
                let params: Vec<String> = spec
                    .segments
                    .iter()
                    .filter_map(|s| s.strip_prefix(':'))
                    .map(|name| format!("{{{name}}}"))
                    .collect();
                let params: Vec<&str> = params.iter().map(String::as_str).collect();
                (spec.verb.as_str(), spec.endpoint.path(&params))
            })
            .collect();
        let contract: Vec<(&str, String)> = CONTRACT
            .iter()
            .map(|(verb, path)| (*verb, (*path).to_owned()))
            .collect();
        assert_eq!(ours, contract);
        for spec in ROUTES {
            assert_eq!(spec.endpoint.spec(), spec, "{:?}", spec.endpoint);
        }
    }

    #[test]
    fn requests_match_their_endpoint_or_name_the_allowed_methods() {
        let cases: Vec<(&str, &str, &[&str], Matched<'_>)> = vec![
            (
                "health",
                "GET",
                &["health"],
                Matched::Endpoint {
                    endpoint: Endpoint::Health,
                    params: vec![],
                },
            ),
            (
                "post health",
                "POST",
                &["health"],
                Matched::MethodNotAllowed(vec![Verb::Get]),
            ),
            (
                "list",
                "GET",
                &["v1", "sites"],
                Matched::Endpoint {
                    endpoint: Endpoint::ListSites,
                    params: vec![],
                },
            ),
            (
                "create",
                "POST",
                &["v1", "sites"],
                Matched::Endpoint {
                    endpoint: Endpoint::CreateSite,
                    params: vec![],
                },
            ),
            (
                "put sites",
                "PUT",
                &["v1", "sites"],
                Matched::MethodNotAllowed(vec![Verb::Get, Verb::Post]),
            ),
            (
                "delete",
                "DELETE",
                &["v1", "sites", "alpha"],
                Matched::Endpoint {
                    endpoint: Endpoint::DeleteSite,
                    params: vec!["alpha"],
                },
            ),
            (
                "build record",
                "GET",
                &["v1", "sites", "alpha", "builds", "b1"],
                Matched::Endpoint {
                    endpoint: Endpoint::GetBuild,
                    params: vec!["alpha", "b1"],
                },
            ),
            (
                "events",
                "GET",
                &["v1", "sessions", "s", "events"],
                Matched::Endpoint {
                    endpoint: Endpoint::Events,
                    params: vec!["s"],
                },
            ),
            ("unknown", "GET", &["v1", "nope"], Matched::NotFound),
            (
                "too deep",
                "GET",
                &["v1", "sites", "alpha", "preview", "x"],
                Matched::NotFound,
            ),
            ("root", "GET", &[], Matched::NotFound),
            (
                "lowercase method",
                "get",
                &["health"],
                Matched::MethodNotAllowed(vec![Verb::Get]),
            ),
        ];
        for (name, method, segments, want) in cases {
            assert_eq!(route(method, segments), want, "{name}");
        }
    }
}
