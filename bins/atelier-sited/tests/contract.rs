//! sited's contract test, the promises the engine relies on checked from outside: every route of
//! the route table answers its success status, headers and shape (a shape table, so a key
//! added, removed or retyped fails); every `reason` sited may emit is produced with its status,
//! `type` and title, or listed with why `none` confinement cannot produce it; no
//! unauthenticated request can be told from another; 404 against 405 with `Allow`; the
//! `BASE_PATH` rule. Everything runs for real: the shim, the scripted agent, atelier-build, git.

mod metrics;
mod openapi;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use atelier_sited::metrics::Metrics;
use atelier_sited::reservations::Hold;
use atelier_sited::{RawSettings, Router};
use hyper::Method;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support;
use crate::support::{actor, declare_sites, make_roots, raw_settings, BASE, TOKEN};

/// How long a stream or a build may take before the test gives up.
const WAIT: Duration = Duration::from_secs(60);

const JSON_TYPE: &str = "application/json; charset=utf-8";
const EVENT_STREAM_TYPE: &str = "text/event-stream; charset=utf-8";
const PROBLEM_TYPE: &str = "application/problem+json; charset=utf-8";
/// Every problem `type` is this plus the class's suffix.
const PROBLEM_BASE: &str = "https://dedalo.dev/site-builder/problems/";
/// A fixed pairing fingerprint, instance `test` with the support module's token, so a change to
/// how it is derived fails here.
const TEST_FINGERPRINT: &str = "2eca5043adb9e40a704c689d74e9fe6db3270c4559dde3920109fb378fccdc46";
/// A well-formed session id no site has.
const UNKNOWN_SESSION: &str = "00000000-0000-4000-8000-000000000000";

// === The shape table ===

/// A JSON value's expected type.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Str,
    /// A string, one of these.
    OneOf(&'static [&'static str]),
    /// An integral number.
    Int,
    /// Any number.
    Num,
    Bool,
    /// The literal `true`.
    True,
    Null,
    OrNull(&'static Shape),
    List(&'static Shape),
    /// Exactly these keys (the optional ones may be absent).
    Object(&'static [Field]),
    /// An object whose `tag` key names the variant that fixes its other keys.
    Union {
        tag: &'static str,
        variants: &'static [(&'static str, &'static [Field])],
    },
    /// An object the contract shapes by a sibling key; checked by the route's own rule.
    AnyObject,
    /// A named shape: coverage is counted per name, wherever it appears.
    Named(&'static str, &'static Shape),
}

#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    shape: Shape,
    required: bool,
}

const fn req(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        required: true,
    }
}

const fn opt(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        required: false,
    }
}

const DRIVER_IDS: &[&str] = &["claude_code", "opencode", "pi", "atelier"];
const SESSION_STATES: &[&str] = &["idle", "running", "interrupted", "error"];
const SURFACES: &[&str] = &["preprod", "prod"];
const AUDIT_ACTIONS: &[&str] = &[
    "create_site",
    "delete_site",
    "session_start",
    "session_message",
    "session_stop",
    "build",
    "publish",
    "rollback",
];
/// A turn's one terminal error names a turn fault or the refusal's own reason.
const TURN_ERROR_REASONS: &[&str] = &[
    "turn_timeout",
    "turn_interrupted",
    "turn_setup_failed",
    "turn_unit_lost",
    "turn_agent_killed",
    "turn_agent_exited",
    "turn_failed",
    "confinement_unavailable",
    "confinement.site_busy",
    "confinement.identity_missing",
    "confinement.identity_quarantined",
    "confinement.unit_refused",
    "confinement.unit_nonconformant",
    "confinement.daemon_stopping",
    "confinement.agent_cli_unsupported",
    "confinement.agent_cli_unproved",
];

const DRIVER_AVAILABILITY: Shape = Shape::Named(
    "DriverAvailability",
    &Shape::Object(&[
        req("id", Shape::OneOf(DRIVER_IDS)),
        req("available", Shape::Bool),
        req("version", Shape::OrNull(&Shape::Str)),
        req("is_default", Shape::Bool),
    ]),
);

const HEALTH: Shape = Shape::Named(
    "Health",
    &Shape::Object(&[
        req("status", Shape::OneOf(&["ok"])),
        req("service", Shape::OneOf(&["dedalo-site-builder"])),
        req("drivers", Shape::List(&DRIVER_AVAILABILITY)),
        req("instance_fingerprint", Shape::Str),
    ]),
);

const TEMPLATE_INFO: Shape = Shape::Named(
    "TemplateInfo",
    &Shape::Object(&[
        req("id", Shape::Str),
        req("label", Shape::Str),
        req("description", Shape::Str),
    ]),
);

const CAPABILITIES: Shape = Shape::Named(
    "Capabilities",
    &Shape::Object(&[
        req("drivers", Shape::List(&DRIVER_AVAILABILITY)),
        req("default_driver", Shape::OneOf(DRIVER_IDS)),
        req("templates", Shape::List(&TEMPLATE_INFO)),
        req(
            "limits",
            Shape::Object(&[
                req("max_sites", Shape::Int),
                req("max_concurrent_sessions", Shape::Int),
                req("site_disk_quota_mb", Shape::Int),
            ]),
        ),
    ]),
);

const PUBLISHED: Shape = Shape::Named(
    "Published",
    &Shape::Object(&[
        req("release", Shape::Str),
        req("at", Shape::Str),
        req("by", Shape::Str),
    ]),
);

const SITE_MANIFEST: Shape = Shape::Named(
    "SiteManifest",
    &Shape::Object(&[
        req("slug", Shape::Str),
        req("name", Shape::Str),
        req("owner_user_id", Shape::Int),
        req("created_at", Shape::Str),
        req("driver", Shape::OneOf(DRIVER_IDS)),
        req("template", Shape::Str),
        req(
            "build",
            Shape::Object(&[
                req("install", Shape::Str),
                req("build", Shape::Str),
                req("output", Shape::Str),
            ]),
        ),
        req("domain", Shape::Str),
        req("published", Shape::OrNull(&PUBLISHED)),
    ]),
);

const BUILD_STATUS: Shape = Shape::Named(
    "BuildStatus",
    &Shape::Object(&[
        req("id", Shape::Str),
        req("outcome", Shape::OneOf(&["running", "success", "failed"])),
        req("started_at", Shape::Str),
        req("finished_at", Shape::OrNull(&Shape::Str)),
        req("release", Shape::OrNull(&Shape::Str)),
        req("error", Shape::OrNull(&Shape::Str)),
    ]),
);

/// Route 13: `{...BuildStatus, "log": "<text>"}`.
const BUILD_STATUS_WITH_LOG: Shape = Shape::Named(
    "BuildStatus+log",
    &Shape::Object(&[
        req("id", Shape::Str),
        req("outcome", Shape::OneOf(&["running", "success", "failed"])),
        req("started_at", Shape::Str),
        req("finished_at", Shape::OrNull(&Shape::Str)),
        req("release", Shape::OrNull(&Shape::Str)),
        req("error", Shape::OrNull(&Shape::Str)),
        req("log", Shape::Str),
    ]),
);

const SITE_STATUS: Shape = Shape::Named(
    "SiteStatus",
    &Shape::Object(&[
        req("manifest", SITE_MANIFEST),
        req(
            "session",
            Shape::Object(&[
                req("state", Shape::OneOf(SESSION_STATES)),
                req("session_id", Shape::OrNull(&Shape::Str)),
            ]),
        ),
        req("last_build", Shape::OrNull(&BUILD_STATUS)),
        req(
            "preprod",
            Shape::Object(&[
                req("url", Shape::Str),
                req("release", Shape::OrNull(&Shape::Str)),
            ]),
        ),
        req("published", Shape::OrNull(&PUBLISHED)),
    ]),
);

const SITE_LIST: Shape = Shape::Named(
    "SiteList",
    &Shape::Object(&[req("data", Shape::List(&SITE_STATUS))]),
);

const SKIPPED_SURFACE: Shape = Shape::Named(
    "SkippedSurface",
    &Shape::Object(&[
        req("surface", Shape::OneOf(SURFACES)),
        req("reason", Shape::Str),
    ]),
);

const DELETE_REPORT: Shape = Shape::Named(
    "DeleteReport",
    &Shape::Object(&[
        req("deleted", Shape::Str),
        req("purged_prod", Shape::Bool),
        req("removed_surfaces", Shape::List(&Shape::OneOf(SURFACES))),
        req("skipped_surfaces", Shape::List(&SKIPPED_SURFACE)),
    ]),
);

const SESSION_STARTED: Shape = Shape::Named(
    "SessionStarted",
    &Shape::Object(&[req("session_id", Shape::Str)]),
);

const SESSION_SUMMARY: Shape = Shape::Named(
    "SessionSummary",
    &Shape::Object(&[
        req("session_id", Shape::Str),
        req("started_at", Shape::Str),
        req("turns", Shape::Int),
        req("state", Shape::OneOf(SESSION_STATES)),
    ]),
);

const SESSION_LIST: Shape = Shape::Named(
    "SessionList",
    &Shape::Object(&[req("data", Shape::List(&SESSION_SUMMARY))]),
);

const MESSAGE_ACCEPTED: Shape = Shape::Named(
    "MessageAccepted",
    &Shape::Object(&[req("session_id", Shape::Str), req("accepted", Shape::True)]),
);

const SESSION_STOPPED: Shape = Shape::Named(
    "SessionStopped",
    &Shape::Object(&[req("session_id", Shape::Str), req("stopped", Shape::True)]),
);

const BUILD_STARTED: Shape = Shape::Named(
    "BuildStarted",
    &Shape::Object(&[req("build_id", Shape::Str)]),
);

const PREVIEW: Shape = Shape::Named(
    "Preview",
    &Shape::Object(&[
        req("url", Shape::Str),
        req("release", Shape::OrNull(&Shape::Str)),
        // `built_at` is always null.
        req("built_at", Shape::Null),
    ]),
);

const SERVED: Shape = Shape::Named(
    "Served",
    &Shape::Object(&[req("release", Shape::Str), req("url", Shape::Str)]),
);

const RELEASES: Shape = Shape::Named(
    "Releases",
    &Shape::Object(&[
        req("releases", Shape::List(&Shape::Str)),
        req("current", Shape::OrNull(&Shape::Str)),
    ]),
);

const AUDIT_ENTRY: Shape = Shape::Named(
    "AuditEntry",
    &Shape::Object(&[
        req("ts", Shape::Str),
        req(
            "actor",
            Shape::Object(&[req("user_id", Shape::Int), req("username", Shape::Str)]),
        ),
        req("action", Shape::OneOf(AUDIT_ACTIONS)),
        req("site", Shape::OrNull(&Shape::Str)),
        // Shaped by `action`: AUDIT_DETAILS.
        req("detail", Shape::AnyObject),
    ]),
);

/// Each action's `detail`.
const AUDIT_DETAILS: &[(&str, &[Field])] = &[
    (
        "create_site",
        &[req("template", Shape::Str), req("domain", Shape::Str)],
    ),
    (
        "delete_site",
        &[
            req("purge_prod", Shape::Bool),
            req("removed", Shape::List(&Shape::OneOf(SURFACES))),
            req("skipped", Shape::List(&SKIPPED_SURFACE)),
        ],
    ),
    ("session_start", &[req("session_id", Shape::Str)]),
    ("session_message", &[req("session_id", Shape::Str)]),
    ("session_stop", &[req("session_id", Shape::Str)]),
    ("build", &[req("build_id", Shape::Str)]),
    (
        "publish",
        &[req("release", Shape::Str), opt("note", Shape::Str)],
    ),
    ("rollback", &[req("release", Shape::Str)]),
];

const AUDIT_LIST: Shape = Shape::Named(
    "AuditList",
    &Shape::Object(&[req("data", Shape::List(&AUDIT_ENTRY))]),
);

/// The `SessionEventBody` union.
const EVENT_BODY: Shape = Shape::Named(
    "SessionEventBody",
    &Shape::Union {
        tag: "type",
        variants: &[
            (
                "turn_start",
                &[req("turn", Shape::Int), req("prompt", Shape::Str)],
            ),
            // `egress`: Atelier's, beside the line, on a gate decision of a confined run.
            (
                "text",
                &[
                    req("text", Shape::Str),
                    opt(
                        "egress",
                        Shape::Object(&[
                            req("host", Shape::Str),
                            req("port", Shape::OrNull(&Shape::Int)),
                            req(
                                "verdict",
                                Shape::OneOf(&[
                                    "allowed", "refused", "failed", "relayed", "closed",
                                ]),
                            ),
                            req("reason", Shape::Str),
                        ]),
                    ),
                ],
            ),
            (
                "tool",
                &[req("name", Shape::Str), req("summary", Shape::Str)],
            ),
            ("file_change", &[req("files", Shape::List(&Shape::Str))]),
            (
                "result",
                &[
                    req("ok", Shape::True),
                    opt("resumeToken", Shape::Str),
                    opt("costUsd", Shape::Num),
                    req("durationMs", Shape::Num),
                ],
            ),
            (
                "error",
                &[
                    req("reason", Shape::OneOf(TURN_ERROR_REASONS)),
                    req("retriable", Shape::Bool),
                    // The engine's UI shows it: a fixed sentence per reason.
                    req("message", Shape::Str),
                ],
            ),
            // The engine does not fix this one's fields; these are sited's, pinned so that a
            // change is a decision.
            (
                "agent_output",
                &[
                    req("source", Shape::OneOf(&["stderr"])),
                    req("text", Shape::Str),
                    req("truncated", Shape::Bool),
                ],
            ),
            (
                "resume_unavailable",
                &[req("reason", Shape::OneOf(&["agent identity migrated"]))],
            ),
            (
                "turn_end",
                &[
                    req("state", Shape::OneOf(&["idle", "interrupted", "error"])),
                    opt("resumeToken", Shape::Str),
                ],
            ),
        ],
    },
);

/// A log line and an SSE `data:`.
const STORED_EVENT: Shape = Shape::Named(
    "StoredEvent",
    &Shape::Object(&[
        req("seq", Shape::Int),
        req("ts", Shape::Str),
        req("body", EVENT_BODY),
    ]),
);

/// Optional parts of the shapes no successful request of `none` mode fills, and why.
const NEVER_FILLED: &[(&str, &str)] = &[
    (
        "SessionEventBody<resume_unavailable>",
        "only a change of the agent identity epoch drops a resume token, and identities belong \
         to systemd confinement",
    ),
    (
        "SessionEventBody<text>.egress?",
        "a gate decision exists only under systemd confinement (tests/systemd checks its fields \
         on a real turn)",
    ),
];

// === The route table ===

#[derive(Debug, Clone, Copy)]
enum Body {
    Json(&'static Shape),
    /// `text/event-stream` of `id: <seq>` / `data: <StoredEvent>` frames.
    Events,
}

#[derive(Debug, Clone, Copy)]
struct Route {
    method: &'static str,
    pattern: &'static str,
    status: u16,
    body: Body,
}

const fn route(method: &'static str, pattern: &'static str, status: u16, body: Body) -> Route {
    Route {
        method,
        pattern,
        status,
        body,
    }
}

const ROUTE_TABLE: [Route; 18] = [
    route("GET", "/health", 200, Body::Json(&HEALTH)),
    route("GET", "/v1/capabilities", 200, Body::Json(&CAPABILITIES)),
    route("POST", "/v1/sites", 201, Body::Json(&SITE_STATUS)),
    route("GET", "/v1/sites", 200, Body::Json(&SITE_LIST)),
    route("GET", "/v1/sites/:slug", 200, Body::Json(&SITE_STATUS)),
    route("DELETE", "/v1/sites/:slug", 200, Body::Json(&DELETE_REPORT)),
    route(
        "POST",
        "/v1/sites/:slug/sessions",
        201,
        Body::Json(&SESSION_STARTED),
    ),
    route(
        "GET",
        "/v1/sites/:slug/sessions",
        200,
        Body::Json(&SESSION_LIST),
    ),
    route("GET", "/v1/sessions/:id/events", 200, Body::Events),
    route(
        "POST",
        "/v1/sessions/:id/messages",
        200,
        Body::Json(&MESSAGE_ACCEPTED),
    ),
    route(
        "POST",
        "/v1/sessions/:id/stop",
        200,
        Body::Json(&SESSION_STOPPED),
    ),
    route(
        "POST",
        "/v1/sites/:slug/build",
        202,
        Body::Json(&BUILD_STARTED),
    ),
    route(
        "GET",
        "/v1/sites/:slug/builds/:id",
        200,
        Body::Json(&BUILD_STATUS_WITH_LOG),
    ),
    route("GET", "/v1/sites/:slug/preview", 200, Body::Json(&PREVIEW)),
    route("POST", "/v1/sites/:slug/publish", 200, Body::Json(&SERVED)),
    route(
        "GET",
        "/v1/sites/:slug/releases",
        200,
        Body::Json(&RELEASES),
    ),
    route("POST", "/v1/sites/:slug/rollback", 200, Body::Json(&SERVED)),
    route("GET", "/v1/audit", 200, Body::Json(&AUDIT_LIST)),
];

/// Each path of the route table and its methods, sorted as `Allow` lists them.
const PATH_METHODS: &[(&str, &[&str])] = &[
    ("/health", &["GET"]),
    ("/v1/capabilities", &["GET"]),
    ("/v1/sites", &["GET", "POST"]),
    ("/v1/sites/:slug", &["DELETE", "GET"]),
    ("/v1/sites/:slug/sessions", &["GET", "POST"]),
    ("/v1/sessions/:id/events", &["GET"]),
    ("/v1/sessions/:id/messages", &["POST"]),
    ("/v1/sessions/:id/stop", &["POST"]),
    ("/v1/sites/:slug/build", &["POST"]),
    ("/v1/sites/:slug/builds/:id", &["GET"]),
    ("/v1/sites/:slug/preview", &["GET"]),
    ("/v1/sites/:slug/publish", &["POST"]),
    ("/v1/sites/:slug/releases", &["GET"]),
    ("/v1/sites/:slug/rollback", &["POST"]),
    ("/v1/audit", &["GET"]),
];

/// Every method the 404/405 and 401 tables try, an extension method included.
const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PURGE",
];

// === The reason list ===

const REASONS: [(&str, u16); 24] = [
    ("slug_exists", 409),
    ("workspace_exists", 409),
    ("domain_taken", 409),
    ("webspace_unavailable", 409),
    ("no_build", 409),
    ("not_running", 409),
    ("session_running", 409),
    ("build_running", 409),
    ("site_initializing", 409),
    ("site_recovering", 409),
    ("git_running", 409),
    ("site_deleting", 409),
    ("max_sites", 429),
    ("max_concurrent_sessions", 429),
    ("disk_quota", 429),
    ("confinement_unavailable", 503),
    ("confinement.site_busy", 503),
    ("confinement.identity_missing", 503),
    ("confinement.identity_quarantined", 503),
    ("confinement.unit_refused", 503),
    ("confinement.unit_nonconformant", 503),
    ("confinement.daemon_stopping", 503),
    ("confinement.agent_cli_unsupported", 503),
    ("confinement.agent_cli_unproved", 503),
];

/// The reasons sited cannot answer with under `AGENT_CONFINEMENT=none`, and why.
const NOT_PRODUCED_IN_NONE_MODE: &[(&str, &str)] = &[
    (
        "confinement.site_busy",
        "a second run on a site is refused by the site's reservation (409 with the holder's \
         reason) before the run seam is reached; the seam has no second guard to trip",
    ),
    (
        "confinement.identity_missing",
        "only systemd confinement looks a site up in the declared site identities; an \
         unconfined run has no identity to miss",
    ),
    (
        "confinement.identity_quarantined",
        "only PID 1 can report that a previous run's unit of the site's identity would not die",
    ),
    (
        "confinement.unit_nonconformant",
        "only systemd confinement compares the door unit PID 1 loaded with the rendered one",
    ),
];

/// The `type` suffix and title of a reason's class.
fn problem_class(reason: &str, status: u16) -> (String, &'static str) {
    match (status, reason) {
        (409, _) => ("conflict".into(), "Conflict"),
        (429, _) => ("limit-exceeded".into(), "Limit Exceeded"),
        (503, "confinement_unavailable") => (
            "confinement-unavailable".into(),
            "Agent Confinement Unavailable",
        ),
        (503, code) => {
            let code = code
                .strip_prefix("confinement.")
                .unwrap_or_else(|| panic!("{code} is no confinement code"));
            (
                format!("confinement-{}", code.replace('_', "-")),
                "Agent Run Refused",
            )
        }
        _ => panic!("the contract has no class for {reason} at {status}"),
    }
}

// === Checking values against shapes ===

/// Which optional parts of the shapes (a nullable, a list, an optional key, a union variant)
/// were seen, and which of those were seen filled.
#[derive(Debug, Default)]
struct Coverage {
    optional: BTreeSet<String>,
    filled: BTreeSet<String>,
}

impl Coverage {
    fn note(&mut self, at: &str, filled: bool) {
        self.optional.insert(at.to_owned());
        if filled {
            self.filled.insert(at.to_owned());
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks `value` against `shape` at `at`, noting every breach in `faults`.
fn check(shape: &Shape, value: &Value, at: &str, cov: &mut Coverage, faults: &mut Vec<String>) {
    let mut wrong =
        |want: &str| faults.push(format!("{at}: want {want}, got {} {value}", kind(value)));
    match shape {
        Shape::Str if !value.is_string() => wrong("a string"),
        Shape::OneOf(choices) => match value.as_str() {
            Some(s) if choices.contains(&s) => {}
            _ => wrong(&format!("one of {choices:?}")),
        },
        Shape::Int if !(value.is_i64() || value.is_u64()) => wrong("an integer"),
        Shape::Num if !value.is_number() => wrong("a number"),
        Shape::Bool if !value.is_boolean() => wrong("a boolean"),
        Shape::True if value != &Value::Bool(true) => wrong("true"),
        Shape::Null if !value.is_null() => wrong("null"),
        Shape::AnyObject if !value.is_object() => wrong("an object"),
        Shape::Str | Shape::Int | Shape::Num | Shape::Bool | Shape::True | Shape::Null => {}
        Shape::AnyObject => {}
        Shape::OrNull(inner) => {
            cov.note(at, !value.is_null());
            if !value.is_null() {
                check(inner, value, at, cov, faults);
            }
        }
        Shape::List(inner) => match value.as_array() {
            Some(items) => {
                let each = format!("{at}[]");
                cov.note(&each, !items.is_empty());
                for item in items {
                    check(inner, item, &each, cov, faults);
                }
            }
            None => wrong("an array"),
        },
        Shape::Object(fields) => check_object(fields, None, value, at, cov, faults),
        Shape::Union { tag, variants } => {
            let Some(name) = value.get(*tag).and_then(Value::as_str) else {
                return wrong(&format!("an object with a string `{tag}`"));
            };
            for (variant, _) in *variants {
                cov.note(&format!("{at}<{variant}>"), *variant == name);
            }
            match variants.iter().find(|(variant, _)| *variant == name) {
                Some((_, fields)) => {
                    let at = format!("{at}<{name}>");
                    check_object(fields, Some(tag), value, &at, cov, faults);
                }
                None => wrong(&format!("a `{tag}` the contract lists")),
            }
        }
        Shape::Named(name, inner) => check(inner, value, name, cov, faults),
    }
}

fn check_object(
    fields: &[Field],
    tag: Option<&str>,
    value: &Value,
    at: &str,
    cov: &mut Coverage,
    faults: &mut Vec<String>,
) {
    let Some(object) = value.as_object() else {
        return faults.push(format!("{at}: want an object, got {value}"));
    };
    for key in object.keys() {
        if Some(key.as_str()) != tag && !fields.iter().any(|f| f.name == key) {
            faults.push(format!("{at}: a key the contract does not have: {key:?}"));
        }
    }
    for field in fields {
        let here = format!("{at}.{}", field.name);
        match object.get(field.name) {
            Some(inner) => {
                if !field.required {
                    cov.note(&format!("{here}?"), true);
                }
                check(&field.shape, inner, &here, cov, faults);
            }
            None if field.required => faults.push(format!("{here}: missing, got {value}")),
            None => cov.note(&format!("{here}?"), false),
        }
    }
}

// === The wire ===

/// One response as it came off the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wire {
    status: u16,
    /// Names lower-cased.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Wire {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every header but `Date`, sorted (the order of a header map is no contract).
    fn headers_but_date(&self) -> Vec<(String, String)> {
        let mut headers: Vec<_> = self
            .headers
            .iter()
            .filter(|(n, _)| n != "date")
            .cloned()
            .collect();
        headers.sort();
        headers
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.status, self.text()))
    }
}

impl From<support::Reply> for Wire {
    fn from(reply: support::Reply) -> Wire {
        Wire {
            status: reply.status.as_u16(),
            headers: headers_of(&reply.headers),
            body: reply.body.into_bytes(),
        }
    }
}

fn headers_of(map: &hyper::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
        .collect()
}

/// One HTTP/1.1 exchange written by hand, so any method, target and `Authorization` can be
/// sent exactly; `declared` is the `Content-Length` sent, of which only `body` is written.
async fn exchange(
    socket: &Path,
    method: &str,
    target: &str,
    auth: Option<&str>,
    body: &[u8],
    declared: usize,
) -> Wire {
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: sited\r\nConnection: close\r\n{auth}\
         Content-Length: {declared}\r\n\r\n"
    );
    // The server may answer before it reads the body (a 401 does); a write it refuses is fine.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(wire) = parse_response(&buf, method == "HEAD", false) {
                return wire;
            }
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return parse_response(&buf, method == "HEAD", true)
                    .unwrap_or_else(|| panic!("an incomplete response: {buf:?}"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .expect("the response in time")
}

/// The response in `buf` once it is complete (by `Content-Length`, or at the end of input).
fn parse_response(buf: &[u8], to_head: bool, at_end: bool) -> Option<Wire> {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.trim().to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    let rest = &buf[split + 4..];
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse::<usize>().unwrap());
    let body = match (to_head, length) {
        (true, _) => Vec::new(),
        (false, Some(n)) if rest.len() >= n => rest[..n].to_vec(),
        (false, None) if at_end => rest.to_vec(),
        _ => return None,
    };
    Some(Wire {
        status,
        headers,
        body,
    })
}

// === An instance ===

struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
    router: Router,
    /// Where its metrics are scraped, served as the daemon serves them.
    metrics_socket: PathBuf,
    _metrics: atelier_daemon::metrics::MetricsServer,
}

/// An instance of `test` in `none` confinement declaring `sites`, served on a temp socket, its
/// metrics on another.
async fn instance(
    sites: &[(&str, &str)],
    configure: impl FnOnce(&mut RawSettings, &Path),
) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    make_roots(&root);
    declare_sites(&root, sites);
    let mut raw = raw_settings(&root);
    configure(&mut raw, &root);
    let mut registry = Registry::with_prefix(atelier_sited::METRICS_PREFIX);
    let metrics = Metrics::new(&mut registry);
    let router = Router::with_metrics(&raw.validate().unwrap(), metrics).unwrap();
    let socket = root.join("sited.sock");
    support::serve(router.clone(), &socket);
    let metrics_socket = root.join("metrics.sock");
    let listener = tokio::net::UnixListener::bind(&metrics_socket).unwrap();
    let metrics_server = atelier_daemon::metrics::spawn(Some(listener.into()), registry);
    Instance {
        _dir: dir,
        root,
        socket,
        router,
        metrics_socket,
        _metrics: metrics_server,
    }
}

impl Instance {
    /// An authenticated request to `path` under `BASE_PATH`.
    async fn call(&self, method: Method, path: &str, body: Value) -> Wire {
        support::call(&self.socket, method, path, body).await.into()
    }

    async fn get(&self, path: &str) -> Wire {
        self.call(Method::GET, path, Value::Null).await
    }

    /// An authenticated request written by hand to `target` exactly (no prefix added).
    async fn raw(&self, method: &str, target: &str) -> Wire {
        let auth = format!("Bearer {TOKEN}");
        exchange(&self.socket, method, target, Some(&auth), b"", 0).await
    }

    /// An unauthenticated request written by hand.
    async fn stranger(&self, method: &str, target: &str) -> Wire {
        exchange(&self.socket, method, target, None, b"", 0).await
    }

    /// Follows a session's events from `after` until sited closes the stream.
    async fn follow(&self, id: &str, after: i64) -> Wire {
        use http_body_util::BodyExt as _;
        let path = format!("/v1/sessions/{id}/events?after={after}");
        let response = support::open(&self.socket, Method::GET, &path, "").await;
        let status = response.status().as_u16();
        let headers = headers_of(response.headers());
        let body = tokio::time::timeout(WAIT, response.into_body().collect())
            .await
            .expect("the stream closes in time")
            .expect("the stream")
            .to_bytes()
            .to_vec();
        Wire {
            status,
            headers,
            body,
        }
    }

    async fn create(&self, slug: &str, domain: &str) -> Wire {
        let body =
            json!({"slug": slug, "name": slug.to_uppercase(), "domain": domain, "actor": actor()});
        self.call(Method::POST, "/v1/sites", body).await
    }

    async fn start_session(&self, slug: &str, fields: Value) -> Wire {
        let mut body = fields;
        body["actor"] = actor();
        let path = format!("/v1/sites/{slug}/sessions");
        self.call(Method::POST, &path, body).await
    }

    async fn wait_free(&self, slug: &str) {
        for _ in 0..1000 {
            if self.router.sites().reservations().holder(slug).is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{slug} stayed held");
    }

    fn workspace(&self, slug: &str) -> PathBuf {
        self.root.join("sites").join(slug)
    }

    /// Rewrites the manifest's build output directory (the manifest is the agent's to edit).
    fn set_build_output(&self, slug: &str, output: &str) {
        let path = self.workspace(slug).join("site.json");
        let mut manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        manifest["build"]["output"] = json!(output);
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&manifest).unwrap() + "\n",
        )
        .unwrap();
    }
}

// === The route table test ===

/// Checks answers against the route table and counts which routes and shape parts were seen.
#[derive(Debug, Default)]
struct Contract {
    coverage: Coverage,
    answered: BTreeSet<usize>,
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

fn matches_pattern(pattern: &str, path: &str) -> bool {
    let (want, got) = (segments(pattern), segments(path));
    want.len() == got.len()
        && want
            .iter()
            .zip(&got)
            .all(|(w, g)| w.starts_with(':') || w == g)
}

/// `pattern` with every parameter replaced by `value`.
fn sample(pattern: &str, value: &str) -> String {
    pattern
        .split('/')
        .map(|s| if s.starts_with(':') { value } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

impl Contract {
    /// Checks a success answer of `method path` (path after `BASE_PATH`) and returns its JSON
    /// (for a stream: the array of its events).
    fn check(&mut self, method: &str, path: &str, wire: &Wire) -> Value {
        let bare = path.split('?').next().unwrap_or_default();
        let (index, route) = ROUTE_TABLE
            .iter()
            .enumerate()
            .find(|(_, r)| r.method == method && matches_pattern(r.pattern, bare))
            .unwrap_or_else(|| panic!("{method} {path} is no route of the contract"));
        let name = format!("{method} {}", route.pattern);
        assert_eq!(
            wire.status,
            route.status,
            "{method} {path}: {}",
            wire.text()
        );
        assert_eq!(
            wire.header("cache-control"),
            Some("no-store"),
            "{method} {path}"
        );
        let mut faults = Vec::new();
        let value = match route.body {
            Body::Json(shape) => {
                assert_eq!(
                    wire.header("content-type"),
                    Some(JSON_TYPE),
                    "{method} {path}"
                );
                let value = wire.json();
                check(shape, &value, &name, &mut self.coverage, &mut faults);
                if route.pattern == "/v1/audit" {
                    self.check_audit_details(&value, &mut faults);
                }
                value
            }
            Body::Events => {
                assert_eq!(
                    wire.header("content-type"),
                    Some(EVENT_STREAM_TYPE),
                    "{path}"
                );
                // An event stream's other two headers: keep the connection, and no buffering in
                // nginx.
                assert_eq!(wire.header("connection"), Some("keep-alive"), "{path}");
                assert_eq!(wire.header("x-accel-buffering"), Some("no"), "{path}");
                let events = parse_event_stream(&wire.text(), &mut faults);
                for event in &events {
                    check(&STORED_EVENT, event, &name, &mut self.coverage, &mut faults);
                }
                Value::Array(events)
            }
        };
        assert!(
            faults.is_empty(),
            "{method} {path} breaks the contract's shape:\n{}\n{value:#}",
            faults.join("\n")
        );
        self.answered.insert(index);
        value
    }

    /// Each audit entry's `detail` is its action's.
    fn check_audit_details(&mut self, list: &Value, faults: &mut Vec<String>) {
        for entry in list["data"].as_array().into_iter().flatten() {
            let action = entry["action"].as_str().unwrap_or_default();
            for (known, _) in AUDIT_DETAILS {
                self.coverage
                    .note(&format!("AuditEntry.detail<{known}>"), *known == action);
            }
            match AUDIT_DETAILS.iter().find(|(known, _)| *known == action) {
                Some((_, fields)) => check(
                    &Shape::Object(fields),
                    &entry["detail"],
                    &format!("AuditEntry.detail<{action}>"),
                    &mut self.coverage,
                    faults,
                ),
                None => faults.push(format!(
                    "AuditEntry: an action the contract does not list: {entry}"
                )),
            }
        }
    }
}

/// An event stream's framing: each event is exactly `id: <seq>` then `data: <StoredEvent>`, a
/// blank line after it; `:` lines are keep-alive comments; the seqs follow each other.
fn parse_event_stream(text: &str, faults: &mut Vec<String>) -> Vec<Value> {
    if !text.is_empty() && !text.ends_with("\n\n") {
        faults.push(format!(
            "the stream does not end with a whole frame: {text:?}"
        ));
    }
    let mut events: Vec<Value> = Vec::new();
    for block in text.split_terminator("\n\n") {
        let lines: Vec<&str> = block.split('\n').collect();
        if lines.iter().all(|line| line.starts_with(':')) {
            continue;
        }
        let [id, data] = lines.as_slice() else {
            faults.push(format!("a frame that is not `id:` then `data:`: {block:?}"));
            continue;
        };
        let (Some(id), Some(data)) = (id.strip_prefix("id: "), data.strip_prefix("data: ")) else {
            faults.push(format!("a frame that is not `id:` then `data:`: {block:?}"));
            continue;
        };
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            faults.push(format!("data that is not JSON: {data:?}"));
            continue;
        };
        if id.parse::<u64>().ok() != event["seq"].as_u64() {
            faults.push(format!("`id: {id}` is not the event's seq: {data}"));
        }
        if let Some(previous) = events.last() {
            if event["seq"].as_u64() != previous["seq"].as_u64().map(|s| s + 1) {
                faults.push(format!(
                    "seq {} does not follow {}",
                    event["seq"], previous["seq"]
                ));
            }
        }
        events.push(event);
    }
    events
}

/// Starts a build of `slug`, polls it to its terminal record, every answer checked.
async fn build(instance: &Instance, contract: &mut Contract, slug: &str) -> Value {
    let path = format!("/v1/sites/{slug}/build");
    let started = instance
        .call(Method::POST, &path, json!({"actor": actor()}))
        .await;
    let id = contract.check("POST", &path, &started)["build_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/sites/{slug}/builds/{id}");
    for _ in 0..3000 {
        let got = instance.call(Method::GET, &path, Value::Null).await;
        let record = contract.check("GET", &path, &got);
        assert_eq!(record["id"], id.as_str());
        if record["outcome"] != "running" {
            instance.wait_free(slug).await;
            return record;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("build {id} never ended");
}

/// Follows session `id` from `after` to the stream's end, checked; returns its events.
async fn follow(instance: &Instance, contract: &mut Contract, id: &str, after: i64) -> Vec<Value> {
    let path = format!("/v1/sessions/{id}/events?after={after}");
    let wire = instance.follow(id, after).await;
    let events = contract.check("GET", &path, &wire);
    events.as_array().unwrap().clone()
}

fn last_seq(events: &[Value]) -> i64 {
    events.last().map_or(-1, |e| e["seq"].as_i64().unwrap())
}

fn body_types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["body"]["type"].as_str().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_its_success_status_headers_and_shape() {
    let instance = instance(
        &[("alpha", "alpha.example.org"), ("beta", "beta.example.org")],
        |_, _| {},
    )
    .await;
    let mut contract = Contract::default();
    let c = &mut contract;

    // 1: public, and the engine's pairing vector.
    let health = instance.stranger("GET", &format!("{BASE}/health")).await;
    let body = c.check("GET", "/health", &health);
    assert_eq!(body["instance_fingerprint"], TEST_FINGERPRINT);
    assert_eq!(body["drivers"][0]["id"], "claude_code");
    // 2.
    let capabilities = c.check(
        "GET",
        "/v1/capabilities",
        &instance.get("/v1/capabilities").await,
    );
    assert_eq!(capabilities["default_driver"], "claude_code");

    // 3-5 and 14, 16 on a new site.
    let created = instance.create("alpha", "alpha.example.org").await;
    let status = c.check("POST", "/v1/sites", &created);
    assert_eq!(status["manifest"]["slug"], "alpha");
    assert_eq!(status["manifest"]["owner_user_id"], 42);
    let list = c.check("GET", "/v1/sites", &instance.get("/v1/sites").await);
    assert_eq!(list["data"][0]["manifest"]["slug"], "alpha");
    c.check(
        "GET",
        "/v1/sites/alpha",
        &instance.get("/v1/sites/alpha").await,
    );
    let preview = c.check(
        "GET",
        "/v1/sites/alpha/preview",
        &instance.get("/v1/sites/alpha/preview").await,
    );
    assert_eq!(preview["url"], "http://pre.alpha.example.org/");
    let releases = c.check(
        "GET",
        "/v1/sites/alpha/releases",
        &instance.get("/v1/sites/alpha/releases").await,
    );
    assert_eq!(releases, json!({"releases": [], "current": null}));

    // 7, 9, 8: a turn that writes a page, followed to its end.
    let started = instance
        .start_session(
            "alpha",
            json!({"prompt": "Adding a page.\nwrite page.html <p>hi</p>"}),
        )
        .await;
    let id = c.check("POST", "/v1/sites/alpha/sessions", &started)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = follow(&instance, c, &id, -1).await;
    assert_eq!(body_types(&first).first(), Some(&"turn_start"));
    assert_eq!(body_types(&first).last(), Some(&"turn_end"));
    instance.wait_free("alpha").await;
    let sessions = c.check(
        "GET",
        "/v1/sites/alpha/sessions",
        &instance.get("/v1/sites/alpha/sessions").await,
    );
    assert_eq!(sessions["data"][0]["session_id"], id.as_str());

    // 10, 11: a follow-up that hangs, stopped.
    let messages = format!("/v1/sessions/{id}/messages");
    let sent = instance
        .call(
            Method::POST,
            &messages,
            json!({"message": "hang", "actor": actor()}),
        )
        .await;
    assert_eq!(c.check("POST", &messages, &sent)["session_id"], id.as_str());
    let stop = format!("/v1/sessions/{id}/stop");
    let stopped = instance
        .call(Method::POST, &stop, json!({"actor": actor()}))
        .await;
    assert_eq!(c.check("POST", &stop, &stopped)["session_id"], id.as_str());
    let second = follow(&instance, c, &id, last_seq(&first)).await;
    // Stopped, the turn keeps the session it resumed, for the next message.
    let resumed = first.last().unwrap()["body"]["resumeToken"].clone();
    assert!(resumed.is_string(), "{first:?}");
    assert_eq!(
        second.last().unwrap()["body"],
        json!({"type": "turn_end", "state": "interrupted", "resumeToken": resumed})
    );
    instance.wait_free("alpha").await;
    // A third turn whose agent fails, for the error and agent_output events.
    let sent = instance
        .call(
            Method::POST,
            &messages,
            json!({"message": "stderr boom\nexit 3", "actor": actor()}),
        )
        .await;
    c.check("POST", &messages, &sent);
    let third = follow(&instance, c, &id, last_seq(&second)).await;
    assert!(body_types(&third).contains(&"agent_output"), "{third:?}");
    instance.wait_free("alpha").await;
    // The whole log once more, from the start.
    let all = follow(&instance, c, &id, -1).await;
    assert_eq!(all.len(), first.len() + second.len() + third.len());

    // 12, 13: a build whose output is missing, then one that succeeds.
    instance.set_build_output("alpha", "nothing");
    let failed = build(&instance, c, "alpha").await;
    assert_eq!(failed["outcome"], "failed");
    let site = c.check(
        "GET",
        "/v1/sites/alpha",
        &instance.get("/v1/sites/alpha").await,
    );
    assert_eq!(site["last_build"]["error"], failed["error"]);
    instance.set_build_output("alpha", "dist");
    let built = build(&instance, c, "alpha").await;
    assert_eq!(built["outcome"], "success", "{built}");
    let preview = c.check(
        "GET",
        "/v1/sites/alpha/preview",
        &instance.get("/v1/sites/alpha/preview").await,
    );
    assert_eq!(preview["release"], built["release"]);

    // 15-17: publish twice, roll back to the first.
    let publish = "/v1/sites/alpha/publish";
    let body = json!({"confirm": true, "note": "first", "actor": actor()});
    let first_release = c.check(
        "POST",
        publish,
        &instance.call(Method::POST, publish, body).await,
    );
    assert_eq!(first_release["url"], "https://alpha.example.org/");
    let body = json!({"confirm": true, "actor": actor()});
    let second_release = c.check(
        "POST",
        publish,
        &instance.call(Method::POST, publish, body).await,
    );
    let releases = c.check(
        "GET",
        "/v1/sites/alpha/releases",
        &instance.get("/v1/sites/alpha/releases").await,
    );
    assert_eq!(releases["current"], second_release["release"]);
    let rollback = "/v1/sites/alpha/rollback";
    let body = json!({"release": first_release["release"], "actor": actor()});
    let rolled = c.check(
        "POST",
        rollback,
        &instance.call(Method::POST, rollback, body).await,
    );
    assert_eq!(rolled["release"], first_release["release"]);
    let site = c.check(
        "GET",
        "/v1/sites/alpha",
        &instance.get("/v1/sites/alpha").await,
    );
    assert_eq!(site["published"]["release"], first_release["release"]);
    assert_eq!(site["manifest"]["published"], site["published"]);
    c.check("GET", "/v1/sites", &instance.get("/v1/sites").await);

    // 6: a delete whose webspace is no longer ours skips both surfaces; one that removes both.
    c.check(
        "POST",
        "/v1/sites",
        &instance.create("beta", "beta.example.org").await,
    );
    let marker = instance.root.join("www/beta.example.org/.atelier_instance");
    std::fs::write(&marker, "other\n").unwrap();
    let delete = "/v1/sites/beta?purge_prod=true";
    let deleted = instance
        .call(Method::DELETE, delete, json!({"actor": actor()}))
        .await;
    let report = c.check("DELETE", delete, &deleted);
    assert_eq!(report["removed_surfaces"], json!([]));
    assert_eq!(report["skipped_surfaces"].as_array().unwrap().len(), 2);
    let delete = "/v1/sites/alpha?purge_prod=true";
    let deleted = instance
        .call(Method::DELETE, delete, json!({"actor": actor()}))
        .await;
    let report = c.check("DELETE", delete, &deleted);
    assert_eq!(report["removed_surfaces"], json!(["preprod", "prod"]));

    // 18, with every action's detail; then 1 and 2 again, now that a probe read a version.
    let audit = c.check(
        "GET",
        "/v1/audit?limit=1000",
        &instance.get("/v1/audit?limit=1000").await,
    );
    let actions: BTreeSet<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, AUDIT_ACTIONS.iter().copied().collect());
    let health = instance.stranger("GET", &format!("{BASE}/health")).await;
    c.check("GET", "/health", &health);
    c.check(
        "GET",
        "/v1/capabilities",
        &instance.get("/v1/capabilities").await,
    );

    let unanswered: Vec<String> = ROUTE_TABLE
        .iter()
        .enumerate()
        .filter(|(i, _)| !contract.answered.contains(i))
        .map(|(_, r)| format!("{} {}", r.method, r.pattern))
        .collect();
    assert_eq!(unanswered, Vec::<String>::new(), "routes never checked");
    let unfilled: BTreeSet<&str> = contract
        .coverage
        .optional
        .difference(&contract.coverage.filled)
        .map(String::as_str)
        .collect();
    let expected: BTreeSet<&str> = NEVER_FILLED.iter().map(|(at, _)| *at).collect();
    assert_eq!(
        unfilled, expected,
        "optional parts of the shapes never seen filled (a nested shape left unchecked)"
    );
}

/// Every fault a turn can end with leaves an `error` event of the shape table's: a reason the
/// engine knows, and the sentence its UI shows.
#[test]
fn every_turn_fault_event_has_the_error_shape() {
    let mut cov = Coverage::default();
    for fault in atelier_sited::turn_fault::TurnFault::ALL {
        let mut faults = Vec::new();
        let body = serde_json::to_value(fault.event()).unwrap();
        check(&EVENT_BODY, &body, "error", &mut cov, &mut faults);
        assert!(faults.is_empty(), "{fault:?}: {faults:?}");
    }
}

// === The reason table test ===

/// Checks a refusal's problem and reason and records which reason it proved.
fn expect_reason(
    produced: &mut BTreeMap<&'static str, &'static str>,
    reason: &'static str,
    case: &'static str,
    wire: &Wire,
) {
    let status = REASONS
        .iter()
        .find(|(r, _)| *r == reason)
        .map(|(_, s)| *s)
        .unwrap_or_else(|| panic!("{reason} is not a reason the contract lists"));
    assert_eq!(wire.status, status, "{case}: {}", wire.text());
    assert_eq!(wire.header("content-type"), Some(PROBLEM_TYPE), "{case}");
    assert_eq!(wire.header("cache-control"), Some("no-store"), "{case}");
    let body = wire.json();
    let (slug, title) = problem_class(reason, status);
    assert_eq!(body["type"], format!("{PROBLEM_BASE}{slug}"), "{case}");
    assert_eq!(body["title"], title, "{case}");
    assert_eq!(body["status"], status, "{case}");
    assert_eq!(body["reason"], reason, "{case}: {body}");
    assert!(body["detail"].is_string(), "{case}: {body}");
    let keys: BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["type", "title", "status", "detail", "reason"]),
        "{case}"
    );
    produced.entry(reason).or_insert(case);
}

/// The reason a request meets while `hold` holds the site.
fn reason_of_hold(hold: Hold) -> &'static str {
    match hold {
        Hold::Init => "site_initializing",
        Hold::Deleting => "site_deleting",
        Hold::Session => "session_running",
        Hold::Build => "build_running",
        Hold::Recovery => "site_recovering",
        Hold::Git => "git_running",
    }
}

/// A stand-in agent CLI whose probe never finishes: it kills the shim that runs it, so the
/// run's connection ends without an exit record.
fn write_shim_killer(path: &Path) {
    std::fs::write(path, "#!/bin/sh\nkill -KILL \"$PPID\"\nsleep 5\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reason_is_produced_or_named_as_impossible_unconfined() {
    let sites = [("alpha", "alpha.example.org"), ("beta", "beta.example.org")];
    let main = instance(&sites, |raw, root| {
        raw.max_concurrent_sessions = Some(1);
        let killer = root.join("opencode-that-kills-its-shim");
        write_shim_killer(&killer);
        raw.opencode_bin = Some(killer);
    })
    .await;
    let limited = instance(&sites, |raw, _| {
        raw.max_sites = Some(1);
        raw.site_disk_quota_mb = Some(1);
    })
    .await;
    for instance in [&main, &limited] {
        let created = instance.create("alpha", "alpha.example.org").await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let mut produced = BTreeMap::new();
    let p = &mut produced;
    let alpha_manifest = main.workspace("alpha").join("site.json");
    let manifest_before = std::fs::read(&alpha_manifest).unwrap();

    // Create.
    let wire = main.create("alpha", "alpha.example.org").await;
    expect_reason(p, "slug_exists", "create of an existing slug", &wire);
    let wire = main.create("beta", "alpha.example.org").await;
    expect_reason(
        p,
        "domain_taken",
        "create with another site's domain",
        &wire,
    );
    let wire = main.create("zeta", "zeta.example.org").await;
    expect_reason(
        p,
        "webspace_unavailable",
        "create of an undeclared site",
        &wire,
    );
    let debris = main.workspace("beta");
    std::fs::create_dir(&debris).unwrap();
    let wire = main.create("beta", "beta.example.org").await;
    expect_reason(
        p,
        "workspace_exists",
        "create over a non-site directory",
        &wire,
    );
    assert_eq!(std::fs::read_dir(&debris).unwrap().count(), 0, "untouched");
    std::fs::remove_dir(&debris).unwrap();
    let wire = limited.create("beta", "beta.example.org").await;
    expect_reason(p, "max_sites", "create over max_sites", &wire);

    // Publish, stop.
    let body = json!({"confirm": true, "actor": actor()});
    let wire = main
        .call(Method::POST, "/v1/sites/alpha/publish", body)
        .await;
    expect_reason(p, "no_build", "publish before any build", &wire);
    let stop = format!("/v1/sessions/{UNKNOWN_SESSION}/stop");
    let wire = main
        .call(Method::POST, &stop, json!({"actor": actor()}))
        .await;
    expect_reason(p, "not_running", "stop of a session with no turn", &wire);

    // Every holder refuses a delete with its reason and nothing is removed.
    for hold in Hold::ALL {
        let held = main
            .router
            .sites()
            .reservations()
            .reserve("alpha", hold)
            .unwrap();
        let wire = main
            .call(Method::DELETE, "/v1/sites/alpha", json!({"actor": actor()}))
            .await;
        expect_reason(p, reason_of_hold(hold), "delete of a held site", &wire);
        drop(held);
        assert_eq!(std::fs::read(&alpha_manifest).unwrap(), manifest_before);
    }

    // Turn admission: the global slots, the quota, the drivers, the seam.
    let slot = main.router.sessions().take_slot().unwrap();
    let wire = main.start_session("alpha", json!({"prompt": "hi"})).await;
    expect_reason(
        p,
        "max_concurrent_sessions",
        "a turn with every slot taken",
        &wire,
    );
    drop(slot);
    let big = limited.workspace("alpha").join("big.bin");
    std::fs::write(&big, vec![7u8; 2 * 1024 * 1024]).unwrap();
    let wire = limited
        .start_session("alpha", json!({"prompt": "hi"}))
        .await;
    expect_reason(p, "disk_quota", "a turn over the quota", &wire);
    let wire = main
        .start_session("alpha", json!({"prompt": "hi", "driver": "pi"}))
        .await;
    expect_reason(
        p,
        "confinement.agent_cli_unsupported",
        "a driver with no binary",
        &wire,
    );
    let wire = main
        .start_session("alpha", json!({"prompt": "hi", "driver": "atelier"}))
        .await;
    expect_reason(
        p,
        "confinement.agent_cli_unsupported",
        "the atelier driver with no binary",
        &wire,
    );
    let wire = main
        .start_session("alpha", json!({"prompt": "hi", "driver": "opencode"}))
        .await;
    expect_reason(
        p,
        "confinement.agent_cli_unproved",
        "a probe whose run is lost",
        &wire,
    );
    // A second daemon of the instance whose shim never says hello.
    let mut raw = raw_settings(&main.root);
    raw.shim_bin = Some("/bin/true".into());
    let mute = Router::new(&raw.validate().unwrap()).unwrap();
    let mute_socket = main.root.join("mute.sock");
    support::serve(mute, &mute_socket);
    let body = json!({"prompt": "hi", "actor": actor()});
    let wire: Wire = support::call(&mute_socket, Method::POST, "/v1/sites/alpha/sessions", body)
        .await
        .into();
    expect_reason(
        p,
        "confinement.unit_refused",
        "a shim that never says hello",
        &wire,
    );
    let record = main.root.join("sites/.driver_records/alpha.json");
    std::fs::remove_file(&record).unwrap();
    let wire = main.start_session("alpha", json!({"prompt": "hi"})).await;
    expect_reason(
        p,
        "confinement_unavailable",
        "a site without a driver record",
        &wire,
    );
    main.router.sessions().runner().refuse_new_runs();
    let body = json!({"prompt": "hi", "driver": "claude_code"});
    let wire = main.start_session("alpha", body).await;
    expect_reason(
        p,
        "confinement.daemon_stopping",
        "a turn while stopping",
        &wire,
    );
    let sessions = main.workspace("alpha").join(".builder/sessions");
    let made = std::fs::read_dir(&sessions).map_or(0, |d| d.count());
    assert_eq!(made, 0, "no refused turn left a session behind");
    let _ = std::fs::remove_dir(main.workspace("beta"));
    let wire = main.create("beta", "beta.example.org").await;
    expect_reason(
        p,
        "confinement.daemon_stopping",
        "a create while stopping",
        &wire,
    );
    assert!(
        !main.workspace("beta").exists(),
        "a refused create makes nothing"
    );

    let all: BTreeSet<&str> = REASONS.iter().map(|(r, _)| *r).collect();
    let impossible: BTreeSet<&str> = NOT_PRODUCED_IN_NONE_MODE.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        impossible.len(),
        NOT_PRODUCED_IN_NONE_MODE.len(),
        "listed twice"
    );
    assert!(NOT_PRODUCED_IN_NONE_MODE
        .iter()
        .all(|(_, why)| !why.is_empty()));
    assert!(
        impossible.is_subset(&all),
        "only the contract's reasons are listed"
    );
    let made: BTreeSet<&str> = produced.keys().copied().collect();
    let both: Vec<_> = made.intersection(&impossible).collect();
    assert!(
        both.is_empty(),
        "produced yet listed as impossible: {both:?}"
    );
    let missing: Vec<_> = all.difference(&made).copied().collect();
    assert_eq!(
        missing,
        impossible.iter().copied().collect::<Vec<_>>(),
        "the impossible list is exactly what no request produced"
    );
}

// === The 401 rule ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_unauthenticated_request_can_be_told_from_another() {
    let instance = instance(&[("alpha", "alpha.example.org")], |_, _| {}).await;
    let created = instance.create("alpha", "alpha.example.org").await;
    assert_eq!(created.status, 201, "{}", created.text());

    // No usable `Bearer <token>` is "missing"; a token that is not the service's is
    // "invalid". Within each, nothing tells one request from another.
    let wrong_same_length = format!("Bearer {}", "x".repeat(TOKEN.len()));
    let longer = format!("Bearer {TOKEN}x");
    let shorter = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let shouted = format!("Bearer {}", TOKEN.to_uppercase());
    let lower_scheme = format!("bearer {TOKEN}");
    let other_scheme = format!("Token {TOKEN}");
    let two_spaces = format!("Bearer  {TOKEN}");
    let classes: [(&str, Vec<Option<&str>>); 2] = [
        (
            "Missing bearer token",
            vec![
                None,
                Some("Basic dXNlcjpwYXNz"),
                Some(&lower_scheme),
                Some(&other_scheme),
                Some("Bearer"),
                Some(&two_spaces),
            ],
        ),
        (
            "Invalid bearer token",
            vec![
                Some("Bearer wrong"),
                Some(&wrong_same_length),
                Some(&longer),
                Some(&shorter),
                Some(&shouted),
            ],
        ),
    ];
    let id = UNKNOWN_SESSION;
    let mut targets: Vec<String> = [
        "/v1/sites",
        "/v1/sites/alpha",
        "/v1/sites/zeta",
        "/v1/capabilities",
        "/v1/audit?limit=abc",
        "/v1/nope",
        "/v1/sites/alpha/builds/x",
        "/v1/sites/%zz",
        "/health/extra",
        "/v1/../health",
        "/",
        "",
    ]
    .iter()
    .map(|p| format!("{BASE}{p}"))
    .collect();
    targets.push(format!("{BASE}/v1/sessions/{id}/events?after=0"));
    targets.extend(["/".into(), "/v1/sites".into(), "/nope".into()]);
    let bodies: [&[u8]; 3] = [
        b"",
        b"{not json",
        br#"{"actor":{"user_id":1,"username":"x"}}"#,
    ];

    let mut cases: Vec<(&str, String)> = Vec::new();
    for target in &targets {
        cases.extend(METHODS.iter().map(|method| (*method, target.clone())));
    }
    // Every method of /health but GET is as private as any route.
    for method in METHODS.iter().filter(|m| **m != "GET") {
        cases.push((method, format!("{BASE}/health")));
        cases.push((method, "/health".to_owned()));
    }

    let mut per_class = Vec::new();
    for (detail, credentials) in &classes {
        let want = json!({
            "type": format!("{PROBLEM_BASE}unauthorized"),
            "title": "Unauthorized",
            "status": 401,
            "detail": detail,
        });
        let mut reference: Option<(String, Wire)> = None;
        let mut reference_head: Option<(String, Wire)> = None;
        for (c, auth) in credentials.iter().enumerate() {
            for (n, (method, target)) in cases.iter().enumerate() {
                let body = bodies[(n + c) % bodies.len()];
                let wire =
                    exchange(&instance.socket, method, target, *auth, body, body.len()).await;
                let case = format!("{method} {target:?} with {auth:?}");
                assert_eq!(wire.status, 401, "{case}: {}", wire.text());
                assert_eq!(wire.header("allow"), None, "{case}");
                let slot = if *method == "HEAD" {
                    &mut reference_head
                } else {
                    assert_eq!(wire.json(), want, "{case}");
                    &mut reference
                };
                match slot {
                    None => *slot = Some((case, wire)),
                    Some((first, seen)) => {
                        assert_eq!(seen.status, wire.status, "{case} vs {first}");
                        assert_eq!(
                            seen.headers_but_date(),
                            wire.headers_but_date(),
                            "{case} vs {first}"
                        );
                        assert_eq!(seen.body, wire.body, "{case} vs {first}");
                    }
                }
            }
        }
        // An oversized body is refused before it is read: the same 401.
        let (first, seen) = reference.clone().unwrap();
        let oversized = atelier_sited::MAX_BODY_BYTES + 1;
        let auth = credentials[0];
        let wire = exchange(
            &instance.socket,
            "POST",
            &format!("{BASE}/v1/sites"),
            auth,
            b"",
            oversized,
        )
        .await;
        assert_eq!(
            seen.headers_but_date(),
            wire.headers_but_date(),
            "vs {first}"
        );
        assert_eq!(seen.body, wire.body, "an oversized body vs {first}");
        // HEAD answers what GET does, without the body.
        let (_, head) = reference_head.unwrap();
        assert_eq!(head.status, seen.status);
        assert_eq!(head.headers_but_date(), seen.headers_but_date());
        assert!(head.body.is_empty());
        per_class.push(seen);
    }
    // The two kinds of refusal differ in their detail and nothing else.
    let [missing, invalid] = per_class.as_slice() else {
        panic!("two classes");
    };
    assert_eq!(missing.headers_but_date(), invalid.headers_but_date());
    let (mut missing, mut invalid) = (missing.json(), invalid.json());
    missing["detail"] = Value::Null;
    invalid["detail"] = Value::Null;
    assert_eq!(missing, invalid);

    // Only exactly `GET /health` is public, wherever the base path puts it.
    let public = instance.stranger("GET", &format!("{BASE}/health")).await;
    assert_eq!(public.status, 200);
    assert_eq!(public.json()["instance_fingerprint"], TEST_FINGERPRINT);
    for target in [
        "/health".to_owned(),
        format!("{BASE}//health/"),
        format!("{BASE}/health?probe=1"),
    ] {
        let wire = instance.stranger("GET", &target).await;
        assert_eq!(wire.status, 200, "{target}");
        assert_eq!(wire.body, public.body, "{target}");
    }
    // The public answer names neither the instance nor the token.
    assert!(!public.text().contains(TOKEN));
    assert!(!public.text().contains("\"test\""));
}

// === 404 against 405, and BASE_PATH ===

/// Asserts a plain problem: its status, `type`, title and detail, and no `reason`.
fn expect_problem(wire: &Wire, status: u16, slug: &str, title: &str, case: &str) -> Value {
    assert_eq!(wire.status, status, "{case}: {}", wire.text());
    assert_eq!(wire.header("content-type"), Some(PROBLEM_TYPE), "{case}");
    assert_eq!(wire.header("cache-control"), Some("no-store"), "{case}");
    let body = if wire.body.is_empty() {
        Value::Null
    } else {
        wire.json()
    };
    if !body.is_null() {
        assert_eq!(body["type"], format!("{PROBLEM_BASE}{slug}"), "{case}");
        assert_eq!(body["title"], title, "{case}");
        assert_eq!(body["status"], status, "{case}");
        assert!(body.get("reason").is_none(), "{case}: {body}");
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_gate_unknown_paths_are_404_and_known_ones_405_with_a_sorted_allow() {
    let instance = instance(&[], |_, _| {}).await;
    for (pattern, allowed) in PATH_METHODS {
        let path = sample(pattern, "zeta");
        let path = path.replace("/sessions/zeta", &format!("/sessions/{UNKNOWN_SESSION}"));
        for method in METHODS {
            let case = format!("{method} {path}");
            let wire = instance.raw(method, &format!("{BASE}{path}")).await;
            if allowed.contains(method) {
                // Routed: whatever the handler says, it is not the router's 404 or 405.
                assert_ne!(wire.status, 405, "{case}: {}", wire.text());
                assert!(
                    !wire.text().contains("Route not found"),
                    "{case}: {}",
                    wire.text()
                );
            } else {
                let body = expect_problem(
                    &wire,
                    405,
                    "method-not-allowed",
                    "Method Not Allowed",
                    &case,
                );
                assert_eq!(
                    wire.header("allow"),
                    Some(allowed.join(", ").as_str()),
                    "{case}: {body}"
                );
            }
        }
    }
    // Nothing was created by all of that.
    let list = instance.call(Method::GET, "/v1/sites", Value::Null).await;
    assert_eq!(list.json(), json!({"data": []}));

    let unknown = [
        "/",
        "/v1",
        "/v1/nope",
        "/V1/sites",
        "/v1/sites/zeta/nope",
        "/v1/sites/zeta/builds",
        "/v1/sites/zeta/builds/x/y",
        "/v1/sessions/x",
        "/v1/audit/x",
        "/v1/capabilities/x",
        "/health/x",
    ];
    for path in unknown {
        for method in METHODS {
            let case = format!("{method} {path}");
            let wire = instance.raw(method, &format!("{BASE}{path}")).await;
            let body = expect_problem(&wire, 404, "not-found", "Not Found", &case);
            assert_eq!(wire.header("allow"), None, "{case}");
            if *method != "HEAD" {
                assert_eq!(body["detail"], format!("Route not found: {path}"), "{case}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_path_is_stripped_when_present_and_empty_segments_are_ignored() {
    let instance = instance(&[], |_, _| {}).await;
    let reference = instance
        .raw("GET", &format!("{BASE}/v1/capabilities"))
        .await;
    assert_eq!(reference.status, 200, "{}", reference.text());
    // The prefix is stripped only when the path starts with it, empty segments dropped.
    for target in [
        "/v1/capabilities".to_owned(),
        format!("{BASE}//v1//capabilities"),
        format!("{BASE}/v1/capabilities/"),
        format!("{BASE}/v1/capabilities//?x=1"),
        format!("{BASE}///v1/capabilities"),
    ] {
        let wire = instance.raw("GET", &target).await;
        assert_eq!(wire.status, 200, "{target}: {}", wire.text());
        assert_eq!(wire.body, reference.body, "{target}");
        assert_eq!(wire.header("content-type"), Some(JSON_TYPE), "{target}");
    }
    // A routed path keeps its handler's answers through the same rules.
    let wire = instance
        .raw("GET", &format!("{BASE}//v1/sites/zeta/"))
        .await;
    let body = expect_problem(&wire, 404, "not-found", "Not Found", "GET //v1/sites/zeta/");
    assert_eq!(body["detail"], "No site named 'zeta'");
    let wire = instance
        .raw("POST", &format!("{BASE}//v1//capabilities/"))
        .await;
    expect_problem(
        &wire,
        405,
        "method-not-allowed",
        "Method Not Allowed",
        "POST",
    );
    assert_eq!(wire.header("allow"), Some("GET"));
    // The remainder `''` is `/`; anything else is looked up as it is.
    for (target, rest) in [
        (BASE.to_owned(), "/"),
        (format!("{BASE}/"), "/"),
        (
            "/other/v1/capabilities".to_owned(),
            "/other/v1/capabilities",
        ),
        (
            format!("{BASE}{BASE}/v1/capabilities"),
            "/publication/site_builder/v1/capabilities",
        ),
    ] {
        let wire = instance.raw("GET", &target).await;
        let body = expect_problem(&wire, 404, "not-found", "Not Found", &target);
        assert_eq!(
            body["detail"],
            format!("Route not found: {rest}"),
            "{target}"
        );
    }
    // Text glued to the prefix is never a route below it.
    let glued = format!("{BASE}x/v1/capabilities");
    let wire = instance.raw("GET", &glued).await;
    expect_problem(&wire, 404, "not-found", "Not Found", &glued);
}
