//! sited's route table as calls: each route's method, path under the base
//! path, query and body fields. The actor is added by the client to every mutating body.

use hyper::Method;
use serde_json::{json, Map, Value};

use atelier_site_api::{DriverId, Endpoint, Publish, Rollback, SendMessage, StartSession, Verb};

use crate::params::{Id, Slug};

/// The fields of `POST /v1/sites` (the contract's own request type).
pub use atelier_site_api::CreateSite as NewSite;

/// One route of the table with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// 1. `GET /health` (unauthenticated; the pairing proof).
    Health,
    /// 2. `GET /v1/capabilities`.
    Capabilities,
    /// 3. `POST /v1/sites`.
    CreateSite(NewSite),
    /// 4. `GET /v1/sites`.
    ListSites,
    /// 5. `GET /v1/sites/:slug`.
    GetSite(Slug),
    /// 6. `DELETE /v1/sites/:slug[?purge_prod=true]`.
    DeleteSite {
        /// The site.
        slug: Slug,
        /// Also remove production.
        purge_prod: bool,
    },
    /// 7. `POST /v1/sites/:slug/sessions`.
    StartSession {
        /// The site.
        slug: Slug,
        /// The first turn's prompt.
        prompt: String,
        /// The driver, when not the site's.
        driver: Option<DriverId>,
    },
    /// 8. `GET /v1/sites/:slug/sessions`.
    ListSessions(Slug),
    /// 9. `GET /v1/sessions/:id/events?after=N` (an SSE stream).
    Events {
        /// The session.
        session: Id,
        /// Replay events with a seq above this; -1 for all.
        after: i64,
    },
    /// 10. `POST /v1/sessions/:id/messages`.
    SendMessage {
        /// The session.
        session: Id,
        /// The follow-up turn's message.
        message: String,
    },
    /// 11. `POST /v1/sessions/:id/stop`.
    StopSession(Id),
    /// 12. `POST /v1/sites/:slug/build`.
    StartBuild(Slug),
    /// 13. `GET /v1/sites/:slug/builds/:id`.
    GetBuild {
        /// The site.
        slug: Slug,
        /// The build.
        build: Id,
    },
    /// 14. `GET /v1/sites/:slug/preview`.
    Preview(Slug),
    /// 15. `POST /v1/sites/:slug/publish` with `confirm: true`.
    Publish {
        /// The site.
        slug: Slug,
        /// A note for the audit log (sited keeps 500 characters).
        note: Option<String>,
    },
    /// 16. `GET /v1/sites/:slug/releases`.
    Releases(Slug),
    /// 17. `POST /v1/sites/:slug/rollback`.
    Rollback {
        /// The site.
        slug: Slug,
        /// The production release to serve again.
        release: Id,
    },
    /// 18. `GET /v1/audit[?site=..][&limit=..]`.
    Audit {
        /// Only this site's entries.
        site: Option<Slug>,
        /// At most this many (sited clamps to 1..1000; 100 when absent).
        limit: Option<u32>,
    },
}

/// A route as a request: method, path and query relative to the base path, and the body's
/// fields (before the actor) for mutating routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The method.
    pub method: Method,
    /// Path and query, relative to the base path; every parameter is a checked [`Slug`] or
    /// [`Id`], so none needs escaping.
    pub path_and_query: String,
    /// The body's fields for a mutating call; `None` for a GET.
    pub fields: Option<Map<String, Value>>,
}

// === impl Route ===

impl Route {
    /// The request this route makes: its endpoint's method and path from the contract's one
    /// route table, the query, and the body's fields.
    pub fn call(&self) -> Call {
        let (endpoint, params, query, fields): (Endpoint, Vec<&str>, String, Option<Value>) =
            match self {
                Route::Health => (Endpoint::Health, vec![], String::new(), None),
                Route::Capabilities => (Endpoint::Capabilities, vec![], String::new(), None),
                Route::CreateSite(site) => (
                    Endpoint::CreateSite,
                    vec![],
                    String::new(),
                    Some(fields_of(site)),
                ),
                Route::ListSites => (Endpoint::ListSites, vec![], String::new(), None),
                Route::GetSite(slug) => {
                    (Endpoint::GetSite, vec![slug.as_str()], String::new(), None)
                }
                Route::DeleteSite { slug, purge_prod } => {
                    // sited treats only the exact string `true` as a purge; never send `false`.
                    let query = if *purge_prod { "?purge_prod=true" } else { "" };
                    (
                        Endpoint::DeleteSite,
                        vec![slug.as_str()],
                        query.to_owned(),
                        Some(json!({})),
                    )
                }
                Route::StartSession {
                    slug,
                    prompt,
                    driver,
                } => {
                    let start = StartSession {
                        prompt: prompt.clone(),
                        driver: *driver,
                    };
                    (
                        Endpoint::StartSession,
                        vec![slug.as_str()],
                        String::new(),
                        Some(fields_of(&start)),
                    )
                }
                Route::ListSessions(slug) => (
                    Endpoint::ListSessions,
                    vec![slug.as_str()],
                    String::new(),
                    None,
                ),
                Route::Events { session, after } => (
                    Endpoint::Events,
                    vec![session.as_str()],
                    format!("?after={after}"),
                    None,
                ),
                Route::SendMessage { session, message } => (
                    Endpoint::SendMessage,
                    vec![session.as_str()],
                    String::new(),
                    Some(fields_of(&SendMessage {
                        message: message.clone(),
                    })),
                ),
                Route::StopSession(session) => (
                    Endpoint::StopSession,
                    vec![session.as_str()],
                    String::new(),
                    Some(json!({})),
                ),
                Route::StartBuild(slug) => (
                    Endpoint::StartBuild,
                    vec![slug.as_str()],
                    String::new(),
                    Some(json!({})),
                ),
                Route::GetBuild { slug, build } => (
                    Endpoint::GetBuild,
                    vec![slug.as_str(), build.as_str()],
                    String::new(),
                    None,
                ),
                Route::Preview(slug) => {
                    (Endpoint::Preview, vec![slug.as_str()], String::new(), None)
                }
                Route::Publish { slug, note } => {
                    let publish = Publish {
                        confirm: true,
                        note: note.clone(),
                    };
                    (
                        Endpoint::Publish,
                        vec![slug.as_str()],
                        String::new(),
                        Some(fields_of(&publish)),
                    )
                }
                Route::Releases(slug) => {
                    (Endpoint::Releases, vec![slug.as_str()], String::new(), None)
                }
                Route::Rollback { slug, release } => (
                    Endpoint::Rollback,
                    vec![slug.as_str()],
                    String::new(),
                    Some(fields_of(&Rollback {
                        release: release.to_string(),
                    })),
                ),
                Route::Audit { site, limit } => {
                    let mut query = Vec::new();
                    if let Some(site) = site {
                        query.push(format!("site={site}"));
                    }
                    if let Some(limit) = limit {
                        query.push(format!("limit={limit}"));
                    }
                    let query = if query.is_empty() {
                        String::new()
                    } else {
                        format!("?{}", query.join("&"))
                    };
                    (Endpoint::Audit, vec![], query, None)
                }
            };
        Call {
            method: match endpoint.verb() {
                Verb::Get => Method::GET,
                Verb::Post => Method::POST,
                Verb::Delete => Method::DELETE,
            },
            path_and_query: format!("{}{query}", endpoint.path(&params)),
            fields: fields.map(|fields| match fields {
                Value::Object(map) => map,
                _ => Map::new(),
            }),
        }
    }

    /// Returns true if and only if the route answers with an event stream.
    pub fn is_stream(&self) -> bool {
        matches!(self, Route::Events { .. })
    }
}

/// A request body's fields as JSON (an object; the client adds the actor).
fn fields_of(body: &impl serde::Serialize) -> Value {
    serde_json::to_value(body).unwrap_or_else(|_| json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slug(s: &str) -> Slug {
        Slug::parse(s).unwrap()
    }

    fn id(s: &str) -> Id {
        Id::parse("id", s).unwrap()
    }

    #[test]
    fn every_route_of_the_table_builds_its_request() {
        let session = "0b6f3c2e-5d0a-4c55-9f0e-3b1c2d4e5f60";
        let cases: Vec<(&str, Route, Method, String, Option<Value>)> = vec![
            (
                "1 health",
                Route::Health,
                Method::GET,
                "/health".into(),
                None,
            ),
            (
                "2 capabilities",
                Route::Capabilities,
                Method::GET,
                "/v1/capabilities".into(),
                None,
            ),
            (
                "3 create site, minimal",
                Route::CreateSite(NewSite {
                    slug: slug("alpha"),
                    name: "Alpha".into(),
                    domain: "alpha.example.org".into(),
                    template: None,
                    driver: None,
                }),
                Method::POST,
                "/v1/sites".into(),
                Some(json!({"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org"})),
            ),
            (
                "3 create site, template and driver",
                Route::CreateSite(NewSite {
                    slug: slug("alpha"),
                    name: "Alpha".into(),
                    domain: "alpha.example.org".into(),
                    template: Some("basic".into()),
                    driver: Some(DriverId::Opencode),
                }),
                Method::POST,
                "/v1/sites".into(),
                Some(
                    json!({"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org", "template": "basic", "driver": "opencode"}),
                ),
            ),
            (
                "4 list sites",
                Route::ListSites,
                Method::GET,
                "/v1/sites".into(),
                None,
            ),
            (
                "5 get site",
                Route::GetSite(slug("alpha")),
                Method::GET,
                "/v1/sites/alpha".into(),
                None,
            ),
            (
                "6 delete site",
                Route::DeleteSite {
                    slug: slug("alpha"),
                    purge_prod: false,
                },
                Method::DELETE,
                "/v1/sites/alpha".into(),
                Some(json!({})),
            ),
            (
                "6 delete site, purging production",
                Route::DeleteSite {
                    slug: slug("alpha"),
                    purge_prod: true,
                },
                Method::DELETE,
                "/v1/sites/alpha?purge_prod=true".into(),
                Some(json!({})),
            ),
            (
                "7 start session",
                Route::StartSession {
                    slug: slug("alpha"),
                    prompt: "make it blue".into(),
                    driver: None,
                },
                Method::POST,
                "/v1/sites/alpha/sessions".into(),
                Some(json!({"prompt": "make it blue"})),
            ),
            (
                "7 start session with a driver",
                Route::StartSession {
                    slug: slug("alpha"),
                    prompt: "p".into(),
                    driver: Some(DriverId::ClaudeCode),
                },
                Method::POST,
                "/v1/sites/alpha/sessions".into(),
                Some(json!({"prompt": "p", "driver": "claude_code"})),
            ),
            (
                "8 list sessions",
                Route::ListSessions(slug("alpha")),
                Method::GET,
                "/v1/sites/alpha/sessions".into(),
                None,
            ),
            (
                "9 events from the start",
                Route::Events {
                    session: id(session),
                    after: -1,
                },
                Method::GET,
                format!("/v1/sessions/{session}/events?after=-1"),
                None,
            ),
            (
                "9 events after a cursor",
                Route::Events {
                    session: id(session),
                    after: 41,
                },
                Method::GET,
                format!("/v1/sessions/{session}/events?after=41"),
                None,
            ),
            (
                "10 send message",
                Route::SendMessage {
                    session: id(session),
                    message: "and green".into(),
                },
                Method::POST,
                format!("/v1/sessions/{session}/messages"),
                Some(json!({"message": "and green"})),
            ),
            (
                "11 stop",
                Route::StopSession(id(session)),
                Method::POST,
                format!("/v1/sessions/{session}/stop"),
                Some(json!({})),
            ),
            (
                "12 build",
                Route::StartBuild(slug("alpha")),
                Method::POST,
                "/v1/sites/alpha/build".into(),
                Some(json!({})),
            ),
            (
                "13 get build",
                Route::GetBuild {
                    slug: slug("alpha"),
                    build: id("20260715T102030123Z-000001"),
                },
                Method::GET,
                "/v1/sites/alpha/builds/20260715T102030123Z-000001".into(),
                None,
            ),
            (
                "14 preview",
                Route::Preview(slug("alpha")),
                Method::GET,
                "/v1/sites/alpha/preview".into(),
                None,
            ),
            (
                "15 publish",
                Route::Publish {
                    slug: slug("alpha"),
                    note: None,
                },
                Method::POST,
                "/v1/sites/alpha/publish".into(),
                Some(json!({"confirm": true})),
            ),
            (
                "15 publish with a note",
                Route::Publish {
                    slug: slug("alpha"),
                    note: Some("spring".into()),
                },
                Method::POST,
                "/v1/sites/alpha/publish".into(),
                Some(json!({"confirm": true, "note": "spring"})),
            ),
            (
                "16 releases",
                Route::Releases(slug("alpha")),
                Method::GET,
                "/v1/sites/alpha/releases".into(),
                None,
            ),
            (
                "17 rollback",
                Route::Rollback {
                    slug: slug("alpha"),
                    release: id("20260715T102030123Z-000000"),
                },
                Method::POST,
                "/v1/sites/alpha/rollback".into(),
                Some(json!({"release": "20260715T102030123Z-000000"})),
            ),
            (
                "18 audit",
                Route::Audit {
                    site: None,
                    limit: None,
                },
                Method::GET,
                "/v1/audit".into(),
                None,
            ),
            (
                "18 audit of a site",
                Route::Audit {
                    site: Some(slug("alpha")),
                    limit: None,
                },
                Method::GET,
                "/v1/audit?site=alpha".into(),
                None,
            ),
            (
                "18 audit with a limit",
                Route::Audit {
                    site: Some(slug("alpha")),
                    limit: Some(5),
                },
                Method::GET,
                "/v1/audit?site=alpha&limit=5".into(),
                None,
            ),
        ];
        for (name, route, method, path, fields) in cases {
            let call = route.call();
            assert_eq!(call.method, method, "{name}");
            assert_eq!(call.path_and_query, path, "{name}");
            assert_eq!(call.fields.map(Value::Object), fields, "{name}");
            assert_eq!(route.is_stream(), name.starts_with("9 "), "{name}");
        }
    }
}
