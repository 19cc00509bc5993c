//! The API document `docs/openapi/sited.json` held against sited: the router's route table and
//! the document name the same paths and methods, the document's reasons are exactly
//! [`Reason::ALL`] (each with the status, `type` and title sited answers it with), and a live
//! sited in `none` confinement answers a request to every documented operation with a
//! documented status and a body the document's schema accepts.

use std::collections::BTreeSet;
use std::path::Path;

use atelier_schema_check as schema;
use atelier_schema_check::openapi::{self, METHODS};
use atelier_site_api::Reason;
use atelier_sited::problem::ApiError;
use atelier_sited::ROUTES;
use http_body_util::BodyExt as _;
use hyper::Method;
use serde_json::{json, Value};

use super::{
    exchange, instance, parse_event_stream, support, Instance, Wire, UNKNOWN_SESSION, WAIT,
};

fn document() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi/sited.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A route's segments as an OpenAPI path template: `:slug` becomes `{slug}`.
fn template_of(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|segment| match segment.strip_prefix(':') {
            Some(name) => format!("/{{{name}}}"),
            None => format!("/{segment}"),
        })
        .collect()
}

#[test]
fn the_document_and_the_route_table_name_the_same_operations() {
    let document = document();
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|spec| {
            (
                template_of(spec.segments),
                spec.verb.as_str().to_lowercase(),
            )
        })
        .collect();
    openapi::check_operations(&document, &served).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
}

/// The problem body of `response`.
async fn problem_of(response: atelier_http::Response) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn every_reason_sited_can_answer_with_is_documented_and_no_other() {
    let document = document();
    let enumerated: BTreeSet<String> = document["components"]["schemas"]["Reason"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|reason| reason.as_str().unwrap().to_owned())
        .collect();
    let details = document["components"]["x-reasons"].as_object().unwrap();
    let detailed: BTreeSet<String> = details.keys().cloned().collect();
    assert_eq!(enumerated, detailed, "the Reason enum and x-reasons differ");

    let produced: BTreeSet<String> = Reason::ALL
        .iter()
        .map(|reason| reason.as_str().to_owned())
        .collect();
    assert_eq!(produced.len(), Reason::ALL.len(), "Reason::ALL repeats one");
    assert_eq!(
        produced, enumerated,
        "sited's reasons and the document's differ"
    );

    // Each reason answered as sited answers it: the status, `type` and title documented.
    let problem = json!({"$ref": "#/components/schemas/Problem"});
    for reason in Reason::ALL {
        let name = reason.as_str();
        let response = ApiError::Refused(reason, "a refusal".into()).into_response();
        let status = response.status().as_u16();
        let body = problem_of(response).await;
        let detail = &details[name];
        assert_eq!(detail["status"], status, "the status of {name}");
        assert_eq!(detail["type"], body["type"], "the type of {name}");
        assert_eq!(detail["title"], body["title"], "the title of {name}");
        assert_eq!(body["reason"], name);
        schema::check(&document, &problem, &body).unwrap_or_else(|e| panic!("{name}: {e}"));
    }

    let filed = openapi::filed_reasons(&document);
    openapi::check_filed_reasons(&filed, details).unwrap();
}

/// Sends requests to a live sited and holds each answer against the document.
struct Prober {
    document: Value,
    instance: Instance,
    /// The operations probed so far, as `(path template, method)`.
    probed: BTreeSet<(String, String)>,
}

impl Prober {
    /// Sends `method path` (under the prefix) with `body` (none when null) and checks the
    /// answer against operation `template`: the status must be `expected` and documented, the
    /// `Cache-Control` documented, and the body fit the documented schema; a refusal's
    /// `reason` must be one its response lists, and absent where none is listed. A request
    /// that succeeds must itself fit the documented request body, so the document describes
    /// what sited accepts. Returns the body read (a stream as the array of its events).
    async fn probe(
        &mut self,
        method: Method,
        template: &str,
        path: &str,
        body: Value,
        expected: u16,
    ) -> Value {
        let name = format!("{method} {path}");
        let sent = body.clone();
        let wire: Wire = tokio::time::timeout(
            WAIT,
            support::call(&self.instance.socket, method.clone(), path, body),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: no answer in time"))
        .into();
        self.check(&method, template, &name, &sent, &wire, expected)
    }

    /// Announces a body over the limit to `POST path` and checks the refusal like `probe`.
    async fn probe_oversized(&mut self, template: &str, path: &str) -> Value {
        let name = format!("POST {path} (oversized)");
        // Written by hand: the answer comes from the announced length, before any body byte,
        // and a client that insists on writing the body would see its pipe closed.
        let auth = format!("Bearer {}", support::TOKEN);
        let target = format!("{}{path}", support::BASE);
        let declared = atelier_sited::MAX_BODY_BYTES + 1;
        let wire = exchange(
            &self.instance.socket,
            "POST",
            &target,
            Some(&auth),
            b"",
            declared,
        )
        .await;
        self.check(&Method::POST, template, &name, &Value::Null, &wire, 413)
    }

    /// Checks `wire`, the answer to `name` (an operation `template` and `method`), as `probe`
    /// says.
    fn check(
        &mut self,
        method: &Method,
        template: &str,
        name: &str,
        sent: &Value,
        wire: &Wire,
        expected: u16,
    ) -> Value {
        assert_eq!(wire.status, expected, "{name}: {}", wire.text());
        let lower = method.as_str().to_lowercase();
        let operation = &self.document["paths"][template][&lower];
        assert!(operation.is_object(), "{name}: no documented operation");
        let request = &operation["requestBody"]["content"]["application/json"]["schema"];
        if expected < 300 && !sent.is_null() {
            self.fits(&format!("{name} (the request)"), request, sent);
        }
        let response = &operation["responses"][expected.to_string()];
        assert!(response.is_object(), "{name}: {expected} is not documented");
        let value = self.check_body(name, response, wire);
        self.probed.insert((template.to_owned(), lower));
        value
    }

    fn check_body(&self, name: &str, response: &Value, wire: &Wire) -> Value {
        assert_eq!(wire.header("cache-control"), Some("no-store"), "{name}");
        let content_type = wire.header("content-type").unwrap_or_default();
        // Parameters such as `charset` do not change the media type.
        let media_type = content_type.split(';').next().unwrap_or_default().trim();
        let media = &response["content"][media_type];
        assert!(
            media.is_object(),
            "{name}: {media_type} is not a documented media type"
        );
        match media_type {
            "text/event-stream" => {
                let mut faults = Vec::new();
                let events = parse_event_stream(&wire.text(), &mut faults);
                assert!(faults.is_empty(), "{name}: {faults:?}");
                for event in &events {
                    self.fits(name, &media["schema"], event);
                }
                Value::Array(events)
            }
            _ => {
                let body = wire.json();
                self.fits(name, &media["schema"], &body);
                let listed = response.get("x-reasons").and_then(Value::as_array);
                match (listed, body.get("reason")) {
                    (Some(reasons), Some(reason)) => {
                        assert!(
                            reasons.contains(reason),
                            "{name}: {reason} not in {reasons:?}"
                        );
                    }
                    (Some(reasons), None) => panic!("{name}: no reason, documented {reasons:?}"),
                    (None, Some(reason)) => panic!("{name}: an undocumented reason {reason}"),
                    (None, None) => {}
                }
                body
            }
        }
    }

    fn fits(&self, name: &str, schema: &Value, value: &Value) {
        if let Err(mismatch) = schema::check(&self.document, schema, value) {
            panic!("{name}: the answer does not fit the document: {mismatch}\n{value}");
        }
    }

    /// Polls build `id` of `slug` until it has ended, each answer probed.
    async fn finished_build(&mut self, slug: &str, id: &str) -> Value {
        let path = format!("/v1/sites/{slug}/builds/{id}");
        for _ in 0..3000 {
            let record = self
                .probe(
                    Method::GET,
                    "/v1/sites/{slug}/builds/{id}",
                    &path,
                    Value::Null,
                    200,
                )
                .await;
            if record["outcome"] != "running" {
                self.instance.wait_free(slug).await;
                return record;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("build {id} never ended");
    }
}

fn with_actor(mut body: Value) -> Value {
    body["actor"] = support::actor();
    body
}

/// One probe: the method, the operation's path template, the path sent, the body (none when
/// null) and the status expected.
type Call = (Method, &'static str, String, Value, u16);

/// Calls whose paths are fixed text.
fn calls(list: &[(Method, &'static str, &str, Value, u16)]) -> Vec<Call> {
    list.iter()
        .map(|(method, template, path, body, status)| {
            (
                method.clone(),
                *template,
                (*path).to_owned(),
                body.clone(),
                *status,
            )
        })
        .collect()
}

impl Prober {
    /// Probes each call in turn.
    async fn run(&mut self, calls: Vec<Call>) {
        for (method, template, path, body, status) in calls {
            self.probe(method, template, &path, body, status).await;
        }
    }
}

const SITE: &str = "/v1/sites/{slug}";
const SESSIONS: &str = "/v1/sites/{slug}/sessions";
const EVENTS: &str = "/v1/sessions/{id}/events";
const MESSAGES: &str = "/v1/sessions/{id}/messages";
const STOP: &str = "/v1/sessions/{id}/stop";
const BUILD: &str = "/v1/sites/{slug}/build";
const PUBLISH: &str = "/v1/sites/{slug}/publish";
const RELEASES: &str = "/v1/sites/{slug}/releases";
const ROLLBACK: &str = "/v1/sites/{slug}/rollback";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_sited_answers_every_documented_operation_as_documented() {
    let (get, post, delete) = (Method::GET, Method::POST, Method::DELETE);
    let instance = instance(
        &[("alpha", "alpha.example.org"), ("beta", "beta.example.org")],
        |_, _| {},
    )
    .await;
    let mut p = Prober {
        document: document(),
        instance,
        probed: BTreeSet::new(),
    };
    let none = Value::Null;
    let actor_only = with_actor(json!({}));
    let create = |slug: &str| {
        with_actor(json!({"slug": slug, "name": "A site", "domain": format!("{slug}.example.org")}))
    };

    // Sites, before any turn or build.
    p.run(calls(&[
        (get.clone(), "/health", "/health", none.clone(), 200),
        (
            get.clone(),
            "/v1/capabilities",
            "/v1/capabilities",
            none.clone(),
            200,
        ),
        (post.clone(), "/v1/sites", "/v1/sites", create("alpha"), 201),
        (post.clone(), "/v1/sites", "/v1/sites", create("alpha"), 409),
        (post.clone(), "/v1/sites", "/v1/sites", create("beta"), 201),
        (
            post.clone(),
            "/v1/sites",
            "/v1/sites",
            json!({"slug": "gamma"}),
            400,
        ),
        (get.clone(), "/v1/sites", "/v1/sites", none.clone(), 200),
        (get.clone(), SITE, "/v1/sites/alpha", none.clone(), 200),
        (get.clone(), SITE, "/v1/sites/zeta", none.clone(), 404),
        (
            get.clone(),
            "/v1/sites/{slug}/preview",
            "/v1/sites/alpha/preview",
            none.clone(),
            200,
        ),
        (
            get.clone(),
            "/v1/sites/{slug}/preview",
            "/v1/sites/zeta/preview",
            none.clone(),
            404,
        ),
        (
            post.clone(),
            PUBLISH,
            "/v1/sites/beta/publish",
            with_actor(json!({"confirm": true})),
            409,
        ),
    ]))
    .await;

    // A session: a turn followed to its end, then a follow-up that hangs until stopped.
    let prompt = with_actor(json!({"prompt": "Adding a page.\nwrite page.html <p>hi</p>"}));
    let started = p
        .probe(
            post.clone(),
            SESSIONS,
            "/v1/sites/alpha/sessions",
            prompt,
            201,
        )
        .await;
    let id = started["session_id"].as_str().unwrap().to_owned();
    let all = format!("/v1/sessions/{id}/events?after=-1");
    let first = p.probe(get.clone(), EVENTS, &all, none.clone(), 200).await;
    let first = first.as_array().unwrap().len();
    p.instance.wait_free("alpha").await;
    let listed = p
        .probe(
            get.clone(),
            SESSIONS,
            "/v1/sites/alpha/sessions",
            none.clone(),
            200,
        )
        .await;
    assert_eq!(listed["data"][0]["session_id"], id.as_str());
    let (messages, stop) = (
        format!("/v1/sessions/{id}/messages"),
        format!("/v1/sessions/{id}/stop"),
    );
    let unknown = |tail: &str| format!("/v1/sessions/{UNKNOWN_SESSION}/{tail}");
    p.run(vec![
        (
            post.clone(),
            MESSAGES,
            messages,
            with_actor(json!({"message": "hang"})),
            200,
        ),
        // The turn holds the site: a build is refused with the holder's reason.
        (
            post.clone(),
            BUILD,
            "/v1/sites/alpha/build".into(),
            actor_only.clone(),
            409,
        ),
        (post.clone(), STOP, stop.clone(), actor_only.clone(), 200),
    ])
    .await;
    p.instance.wait_free("alpha").await;
    let hi = with_actor(json!({"prompt": "hi", "message": "hi"}));
    p.run(vec![
        (post.clone(), STOP, stop, actor_only.clone(), 409),
        (post.clone(), MESSAGES, unknown("messages"), hi.clone(), 404),
        (
            post.clone(),
            SESSIONS,
            "/v1/sites/zeta/sessions".into(),
            hi,
            404,
        ),
        (
            post.clone(),
            SESSIONS,
            "/v1/sites/alpha/sessions".into(),
            actor_only.clone(),
            400,
        ),
        (
            get.clone(),
            SESSIONS,
            "/v1/sites/zeta/sessions".into(),
            none.clone(),
            404,
        ),
        (
            get.clone(),
            EVENTS,
            format!("/v1/sessions/{id}/events?after=soon"),
            none.clone(),
            400,
        ),
        (get.clone(), EVENTS, unknown("events"), none.clone(), 404),
    ])
    .await;
    let whole = p.probe(get.clone(), EVENTS, &all, none.clone(), 200).await;
    assert!(whole.as_array().unwrap().len() > first);

    // A build, published, rolled back.
    let started = p
        .probe(
            post.clone(),
            BUILD,
            "/v1/sites/alpha/build",
            actor_only.clone(),
            202,
        )
        .await;
    let record = p
        .finished_build("alpha", started["build_id"].as_str().unwrap())
        .await;
    assert_eq!(record["outcome"], "success", "{record}");
    let confirmed = with_actor(json!({"confirm": true, "note": "openapi"}));
    let served = p
        .probe(
            post.clone(),
            PUBLISH,
            "/v1/sites/alpha/publish",
            confirmed,
            200,
        )
        .await;
    let listed = p
        .probe(
            get.clone(),
            RELEASES,
            "/v1/sites/alpha/releases",
            none.clone(),
            200,
        )
        .await;
    assert_eq!(listed["current"], served["release"]);
    let again = with_actor(json!({"release": served["release"]}));
    let nowhere = with_actor(json!({"release": "20200101T000000000Z-000000"}));
    p.run(calls(&[
        (
            post.clone(),
            BUILD,
            "/v1/sites/zeta/build",
            actor_only.clone(),
            404,
        ),
        (
            get.clone(),
            "/v1/sites/{slug}/builds/{id}",
            "/v1/sites/alpha/builds/none",
            none.clone(),
            404,
        ),
        (
            post.clone(),
            PUBLISH,
            "/v1/sites/alpha/publish",
            actor_only.clone(),
            400,
        ),
        (
            get.clone(),
            RELEASES,
            "/v1/sites/zeta/releases",
            none.clone(),
            404,
        ),
        (
            post.clone(),
            ROLLBACK,
            "/v1/sites/alpha/rollback",
            again,
            200,
        ),
        (
            post.clone(),
            ROLLBACK,
            "/v1/sites/alpha/rollback",
            nowhere,
            404,
        ),
        (
            post.clone(),
            ROLLBACK,
            "/v1/sites/alpha/rollback",
            actor_only.clone(),
            400,
        ),
    ]))
    .await;
    p.probe_oversized(SESSIONS, "/v1/sites/beta/sessions").await;

    // The audit log, then the deletes.
    let entries = p
        .probe(
            get.clone(),
            "/v1/audit",
            "/v1/audit?site=alpha&limit=1000",
            none.clone(),
            200,
        )
        .await;
    assert!(entries["data"].as_array().unwrap().len() >= 7);
    p.run(calls(&[
        (get, "/v1/audit", "/v1/audit?limit=many", none.clone(), 400),
        (delete.clone(), SITE, "/v1/sites/alpha", none, 400),
        (
            delete.clone(),
            SITE,
            "/v1/sites/alpha",
            actor_only.clone(),
            200,
        ),
        (delete, SITE, "/v1/sites/alpha", actor_only, 404),
    ]))
    .await;

    openapi::check_probed(&p.document, &p.probed).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_paths_and_methods_answer_as_documented() {
    let document = document();
    let instance = instance(&[], |_, _| {}).await;
    let unmatched = &document["x-unmatched"]["responses"];
    let problem = json!({"$ref": "#/components/schemas/Problem"});
    for path in ["/v1/nope", "/v1/sites/alpha/builds", "/health/x"] {
        let wire = instance.get(path).await;
        assert_eq!(wire.status, 404, "{path}");
        assert!(unmatched["404"].is_object());
        schema::check(&document, &problem, &wire.json()).unwrap();
    }
    // Every documented path, with a method it does not list: 405 and a sorted `Allow`.
    for (template, item) in document["paths"].as_object().unwrap() {
        let unlisted = ["put", "patch", "delete", "post", "get"]
            .into_iter()
            .find(|m| item.get(*m).is_none())
            .unwrap();
        let path = template
            .replace("{slug}", "alpha")
            .replace("{id}", UNKNOWN_SESSION);
        let method = Method::from_bytes(unlisted.to_uppercase().as_bytes()).unwrap();
        let wire = instance.call(method.clone(), &path, Value::Null).await;
        assert_eq!(wire.status, 405, "{method} {path}");
        assert!(unmatched["405"]["headers"]["Allow"].is_object());
        let mut listed: Vec<String> = METHODS
            .iter()
            .filter(|m| item.get(**m).is_some())
            .map(|m| m.to_uppercase())
            .collect();
        listed.sort();
        assert_eq!(
            wire.header("allow"),
            Some(listed.join(", ").as_str()),
            "{method} {path}"
        );
        schema::check(&document, &problem, &wire.json()).unwrap();
    }
}
