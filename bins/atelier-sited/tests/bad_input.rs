//! Bad input over the real socket: every case is a named problem with its status and detail or
//! reason, and the instance's whole tree — and a directory outside it that planted links point
//! at — is byte-for-byte what it was before.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use atelier_sited::Router;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support;
use crate::support::{actor, call, declare_sites, make_roots, raw_settings, Reply};

struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    socket: PathBuf,
}

/// An instance with site `alpha` created, and a directory outside it for planted links.
async fn instance() -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("instance");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("victim.json"), "{\"secret\":true}\n").unwrap();
    make_roots(&root);
    declare_sites(
        &root,
        &[
            ("alpha", "alpha.example.org"),
            ("beta", "beta.example.org"),
            ("foreign", "foreign.example.org"),
        ],
    );
    let router = Router::new(&raw_settings(&root).validate().unwrap()).unwrap();
    let socket = root.join("sited.sock");
    support::serve(router, &socket);
    let created = call(
        &socket,
        Method::POST,
        "/v1/sites",
        json!({"slug": "alpha", "name": "Alpha", "domain": "alpha.example.org", "actor": actor()}),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    Instance {
        _dir: dir,
        root,
        outside,
        socket,
    }
}

/// Every path under `dir` with what it is: a file's bytes, a link's target, a directory.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path);
                "dir".to_owned()
            } else if meta.file_type().is_socket() {
                "socket".to_owned()
            } else {
                format!("file {}", hex::encode(std::fs::read(&path).unwrap()))
            };
            out.insert(rel, what);
        }
    }
    out
}

/// What a case expects back.
enum Want {
    /// A status and the exact `detail`.
    Detail(StatusCode, &'static str),
    /// A status and the machine `reason`.
    Reason(StatusCode, &'static str),
    /// Only a status (the detail names a path or a value).
    Status(StatusCode),
}

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    body: Body,
    want: Want,
}

enum Body {
    Json(Value),
    Raw(Vec<u8>),
    None,
}

fn case(name: &'static str, method: Method, path: &str, body: Body, want: Want) -> Case {
    Case {
        name,
        method,
        path: path.to_owned(),
        body,
        want,
    }
}

fn create(slug: &str, name: &str, domain: &str) -> Body {
    Body::Json(json!({"slug": slug, "name": name, "domain": domain, "actor": actor()}))
}

async fn send(instance: &Instance, case: &Case) -> Reply {
    match &case.body {
        Body::Json(value) => {
            call(
                &instance.socket,
                case.method.clone(),
                &case.path,
                value.clone(),
            )
            .await
        }
        Body::None => {
            call(
                &instance.socket,
                case.method.clone(),
                &case.path,
                Value::Null,
            )
            .await
        }
        Body::Raw(bytes) => raw_exchange(&instance.socket, &case.method, &case.path, bytes).await,
    }
}

/// One HTTP/1.1 exchange written by hand: the server may answer (413) before the body is all
/// read and close, so a failed write is not the test's failure — the answer is.
async fn raw_exchange(socket: &Path, method: &Method, path: &str, body: &[u8]) -> Reply {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let head = format!(
        "{method} {}{path} HTTP/1.1\r\nHost: sited\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        support::BASE,
        support::TOKEN,
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let mut headers = hyper::HeaderMap::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(": ") {
            headers.insert(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
    }
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v == "chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        status: StatusCode::from_u16(status).unwrap(),
        headers,
        body,
    }
}

fn dechunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size.min(rest.len())]);
        text = rest.get(size + 2..).unwrap_or("");
    }
    out
}

fn check(case: &Case, reply: &Reply) {
    let name = case.name;
    let problem = reply.json();
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/problem+json"),
        "{name}: {:?}",
        reply.headers
    );
    let (status, detail, reason) = match &case.want {
        Want::Detail(status, detail) => (*status, Some(*detail), None),
        Want::Reason(status, reason) => (*status, None, Some(*reason)),
        Want::Status(status) => (*status, None, None),
    };
    assert_eq!(reply.status, status, "{name}: {}", reply.body);
    assert_eq!(problem["status"], status.as_u16(), "{name}");
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .starts_with("https://dedalo.dev/site-builder/problems/"),
        "{name}"
    );
    if let Some(detail) = detail {
        assert_eq!(problem["detail"], detail, "{name}");
    }
    if let Some(reason) = reason {
        assert_eq!(problem["reason"], reason, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_named_problems_that_change_nothing() {
    use Want::*;
    let instance = instance().await;
    let long_name = "n".repeat(201);
    let long_prompt = "😀".repeat(16 * 1024 + 1);
    let uuid = "00000000-0000-4000-8000-000000000000";
    let cases = vec![
        case(
            "malformed JSON",
            Method::POST,
            "/v1/sites",
            Body::Raw(b"{\"slug\":".to_vec()),
            Detail(StatusCode::BAD_REQUEST, "Request body must be valid JSON"),
        ),
        case(
            "JSON that is not an object",
            Method::POST,
            "/v1/sites",
            Body::Raw(b"[1,2]".to_vec()),
            Detail(
                StatusCode::BAD_REQUEST,
                "Request body must be a JSON object",
            ),
        ),
        case(
            "body over 256 KiB",
            Method::POST,
            "/v1/sites",
            Body::Raw(vec![b' '; 256 * 1024 + 1]),
            Status(StatusCode::PAYLOAD_TOO_LARGE),
        ),
        case(
            "no actor",
            Method::POST,
            "/v1/sites",
            Body::Json(json!({"slug": "beta"})),
            Detail(
                StatusCode::BAD_REQUEST,
                "Missing required field: actor {user_id, username}",
            ),
        ),
        case(
            "actor id a string",
            Method::POST,
            "/v1/sites",
            Body::Json(json!({"actor": {"user_id": "1", "username": "a"}})),
            Detail(StatusCode::BAD_REQUEST, "actor.user_id must be an integer"),
        ),
        case(
            "actor id a fraction",
            Method::POST,
            "/v1/sites",
            Body::Json(json!({"actor": {"user_id": 1.5, "username": "a"}})),
            Detail(StatusCode::BAD_REQUEST, "actor.user_id must be an integer"),
        ),
        case(
            "actor with an empty name",
            Method::POST,
            "/v1/sites",
            Body::Json(json!({"actor": {"user_id": 1, "username": ""}})),
            Detail(
                StatusCode::BAD_REQUEST,
                "actor.username must be a non-empty string",
            ),
        ),
        case(
            "actor name over 200 chars",
            Method::POST,
            "/v1/sites",
            Body::Json(json!({"actor": {"user_id": 1, "username": long_name}})),
            Detail(
                StatusCode::BAD_REQUEST,
                "actor.username must be a non-empty string",
            ),
        ),
        case(
            "uppercase slug",
            Method::POST,
            "/v1/sites",
            create("Beta", "Beta", "beta.example.org"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "slug with dots",
            Method::POST,
            "/v1/sites",
            create("..", "Up", "beta.example.org"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "slug with a slash",
            Method::POST,
            "/v1/sites",
            create("be/ta", "Beta", "beta.example.org"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "slug of 41 chars",
            Method::POST,
            "/v1/sites",
            create(&format!("b{}", "e".repeat(40)), "Beta", "beta.example.org"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "slug starting with a digit",
            Method::POST,
            "/v1/sites",
            create("1beta", "Beta", "beta.example.org"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "blank name",
            Method::POST,
            "/v1/sites",
            create("beta", "   ", "beta.example.org"),
            Detail(
                StatusCode::BAD_REQUEST,
                "name must be a non-empty string up to 200 chars",
            ),
        ),
        case(
            "name over 200 chars",
            Method::POST,
            "/v1/sites",
            create("beta", &"n".repeat(201), "beta.example.org"),
            Detail(
                StatusCode::BAD_REQUEST,
                "name must be a non-empty string up to 200 chars",
            ),
        ),
        case(
            "domain with an underscore",
            Method::POST,
            "/v1/sites",
            create("beta", "Beta", "be_ta.example.org"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "single-label domain",
            Method::POST,
            "/v1/sites",
            create("beta", "Beta", "localhost"),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "existing slug",
            Method::POST,
            "/v1/sites",
            create("alpha", "Again", "alpha.example.org"),
            Reason(StatusCode::CONFLICT, "slug_exists"),
        ),
        case(
            "undeclared site",
            Method::POST,
            "/v1/sites",
            create("gamma", "Gamma", "gamma.example.org"),
            Reason(StatusCode::CONFLICT, "webspace_unavailable"),
        ),
        case(
            "declared on another domain",
            Method::POST,
            "/v1/sites",
            create("beta", "Beta", "other.example.org"),
            Reason(StatusCode::CONFLICT, "webspace_unavailable"),
        ),
        case(
            "another instance's webspace",
            Method::POST,
            "/v1/sites",
            create("foreign", "Foreign", "foreign.example.org"),
            Reason(StatusCode::CONFLICT, "webspace_unavailable"),
        ),
        case(
            "path-escaping template",
            Method::POST,
            "/v1/sites",
            Body::Json(
                json!({"slug": "beta", "name": "Beta", "domain": "beta.example.org", "template": "../../etc", "actor": actor()}),
            ),
            Detail(StatusCode::BAD_REQUEST, "Unknown template '../../etc'"),
        ),
        case(
            "template not a string",
            Method::POST,
            "/v1/sites",
            Body::Json(
                json!({"slug": "beta", "name": "Beta", "domain": "beta.example.org", "template": 7, "actor": actor()}),
            ),
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "delete of an unknown site",
            Method::DELETE,
            "/v1/sites/zeta",
            Body::Json(json!({"actor": actor()})),
            Detail(StatusCode::NOT_FOUND, "No site named 'zeta'"),
        ),
        case(
            "delete of a path-escaping slug",
            Method::DELETE,
            "/v1/sites/..%2Fsites",
            Body::Json(json!({"actor": actor()})),
            Status(StatusCode::NOT_FOUND),
        ),
        case(
            "delete without an actor",
            Method::DELETE,
            "/v1/sites/alpha",
            Body::None,
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "malformed percent escape",
            Method::GET,
            "/v1/sites/al%zzpha",
            Body::None,
            Status(StatusCode::BAD_REQUEST),
        ),
        case(
            "site that is the sites root's parent",
            Method::GET,
            "/v1/sites/..",
            Body::None,
            Status(StatusCode::NOT_FOUND),
        ),
        case(
            "session on an unknown site",
            Method::POST,
            "/v1/sites/zeta/sessions",
            Body::Json(json!({"prompt": "hi", "actor": actor()})),
            Status(StatusCode::NOT_FOUND),
        ),
        case(
            "prompt over 32 Ki UTF-16 units",
            Method::POST,
            "/v1/sites/alpha/sessions",
            Body::Json(json!({"prompt": long_prompt, "actor": actor()})),
            Detail(StatusCode::BAD_REQUEST, "prompt exceeds 32 KiB"),
        ),
        case(
            "prompt not a string",
            Method::POST,
            "/v1/sites/alpha/sessions",
            Body::Json(json!({"prompt": ["hi"], "actor": actor()})),
            Detail(StatusCode::BAD_REQUEST, "prompt must be a non-empty string"),
        ),
        case(
            "events of an unknown session",
            Method::GET,
            &format!("/v1/sessions/{uuid}/events"),
            Body::None,
            Detail(
                StatusCode::NOT_FOUND,
                "No session '00000000-0000-4000-8000-000000000000'",
            ),
        ),
        case(
            "events of a path-escaping id",
            Method::GET,
            "/v1/sessions/..%2F..%2Fsite.json/events",
            Body::None,
            Status(StatusCode::NOT_FOUND),
        ),
        case(
            "events of an id that is no uuid",
            Method::GET,
            "/v1/sessions/ABC/events",
            Body::None,
            Status(StatusCode::NOT_FOUND),
        ),
        case(
            "events of an unknown session after a non-number: the session first",
            Method::GET,
            &format!("/v1/sessions/{uuid}/events?after=abc"),
            Body::None,
            Detail(
                StatusCode::NOT_FOUND,
                "No session '00000000-0000-4000-8000-000000000000'",
            ),
        ),
        case(
            "message to an unknown session",
            Method::POST,
            &format!("/v1/sessions/{uuid}/messages"),
            Body::Json(json!({"message": "hi", "actor": actor()})),
            Status(StatusCode::NOT_FOUND),
        ),
        case(
            "empty message",
            Method::POST,
            &format!("/v1/sessions/{uuid}/messages"),
            Body::Json(json!({"message": "", "actor": actor()})),
            Detail(
                StatusCode::BAD_REQUEST,
                "message must be a non-empty string",
            ),
        ),
        case(
            "stop of a path-escaping id",
            Method::POST,
            "/v1/sessions/..%2Fx/stop",
            Body::Json(json!({"actor": actor()})),
            Reason(StatusCode::CONFLICT, "not_running"),
        ),
        case(
            "audit limit a non-number",
            Method::GET,
            "/v1/audit?limit=abc",
            Body::None,
            Detail(StatusCode::BAD_REQUEST, "limit must be a number"),
        ),
        case(
            "unknown route",
            Method::GET,
            "/v1/nothing",
            Body::None,
            Detail(StatusCode::NOT_FOUND, "Route not found: /v1/nothing"),
        ),
        case(
            "wrong method",
            Method::PUT,
            "/v1/sites",
            Body::None,
            Status(StatusCode::METHOD_NOT_ALLOWED),
        ),
    ];
    assert!(cases.len() >= 30);
    let before = snapshot(&instance.root);
    let outside = snapshot(&instance.outside);
    for case in &cases {
        let reply = send(&instance, case).await;
        check(case, &reply);
        assert_eq!(
            snapshot(&instance.root),
            before,
            "{}: the tree changed",
            case.name
        );
    }
    assert_eq!(snapshot(&instance.outside), outside);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_links_under_builder_are_refused_and_never_followed() {
    let instance = instance().await;
    let ws = instance.root.join("sites/alpha");
    let outside = instance.outside.clone();
    let outside_before = snapshot(&outside);
    let start = || {
        call(
            &instance.socket,
            Method::POST,
            "/v1/sites/alpha/sessions",
            json!({"prompt": "write planted.txt x", "actor": actor()}),
        )
    };

    // `.builder/sessions` a link out: the session cannot be written, and is refused.
    std::fs::create_dir_all(ws.join(".builder")).unwrap();
    let sessions = ws.join(".builder/sessions");
    let _ = std::fs::remove_dir_all(&sessions);
    std::os::unix::fs::symlink(&outside, &sessions).unwrap();
    let reply = start().await;
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.body
    );
    assert_eq!(
        reply.json()["detail"],
        "Internal server error",
        "nothing leaks"
    );
    std::fs::remove_file(&sessions).unwrap();

    // `.builder` itself a link out.
    std::fs::rename(ws.join(".builder"), ws.join(".builder-real")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join(".builder")).unwrap();
    let reply = start().await;
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.body
    );
    std::fs::remove_file(ws.join(".builder")).unwrap();
    std::fs::rename(ws.join(".builder-real"), ws.join(".builder")).unwrap();

    // The driver record a link out: no driver is read through it.
    let record = instance.root.join("sites/.driver_records/alpha.json");
    let saved = std::fs::read(&record).unwrap();
    std::fs::remove_file(&record).unwrap();
    std::os::unix::fs::symlink(outside.join("victim.json"), &record).unwrap();
    let reply = start().await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.body
    );
    assert_eq!(reply.json()["reason"], "confinement_unavailable");
    std::fs::remove_file(&record).unwrap();
    std::fs::write(&record, saved).unwrap();

    // site.json a link out: the site reads as broken, never as the outside file.
    std::fs::rename(ws.join("site.json"), ws.join("site.json.real")).unwrap();
    std::os::unix::fs::symlink(outside.join("victim.json"), ws.join("site.json")).unwrap();
    let reply = call(
        &instance.socket,
        Method::GET,
        "/v1/sites/alpha",
        Value::Null,
    )
    .await;
    assert!(!reply.body.contains("secret"), "{}", reply.body);
    assert_ne!(reply.status, StatusCode::OK);
    std::fs::remove_file(ws.join("site.json")).unwrap();
    std::fs::rename(ws.join("site.json.real"), ws.join("site.json")).unwrap();

    // `.builder/mcp.json` planted as a link out: the turn replaces the link, never writes
    // through it, and removes its own file afterwards.
    std::os::unix::fs::symlink(outside.join("victim.json"), ws.join(".builder/mcp.json")).unwrap();
    let reply = start().await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    let id = reply.json()["session_id"].as_str().unwrap().to_owned();
    let events = support::follow_events(&instance.socket, &id, -1, Duration::from_secs(60)).await;
    assert_eq!(events.last().unwrap()["body"]["type"], "turn_end");
    assert!(std::fs::symlink_metadata(ws.join(".builder/mcp.json")).is_err());

    assert_eq!(
        snapshot(&outside),
        outside_before,
        "nothing outside was touched"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]
    #[test]
    fn fuzzed_slugs_are_refused_or_undeclared_and_change_nothing(slug in "[ -~]{0,48}") {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let instance = instance().await;
            let before = snapshot(&instance.root);
            let reply = call(
                &instance.socket,
                Method::POST,
                "/v1/sites",
                json!({"slug": slug, "name": "Fuzz", "domain": "fuzz.example.org", "actor": actor()}),
            )
            .await;
            let grammar = {
                let bytes = slug.as_bytes();
                (2..=40).contains(&bytes.len())
                    && bytes[0].is_ascii_lowercase()
                    && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            };
            // A grammatical slug is either taken or not declared with this domain.
            let want = if grammar { StatusCode::CONFLICT } else { StatusCode::BAD_REQUEST };
            assert_eq!(reply.status, want, "{slug:?}: {}", reply.body);
            assert_eq!(snapshot(&instance.root), before, "{slug:?}");
        });
    }
}
