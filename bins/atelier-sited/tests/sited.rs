//! sited over a real unix socket: the routes and the bearer gate through the library's router,
//! and the binary itself run the way a developer runs it (bind fallback, SIGTERM, exit 0).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use atelier_sited::reservations::Hold;
use atelier_sited::{instance_fingerprint, RawSettings, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::net::UnixStream;

use crate::support;

const TOKEN: &str = "test-service-token-000000000000000000000000";
const BASE: &str = "/publication/site_builder";
const API_URL: &str = "https://api.example.org/publication/v2";

struct Reply {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn request(socket: &Path, method: Method, path: &str, auth: Option<&str>) -> Reply {
    send(socket, method, path, auth, "").await
}

async fn send(socket: &Path, method: Method, path: &str, auth: Option<&str>, body: &str) -> Reply {
    let stream = UnixStream::connect(socket).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "sited");
    if let Some(auth) = auth {
        builder = builder.header("authorization", auth);
    }
    let response = sender
        .send_request(
            builder
                .body(Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
        .await
        .expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A temp instance: sites root, audit dir, webspaces with markers and a stamped site table.
struct Instance {
    _dir: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
    router: Router,
}

const DECLARED: &[(&str, &str)] = &[
    ("alpha", "alpha.example.org"),
    ("beta", "beta.example.org"),
    ("gamma", "gamma.example.org"),
    ("foreign", "foreign.example.org"),
];

impl Instance {
    fn sites_root(&self) -> PathBuf {
        self.root.join("sites")
    }
    fn workspace(&self, slug: &str) -> PathBuf {
        self.sites_root().join(slug)
    }
    fn webspace(&self, domain: &str) -> PathBuf {
        self.root.join("www").join(domain)
    }
    fn auth() -> String {
        format!("Bearer {TOKEN}")
    }
    async fn call(&self, method: Method, path: &str, body: Value) -> Reply {
        let text = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        send(
            &self.socket,
            method,
            &format!("{BASE}{path}"),
            Some(&Self::auth()),
            &text,
        )
        .await
    }
    async fn create(&self, slug: &str, domain: &str) -> Reply {
        self.call(Method::POST, "/v1/sites", create_body(slug, domain))
            .await
    }
}

fn actor() -> Value {
    json!({"user_id": 42, "username": "ana"})
}

fn create_body(slug: &str, domain: &str) -> Value {
    json!({"slug": slug, "name": format!("Site {slug}"), "domain": domain, "actor": actor()})
}

fn write_site_table(root: &Path, instance: &str, sites: &[(&str, &str)]) {
    let rows: Vec<Value> = sites
        .iter()
        .map(|(slug, domain)| {
            let ws = root.join("www").join(domain);
            let ws = ws.to_str().unwrap();
            json!({
                "slug": slug, "domain": domain, "webspace": ws,
                "surfaces": {
                    "preprod": {"store_dir": format!("{ws}/.releases/pre"), "link_path": format!("{ws}/pre")},
                    "prod": {"store_dir": format!("{ws}/.releases/web"), "link_path": format!("{ws}/web")},
                }
            })
        })
        .collect();
    let body = serde_json::to_string_pretty(&json!({
        "version": 1, "instance": instance, "webspace_base": root.join("www"), "sites": rows,
    }))
    .unwrap()
        + "\n";
    let stamp = format!(
        "// atelier-provision: {instance} sites {}\n",
        hex::encode(Sha256::digest(body.as_bytes()))
    );
    std::fs::write(root.join("sites.json"), stamp + &body).unwrap();
}

fn settings(root: &Path, max_sites: u32) -> atelier_sited::Settings {
    RawSettings {
        publication_api_url: Some(API_URL.into()),
        max_sites: Some(max_sites),
        ..support::raw_settings(root)
    }
    .validate()
    .unwrap()
}

/// Builds an instance and serves its router on a fresh socket; the server stops when the
/// test's runtime ends.
fn instance(max_sites: u32) -> Instance {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    support::make_roots(&root);
    for (_, domain) in DECLARED {
        let ws = root.join("www").join(domain);
        std::fs::create_dir_all(&ws).unwrap();
        let owner = if domain.starts_with("foreign") {
            "other"
        } else {
            "test"
        };
        std::fs::write(ws.join(".atelier_instance"), format!("{owner}\n")).unwrap();
    }
    write_site_table(&root, "test", DECLARED);
    let router = Router::new(&settings(&root, max_sites)).unwrap();
    let socket = root.join("sited.sock");
    support::serve(router.clone(), &socket);
    Instance {
        _dir: dir,
        root,
        socket,
        router,
    }
}

/// Creates of different slugs sent at once are admitted one at a time against the limit: with
/// room for two sites, three at once make two, whatever their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_at_once_never_pass_the_site_limit() {
    let instance = instance(2);
    let (a, b, c) = tokio::join!(
        instance.create("alpha", "alpha.example.org"),
        instance.create("beta", "beta.example.org"),
        instance.create("gamma", "gamma.example.org"),
    );
    let mut statuses: Vec<u16> = [&a, &b, &c].iter().map(|r| r.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [201, 201, 429],
        "{} {} {}",
        a.body,
        b.body,
        c.body
    );
    let refused = [a, b, c]
        .into_iter()
        .find(|reply| reply.status == StatusCode::TOO_MANY_REQUESTS)
        .unwrap();
    assert_eq!(refused.json()["reason"], "max_sites");
    let listed = instance.call(Method::GET, "/v1/sites", Value::Null).await;
    assert_eq!(listed.json()["data"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn health_is_public_and_carries_the_fingerprint() {
    let instance = instance(20);
    let socket = instance.socket.clone();
    let reply = request(&socket, Method::GET, &format!("{BASE}/health"), None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers["content-type"],
        "application/json; charset=utf-8"
    );
    let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        body["instance_fingerprint"],
        "2eca5043adb9e40a704c689d74e9fe6db3270c4559dde3920109fb378fccdc46"
    );
    assert_eq!(
        body["instance_fingerprint"],
        instance_fingerprint("test", TOKEN)
    );
    assert!(!reply.body.contains(TOKEN));
}

#[tokio::test]
async fn no_unauthenticated_request_can_be_told_from_another() {
    let instance = instance(20);
    let socket = instance.socket.clone();
    let cases: Vec<(&str, Method, String, Option<&str>)> = vec![
        ("unknown path", Method::GET, format!("{BASE}/nope"), None),
        (
            "a real route",
            Method::GET,
            format!("{BASE}/v1/sites"),
            None,
        ),
        ("POST /health", Method::POST, format!("{BASE}/health"), None),
        (
            "base path without a segment boundary",
            Method::GET,
            format!("{BASE}x/health"),
            None,
        ),
        (
            "lowercase scheme",
            Method::GET,
            format!("{BASE}/v1/sites"),
            Some("bearer x"),
        ),
        (
            "empty token",
            Method::GET,
            format!("{BASE}/v1/sites"),
            Some("Bearer "),
        ),
    ];
    let mut bodies = Vec::new();
    for (name, method, path, auth) in cases {
        let reply = request(&socket, method, &path, auth).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "case {name}");
        assert!(reply.headers.get("allow").is_none(), "case {name}");
        assert_eq!(
            reply.headers["content-type"], "application/problem+json; charset=utf-8",
            "case {name}"
        );
        bodies.push(reply.body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:#?}");
    let body: serde_json::Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(
        body["type"],
        "https://dedalo.dev/site-builder/problems/unauthorized"
    );
    assert_eq!(body["detail"], "Missing bearer token");

    let wrong = request(
        &socket,
        Method::GET,
        &format!("{BASE}/v1/sites"),
        Some(&format!("Bearer {}", "y".repeat(TOKEN.len()))),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.body.contains("Invalid bearer token"));
}

#[tokio::test]
async fn after_the_gate_unknown_routes_are_404_and_wrong_methods_405() {
    let instance = instance(20);
    let socket = instance.socket.clone();
    let auth = format!("Bearer {TOKEN}");
    let missing = request(
        &socket,
        Method::GET,
        &format!("{BASE}/v1/nope"),
        Some(&auth),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let body: serde_json::Value = serde_json::from_str(&missing.body).unwrap();
    assert_eq!(body["detail"], "Route not found: /v1/nope");

    let post = request(
        &socket,
        Method::POST,
        &format!("{BASE}/health"),
        Some(&auth),
    )
    .await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.headers["allow"], "GET");

    // Text after a second space is ignored, as the original daemon did.
    let trailing = request(
        &socket,
        Method::GET,
        &format!("{BASE}/v1/nope"),
        Some(&format!("Bearer {TOKEN} trailing")),
    )
    .await;
    assert_eq!(trailing.status, StatusCode::NOT_FOUND);
}

#[test]
fn the_binary_refuses_bad_configuration_by_name() {
    let output = Command::new(env!("CARGO_BIN_EXE_atelier-sited"))
        .args([
            "--instance",
            "Not-An-Instance",
            "--listen",
            "/nonexistent/sited.sock",
        ])
        .env_remove("CREDENTIALS_DIRECTORY")
        .env_remove("LISTEN_FDS")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(78), "EX_CONFIG");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nothing was started"), "{stderr}");
    // Every problem at once, each named: the operator fixes them in one go.
    for named in [
        "7 problems: ",
        "instance name \"Not-An-Instance\"",
        "no service token",
        "sites_root is required",
        "publication_api_url is required",
    ] {
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
}

#[tokio::test]
async fn the_binary_serves_on_its_fallback_socket_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sited.sock");
    support::make_roots(dir.path());
    support::declare_sites(dir.path(), DECLARED);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_atelier-sited"))
        .args(support::sited_args(dir.path(), &socket))
        .env_remove("CREDENTIALS_DIRECTORY")
        .env_remove("LISTEN_FDS")
        .env_remove("NOTIFY_SOCKET")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let reply = request(&socket, Method::GET, &format!("{BASE}/health"), None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body.contains(&instance_fingerprint("test", TOKEN)));

    let pid = child.id().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("sited exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
}

async fn git_out(instance: &Instance, slug: &str, args: &[&str]) -> String {
    let target = instance.router.sites().config().run_target(slug);
    let out = instance
        .router
        .sites()
        .git()
        .run(&target, args)
        .await
        .unwrap();
    assert_eq!(out.code, 0, "git {args:?}: {}", out.stderr);
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn create_get_list_delete_round_trip() {
    let instance = instance(20);
    let created = instance.create("beta", " Beta.Example.ORG ").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let status = created.json();
    let manifest = &status["manifest"];
    assert_eq!(manifest["slug"], "beta");
    assert_eq!(manifest["name"], "Site beta");
    assert_eq!(manifest["domain"], "beta.example.org");
    assert_eq!(manifest["owner_user_id"], 42);
    assert_eq!(manifest["driver"], "claude_code");
    assert_eq!(manifest["template"], "basic");
    assert_eq!(manifest["build"]["build"], "sh build.sh");
    assert_eq!(manifest["published"], Value::Null);
    assert_eq!(
        status["session"],
        json!({"state": "idle", "session_id": null})
    );
    assert_eq!(status["last_build"], Value::Null);
    assert_eq!(
        status["preprod"],
        json!({"url": "http://pre.beta.example.org/", "release": null})
    );

    // The workspace: scaffolded, the placeholder filled, the brief and its link, .builder.
    let ws = instance.workspace("beta");
    let index = std::fs::read_to_string(ws.join("src/index.html")).unwrap();
    assert!(index.contains(API_URL) && !index.contains("__PUBLICATION_API_URL__"));
    assert_eq!(
        std::fs::read_link(ws.join("CLAUDE.md")).unwrap(),
        Path::new("AGENTS.md")
    );
    let brief = std::fs::read_to_string(ws.join("AGENTS.md")).unwrap();
    assert!(brief.starts_with("# Site beta\n") && brief.contains(API_URL));
    assert!(ws.join(".builder").is_dir());
    assert!(!ws.join("template.json").exists());
    let record = instance.sites_root().join(".driver_records/beta.json");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        "{\"driver\":\"claude_code\"}\n"
    );

    let second = instance
        .call(
            Method::POST,
            "/v1/sites",
            json!({"slug": "alpha", "name": "A", "domain": "alpha.example.org",
                   "driver": "opencode", "actor": actor()}),
        )
        .await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    assert_eq!(second.json()["manifest"]["driver"], "opencode");

    let got = instance
        .call(Method::GET, "/v1/sites/beta", Value::Null)
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["manifest"], status["manifest"]);

    let list = instance.call(Method::GET, "/v1/sites", Value::Null).await;
    assert_eq!(list.status, StatusCode::OK);
    let slugs: Vec<String> = list.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["manifest"]["slug"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(slugs, ["alpha", "beta"]);

    let caps = instance
        .call(Method::GET, "/v1/capabilities", Value::Null)
        .await;
    assert_eq!(caps.status, StatusCode::OK);
    let caps = caps.json();
    assert_eq!(caps["default_driver"], "claude_code");
    assert_eq!(
        caps["limits"],
        json!({"max_sites": 20, "max_concurrent_sessions": 2, "site_disk_quota_mb": 1024})
    );
    assert!(caps["templates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["id"] == "basic" && t["label"].is_string()));
    let ids: Vec<&str> = caps["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["claude_code", "opencode", "pi", "atelier"]);

    // Preproduction and production exist in the webspace; a plain delete leaves production.
    let webspace = instance.webspace("beta.example.org");
    let r1 = "20261201T000000000Z-000000";
    for dir in [".releases/pre", ".releases/web"] {
        std::fs::create_dir_all(webspace.join(dir).join(r1)).unwrap();
    }
    std::os::unix::fs::symlink(format!(".releases/pre/{r1}"), webspace.join("pre")).unwrap();
    std::os::unix::fs::symlink(format!(".releases/web/{r1}"), webspace.join("web")).unwrap();
    let got = instance
        .call(Method::GET, "/v1/sites/beta", Value::Null)
        .await;
    assert_eq!(got.json()["preprod"]["release"], r1);

    let deleted = instance
        .call(Method::DELETE, "/v1/sites/beta", json!({"actor": actor()}))
        .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    assert_eq!(
        deleted.json(),
        json!({"deleted": "beta", "purged_prod": false,
               "removed_surfaces": ["preprod"], "skipped_surfaces": []})
    );
    assert!(!ws.exists());
    assert!(!record.exists());
    assert!(std::fs::symlink_metadata(webspace.join("pre")).is_err());
    assert!(!webspace.join(".releases/pre").exists());
    assert!(webspace.join(".releases/web").join(r1).is_dir());
    assert!(webspace.join(".atelier_instance").exists());

    let gone = instance
        .call(Method::GET, "/v1/sites/beta", Value::Null)
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.json()["detail"], "No site named 'beta'");

    // purge_prod=true takes production too; `purge_prod=1` would not have.
    let purged = instance
        .call(
            Method::DELETE,
            "/v1/sites/alpha?purge_prod=true",
            json!({"actor": actor()}),
        )
        .await;
    assert_eq!(purged.status, StatusCode::OK, "{}", purged.body);
    assert_eq!(purged.json()["purged_prod"], true);
    assert_eq!(
        purged.json()["removed_surfaces"],
        json!(["preprod", "prod"])
    );
    let empty = instance.call(Method::GET, "/v1/sites", Value::Null).await;
    assert_eq!(empty.json(), json!({"data": []}));
}

#[tokio::test]
async fn every_create_refusal_in_the_contracts_order() {
    let instance = instance(3);
    assert_eq!(
        instance.create("gamma", "gamma.example.org").await.status,
        StatusCode::CREATED
    );
    std::fs::create_dir_all(instance.workspace("beta")).unwrap();
    std::fs::write(instance.workspace("beta/keep.txt"), "mine").unwrap();

    // (name, body, status, reason, detail fragment). Each body also breaks every later rule,
    // so the answer proves which check comes first.
    let cases: Vec<(&str, Value, u16, Option<&str>, &str)> = vec![
        (
            "actor first",
            json!({"slug": "X", "name": "", "domain": "bad"}),
            400,
            None,
            "Missing required field: actor {user_id, username}",
        ),
        (
            "1 slug grammar",
            json!({"slug": "X", "name": "", "domain": "bad", "actor": actor()}),
            400,
            None,
            "slug must be 2–40 chars, lowercase letters/digits/hyphens, starting with a letter",
        ),
        (
            "2 name",
            json!({"slug": "gamma", "name": "  ", "domain": "bad", "actor": actor()}),
            400,
            None,
            "name must be a non-empty string up to 200 chars",
        ),
        (
            "2 name too long",
            json!({"slug": "gamma", "name": "n".repeat(201), "domain": "bad", "actor": actor()}),
            400,
            None,
            "name must be a non-empty string up to 200 chars",
        ),
        (
            "3 site.json exists",
            json!({"slug": "gamma", "name": "G", "domain": "bad", "actor": actor()}),
            409,
            Some("slug_exists"),
            "gamma",
        ),
        (
            "4 domain grammar",
            json!({"slug": "undeclared", "name": "U", "domain": "bad", "actor": actor()}),
            400,
            None,
            "domain 'bad'",
        ),
        (
            "5 domain taken",
            json!({"slug": "undeclared", "name": "U", "domain": "gamma.example.org", "actor": actor()}),
            409,
            Some("domain_taken"),
            "gamma.example.org",
        ),
        (
            "6 not in the site table",
            json!({"slug": "undeclared", "name": "U", "domain": "u.example.org", "actor": actor()}),
            409,
            Some("webspace_unavailable"),
            "not declared",
        ),
        (
            "6 table domain differs",
            json!({"slug": "alpha", "name": "A", "domain": "other.example.org", "actor": actor()}),
            409,
            Some("webspace_unavailable"),
            "alpha.example.org",
        ),
        (
            "6 webspace of another instance",
            json!({"slug": "foreign", "name": "F", "domain": "foreign.example.org", "actor": actor()}),
            409,
            Some("webspace_unavailable"),
            "belongs to instance other",
        ),
        (
            "10 unknown template",
            json!({"slug": "alpha", "name": "A", "domain": "alpha.example.org",
                   "template": "nope", "actor": actor()}),
            400,
            None,
            "Unknown template 'nope'",
        ),
        (
            "11 something not a site is there",
            json!({"slug": "beta", "name": "B", "domain": "beta.example.org", "actor": actor()}),
            409,
            Some("workspace_exists"),
            "beta",
        ),
    ];
    for (name, body, status, reason, detail) in cases {
        let reply = instance.call(Method::POST, "/v1/sites", body).await;
        assert_eq!(reply.status.as_u16(), status, "case {name}: {}", reply.body);
        let problem = reply.json();
        assert_eq!(problem["reason"].as_str(), reason, "case {name}");
        assert!(
            problem["detail"].as_str().unwrap().contains(detail),
            "case {name}: {problem}"
        );
        let kind = match status {
            400 => "validation-error",
            409 => "conflict",
            _ => unreachable!(),
        };
        assert_eq!(
            problem["type"],
            format!("https://dedalo.dev/site-builder/problems/{kind}"),
            "case {name}"
        );
    }
    // The refused creates left the non-site directory alone and made nothing.
    assert_eq!(
        std::fs::read_to_string(instance.workspace("beta/keep.txt")).unwrap(),
        "mine"
    );
    assert!(!instance.workspace("alpha").exists());
    assert!(!instance.workspace("undeclared").exists());

    // 8: a held site; 9: the site limit (gamma and alpha make 2 of 3... then 3 of 3).
    let held = instance
        .router
        .sites()
        .reservations()
        .reserve("alpha", Hold::Session)
        .unwrap();
    let busy = instance.create("alpha", "alpha.example.org").await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_eq!(busy.json()["reason"], "session_running");
    drop(held);
    std::fs::remove_dir_all(instance.workspace("beta")).unwrap();
    assert_eq!(
        instance.create("alpha", "alpha.example.org").await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        instance.create("beta", "beta.example.org").await.status,
        StatusCode::CREATED
    );
    std::fs::create_dir_all(instance.root.join("www/delta.example.org")).unwrap();
    let limit = instance.create("delta", "delta.example.org").await;
    assert_eq!(
        limit.status,
        StatusCode::CONFLICT,
        "undeclared wins over the limit"
    );
    let over = instance
        .call(
            Method::POST,
            "/v1/sites",
            json!({"slug": "foreign", "name": "F", "domain": "foreign.example.org", "actor": actor()}),
        )
        .await;
    assert_eq!(over.status, StatusCode::CONFLICT);

    // With the table declaring a fourth site of ours, the limit answers.
    std::fs::write(
        instance
            .webspace("foreign.example.org")
            .join(".atelier_instance"),
        "test\n",
    )
    .unwrap();
    let over = instance
        .call(
            Method::POST,
            "/v1/sites",
            json!({"slug": "foreign", "name": "F", "domain": "foreign.example.org", "actor": actor()}),
        )
        .await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "{}", over.body);
    assert_eq!(over.json()["reason"], "max_sites");
    assert_eq!(
        over.json()["type"],
        "https://dedalo.dev/site-builder/problems/limit-exceeded"
    );
    assert!(!instance.workspace("foreign").exists());
}

#[tokio::test]
async fn the_first_commit_is_the_template_under_a_constructed_environment() {
    let instance = instance(20);
    assert_eq!(
        instance.create("alpha", "alpha.example.org").await.status,
        StatusCode::CREATED
    );
    let ws = instance.workspace("alpha");
    std::fs::write(ws.join(".builder/state.json"), "{}").unwrap();

    let head = git_out(&instance, "alpha", &["log", "--format=%an|%ae|%cn|%ce|%s"]).await;
    assert_eq!(
        head,
        "Dédalo Site Builder|site-builder@dedalo.local|Dédalo Site Builder|site-builder@dedalo.local|scaffold: initial template\n"
    );
    assert_eq!(
        git_out(&instance, "alpha", &["rev-parse", "--abbrev-ref", "HEAD"]).await,
        "main\n"
    );
    let files = git_out(
        &instance,
        "alpha",
        &["ls-tree", "-r", "--name-only", "HEAD"],
    )
    .await;
    let files: Vec<&str> = files.lines().collect();
    for want in [
        "AGENTS.md",
        "CLAUDE.md",
        "README.md",
        "build.sh",
        "site.json",
        "src/index.html",
        "src/main.js",
    ] {
        assert!(files.contains(&want), "{want} not in {files:?}");
    }
    assert!(
        files.iter().all(|f| !f.starts_with(".builder")),
        "{files:?}"
    );
    assert!(!files.contains(&"template.json"));
    let exclude = std::fs::read_to_string(ws.join(".git/info/exclude")).unwrap();
    assert!(exclude.lines().any(|l| l == "/.builder/"));

    // The tree carries the shared modes, git's own files included; .builder is traverse-only.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| {
            std::fs::symlink_metadata(ws.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("."), 0o2770);
        assert_eq!(mode(".git/objects"), 0o2770);
        assert_eq!(mode(".git/HEAD"), 0o660);
        assert_eq!(mode("src/index.html"), 0o660);
        assert_eq!(mode("site.json"), 0o660);
        assert_eq!(mode(".builder"), 0o710);
    }
    assert!(files.contains(&".gitignore"));

    // The basic template builds with nothing but a shell and cp: no network, no package manager.
    let build = Command::new("sh")
        .arg("build.sh")
        .current_dir(&ws)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(build.status.success(), "{build:?}");
    let built = std::fs::read_to_string(ws.join("dist/index.html")).unwrap();
    assert!(built.contains(API_URL));
    assert!(ws.join("dist/main.js").is_file() && ws.join("dist/style.css").is_file());

    // Only the repository's own file and our -c options configure git.
    let origins = git_out(&instance, "alpha", &["config", "--show-origin", "--list"]).await;
    for line in origins.lines() {
        assert!(
            line.starts_with("file:.git/config") || line.starts_with("command line:"),
            "{line}"
        );
    }
    assert!(
        origins.contains("command line:\tcore.hookspath=/dev/null"),
        "{origins}"
    );
}

#[tokio::test]
async fn git_runs_through_the_door_with_no_ambient_config_or_hooks_and_lists_changes() {
    use atelier_sited::git::Git;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.txt"), "a").unwrap();
    std::fs::write(ws.join("old.txt"), "old").unwrap();
    let git = Git::new(unconfined_runner(tmp.path()), Duration::from_secs(30));
    let target = atelier_sited::runs::RunTarget {
        slug: "ws".into(),
        workspace: ws.clone(),
    };
    let root = atelier_fs::Root::open(&ws).unwrap();
    git.init(&target, &root).await.unwrap();

    let log = git
        .run(&target, &["log", "--format=%an <%ae>"])
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(log.stdout).unwrap(),
        "Dédalo Site Builder <site-builder@dedalo.local>\n"
    );
    let origins = git
        .run(&target, &["config", "--show-origin", "--list"])
        .await
        .unwrap();
    let origins = String::from_utf8(origins.stdout).unwrap();
    assert!(
        origins
            .lines()
            .all(|l| l.starts_with("file:.git/config") || l.starts_with("command line:")),
        "only the repository's own and sited's: {origins}"
    );

    // A hook the agent planted in the repository never runs.
    let marker = tmp.path().join("hook-ran");
    std::fs::write(
        ws.join(".git/hooks/pre-commit"),
        format!("#!/bin/sh\ntouch {}\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        ws.join(".git/hooks/pre-commit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    assert!(!git.commit(&target, &root, "nothing").await.unwrap());
    std::fs::write(ws.join("src/a.txt"), "changed").unwrap();
    std::fs::write(ws.join("new file.txt"), "n").unwrap();
    std::fs::create_dir_all(ws.join(".builder")).unwrap();
    std::fs::write(ws.join(".builder/x"), "x").unwrap();
    git.run(&target, &["mv", "old.txt", "renamed.txt"])
        .await
        .unwrap();
    let mut changed = git.changed_files(&target).await.unwrap();
    changed.sort();
    assert_eq!(changed, ["new file.txt", "renamed.txt", "src/a.txt"]);
    assert!(git
        .commit(&target, &root, "agent: session s turn 1")
        .await
        .unwrap());
    assert!(git.changed_files(&target).await.unwrap().is_empty());
    assert!(!marker.exists(), "the planted hook ran");
}

/// A runner in `none` mode with its door HOMEs under `dir`.
fn unconfined_runner(dir: &Path) -> atelier_sited::runs::Runner {
    use atelier_sited::runs::{Mode, NoneSpawner, Runner};
    let homes = dir.join("homes");
    std::fs::create_dir_all(&homes).unwrap();
    Runner::new(Mode::None(NoneSpawner::new(
        support::workspace_bin("atelier-shim"),
        homes,
    )))
    .unwrap()
}

#[tokio::test]
async fn planted_symlinks_are_refused_and_nothing_outside_is_touched() {
    let instance = instance(20);
    assert_eq!(
        instance.create("alpha", "alpha.example.org").await.status,
        StatusCode::CREATED
    );
    let outside = instance.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "do not touch").unwrap();
    let manifest = std::fs::read_to_string(instance.workspace("alpha/site.json")).unwrap();
    std::fs::write(outside.join("site.json"), &manifest).unwrap();

    // site.json -> a file outside: the read is refused (500), never served.
    let ws = instance.workspace("alpha");
    std::fs::remove_file(ws.join("site.json")).unwrap();
    std::os::unix::fs::symlink(outside.join("site.json"), ws.join("site.json")).unwrap();
    let got = instance
        .call(Method::GET, "/v1/sites/alpha", Value::Null)
        .await;
    assert_eq!(got.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(got.json()["detail"], "Internal server error");
    let list = instance.call(Method::GET, "/v1/sites", Value::Null).await;
    assert_eq!(list.json(), json!({"data": []}));

    // .git/info -> outside: a commit refuses to write the exclusion through it.
    std::fs::rename(ws.join(".git/info"), instance.root.join("info.bak")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join(".git/info")).unwrap();
    let root = atelier_fs::Root::open(&ws).unwrap();
    let target = instance.router.sites().config().run_target("alpha");
    let err = instance
        .router
        .sites()
        .git()
        .commit(&target, &root, "x")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!outside.join("exclude").exists());

    // A whole workspace that is a link to a directory outside is no site.
    std::os::unix::fs::symlink(&outside, instance.workspace("beta")).unwrap();
    let got = instance
        .call(Method::GET, "/v1/sites/beta", Value::Null)
        .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    let del = instance
        .call(Method::DELETE, "/v1/sites/beta", json!({"actor": actor()}))
        .await;
    assert_eq!(del.status, StatusCode::NOT_FOUND);
    // The manifest behind the link is never read: the slug is taken by something not a site.
    let created = instance.create("beta", "beta.example.org").await;
    assert_eq!(
        created.json()["reason"],
        "workspace_exists",
        "{}",
        created.body
    );

    // Deleting alpha removes its links, never what they point at.
    std::os::unix::fs::symlink(&outside, ws.join("src/out")).unwrap();
    let del = instance
        .call(Method::DELETE, "/v1/sites/alpha", json!({"actor": actor()}))
        .await;
    assert_eq!(del.status, StatusCode::OK, "{}", del.body);
    assert!(!ws.exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        "do not touch"
    );
    assert!(outside.join("site.json").exists());
    assert!(std::fs::symlink_metadata(instance.workspace("beta")).is_ok());
}

#[tokio::test]
async fn a_delete_refused_while_the_site_is_held_removes_nothing() {
    let instance = instance(20);
    assert_eq!(
        instance.create("alpha", "alpha.example.org").await.status,
        StatusCode::CREATED
    );
    let webspace = instance.webspace("alpha.example.org");
    std::fs::create_dir_all(webspace.join(".releases/pre/r1")).unwrap();
    std::os::unix::fs::symlink(".releases/pre/r1", webspace.join("pre")).unwrap();
    let reservations = instance.router.sites().reservations();
    for hold in Hold::ALL {
        let held = reservations.reserve("alpha", hold).unwrap();
        let reply = instance
            .call(Method::DELETE, "/v1/sites/alpha", json!({"actor": actor()}))
            .await;
        assert_eq!(reply.status, StatusCode::CONFLICT, "{hold:?}");
        assert_eq!(reply.json()["reason"], hold.reason(), "{hold:?}");
        assert!(instance.workspace("alpha/site.json").exists(), "{hold:?}");
        assert!(instance
            .sites_root()
            .join(".driver_records/alpha.json")
            .exists());
        assert!(webspace.join(".releases/pre/r1").is_dir());
        assert!(std::fs::symlink_metadata(webspace.join("pre")).is_ok());
        if hold == Hold::Deleting {
            for path in [
                "/v1/sites/alpha",
                "/v1/sites/alpha/builds/20260101T000000000Z-000001",
            ] {
                let get = instance.call(Method::GET, path, Value::Null).await;
                assert_eq!(get.status, StatusCode::CONFLICT, "{path}");
                assert_eq!(get.json()["reason"], "site_deleting", "{path}");
            }
        }
        drop(held);
    }
    let reply = instance
        .call(Method::DELETE, "/v1/sites/alpha", json!({"actor": actor()}))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
}

#[tokio::test]
async fn mutating_routes_check_the_body_and_actor_exactly() {
    let instance = instance(20);
    let cases: Vec<(&str, Method, &str, &str, u16, &str)> = vec![
        (
            "invalid json",
            Method::POST,
            "/v1/sites",
            "{",
            400,
            "Request body must be valid JSON",
        ),
        (
            "array body",
            Method::POST,
            "/v1/sites",
            "[]",
            400,
            "Request body must be a JSON object",
        ),
        (
            "empty body",
            Method::POST,
            "/v1/sites",
            "",
            400,
            "Missing required field: actor {user_id, username}",
        ),
        (
            "string user id",
            Method::POST,
            "/v1/sites",
            r#"{"actor":{"user_id":"1","username":"a"}}"#,
            400,
            "actor.user_id must be an integer",
        ),
        (
            "empty username",
            Method::POST,
            "/v1/sites",
            r#"{"actor":{"user_id":1,"username":""}}"#,
            400,
            "actor.username must be a non-empty string",
        ),
        (
            "delete without actor",
            Method::DELETE,
            "/v1/sites/alpha",
            "{}",
            400,
            "Missing required field: actor {user_id, username}",
        ),
        (
            "delete unknown site",
            Method::DELETE,
            "/v1/sites/nosuch",
            r#"{"actor":{"user_id":1,"username":"a"}}"#,
            404,
            "No site named 'nosuch'",
        ),
        (
            "delete bad slug",
            Method::DELETE,
            "/v1/sites/..",
            r#"{"actor":{"user_id":1,"username":"a"}}"#,
            404,
            "No site named '..'",
        ),
        (
            "get escaped slug",
            Method::GET,
            "/v1/sites/%2e%2e",
            "",
            404,
            "No site named '..'",
        ),
        (
            "put on a site",
            Method::PUT,
            "/v1/sites/alpha",
            "",
            405,
            "Method PUT not allowed for /v1/sites/alpha",
        ),
    ];
    for (name, method, path, body, status, detail) in cases {
        let reply = send(
            &instance.socket,
            method,
            &format!("{BASE}{path}"),
            Some(&Instance::auth()),
            body,
        )
        .await;
        assert_eq!(reply.status.as_u16(), status, "case {name}: {}", reply.body);
        assert_eq!(reply.json()["detail"], detail, "case {name}");
    }
    let put = instance
        .call(Method::PUT, "/v1/sites/alpha", Value::Null)
        .await;
    assert_eq!(put.headers["allow"], "DELETE, GET");

    let big = "x".repeat(atelier_sited::MAX_BODY_BYTES + 1);
    let reply = send(
        &instance.socket,
        Method::POST,
        &format!("{BASE}/v1/sites"),
        Some(&Instance::auth()),
        &big,
    )
    .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn the_disk_quota_counts_the_workspace_and_the_release_stores() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("sites/alpha")).unwrap();
    let ws = root.join("www/alpha.example.org");
    std::fs::create_dir_all(ws.join(".releases/pre/r1")).unwrap();
    write_site_table(root, "test", &[("alpha", "alpha.example.org")]);
    let mut raw_settings = settings(root, 20);
    raw_settings.sites.site_disk_quota_mb = 1;
    let sites = atelier_sited::Sites::new(raw_settings.sites, unconfined_runner(root));

    std::fs::write(root.join("sites/alpha/half"), vec![0u8; 512 * 1024]).unwrap();
    assert_eq!(sites.usage_bytes("alpha").unwrap(), 512 * 1024);
    sites.check_quota("alpha", 0).unwrap();
    std::fs::write(ws.join(".releases/pre/r1/half"), vec![0u8; 512 * 1024]).unwrap();
    std::os::unix::fs::symlink("/usr", root.join("sites/alpha/usr")).unwrap();
    assert_eq!(sites.usage_bytes("alpha").unwrap(), 1024 * 1024);
    sites.check_quota("alpha", 0).unwrap();
    let err = sites.check_quota("alpha", 1).unwrap_err();
    let problem = atelier_sited::problem::ApiError::from(err);
    assert!(matches!(
        problem,
        atelier_sited::problem::ApiError::Refused(atelier_site_api::Reason::DiskQuota, _)
    ));
}

#[tokio::test]
async fn a_create_that_fails_half_way_removes_what_it_made() {
    let instance = instance(20);
    // The driver record's directory is a file: step 12 fails after the scaffold was copied.
    let records = instance.sites_root().join(".driver_records");
    std::fs::write(&records, "not a directory").unwrap();
    let failed = instance.create("alpha", "alpha.example.org").await;
    assert_eq!(
        failed.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        failed.body
    );
    assert!(std::fs::symlink_metadata(instance.workspace("alpha")).is_err());
    assert_eq!(
        std::fs::read_to_string(&records).unwrap(),
        "not a directory"
    );
    assert_eq!(instance.router.sites().reservations().holder("alpha"), None);

    std::fs::remove_file(&records).unwrap();
    let created = instance.create("alpha", "alpha.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
}

/// An engine that stops waiting mid-create (its timeout, a dropped connection) still gets a
/// whole site: the create runs to its end, its first commit and its audit line included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_caller_goes_away_runs_to_its_end() {
    let instance = instance(20);
    let socket = instance.socket.clone();
    let body = create_body("alpha", "alpha.example.org").to_string();
    let caller = tokio::spawn(async move {
        crate::support::open(&socket, Method::POST, "/v1/sites", &body).await
    });
    // The workspace is made before its two git runs fill it: the caller goes away then.
    let workspace = instance.workspace("alpha");
    for _ in 0..5000 {
        if workspace.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(workspace.exists(), "the create never began");
    caller.abort();
    assert!(
        caller.await.unwrap_err().is_cancelled(),
        "the caller went away"
    );
    crate::support::site_freed(&instance.router, "alpha").await;
    let log = git_out(&instance, "alpha", &["rev-list", "--count", "HEAD"]).await;
    assert_eq!(log, "1\n", "the first commit was made");
    let got = instance
        .call(Method::GET, "/v1/sites/alpha", Value::Null)
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let audit = instance.call(Method::GET, "/v1/audit", Value::Null).await;
    assert_eq!(
        audit.json()["data"][0]["action"],
        "create_site",
        "{}",
        audit.body
    );
}

#[tokio::test]
async fn two_creates_of_one_slug_make_one_site() {
    let instance = instance(20);
    let (a, b) = tokio::join!(
        instance.create("alpha", "alpha.example.org"),
        instance.create("alpha", "alpha.example.org")
    );
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409], "{} / {}", a.body, b.body);
    let refused = if a.status == StatusCode::CONFLICT {
        a
    } else {
        b
    };
    let reason = refused.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        ["site_initializing", "slug_exists"].contains(&reason.as_str()),
        "{reason}"
    );
    let log = git_out(&instance, "alpha", &["rev-list", "--count", "HEAD"]).await;
    assert_eq!(log, "1\n");
}

/// `GET /v1/sites`'s data as served.
async fn listed(instance: &Instance) -> Value {
    let reply = instance.call(Method::GET, "/v1/sites", Value::Null).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply.json()["data"].clone()
}

/// The site list as a sited that keeps nothing yet reads it.
fn unkept_list(root: &Path) -> Value {
    let unkept = Router::new(&settings(root, 20)).unwrap();
    serde_json::to_value(unkept.sites().list().unwrap()).unwrap()
}

/// What an agent or a build writes beside what the list reads (the site's own files in the
/// workspace, its `.git`, other entries of `.builder`) keeps the list: no answer reads the
/// files again for it, and the kept answer still equals a fresh read. The manifest edited
/// after all of them is still seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_site_list_outlives_writes_beside_what_it_read() {
    let instance = instance(20);
    let created = instance.create("alpha", "alpha.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let root = instance.root.clone();
    let sites = instance.router.sites();
    let ws = instance.workspace("alpha");
    type Change<'c> = (&'c str, Box<dyn Fn() + 'c>);
    let beside: Vec<Change<'_>> = vec![
        (
            "a page created in the workspace",
            Box::new(|| std::fs::write(ws.join("about.html"), "<h1>About</h1>").unwrap()),
        ),
        (
            "the page rewritten by rename",
            Box::new(|| {
                std::fs::write(ws.join(".about.html.tmp"), "<h1>About us</h1>").unwrap();
                std::fs::rename(ws.join(".about.html.tmp"), ws.join("about.html")).unwrap();
            }),
        ),
        (
            "a directory of sources made and written",
            Box::new(|| {
                std::fs::create_dir_all(ws.join("src/css")).unwrap();
                std::fs::write(ws.join("src/css/site.css"), "body{}").unwrap();
            }),
        ),
        (
            "the page removed",
            Box::new(|| std::fs::remove_file(ws.join("about.html")).unwrap()),
        ),
        (
            "the repository written",
            Box::new(|| std::fs::write(ws.join(".git/description"), "alpha").unwrap()),
        ),
        (
            "another entry of .builder",
            Box::new(|| {
                std::fs::create_dir_all(ws.join(".builder/cache")).unwrap();
                std::fs::write(ws.join(".builder/cache/x"), "x").unwrap();
            }),
        ),
    ];
    let served = || listed(&instance);
    let truth = || unkept_list(&root);
    assert_eq!(served().await, truth());
    for (name, change) in &beside {
        change();
        assert!(sites.list_fresh().is_some(), "{name}: the list was dropped");
        assert_eq!(served().await, truth(), "{name}");
    }
    let path = ws.join("site.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["name"] = "Renamed".into();
    std::fs::write(&path, manifest.to_string()).unwrap();
    assert!(sites.list_fresh().is_none(), "the manifest's edit not seen");
    let listed = served().await;
    assert_eq!(listed, truth());
    assert_eq!(listed[0]["manifest"]["name"], "Renamed");
}

/// The site list is kept in memory between requests; every kind of change to what it is read
/// from, by sited or by another process, is seen by the next request: it is never stale. Each
/// change must drop the kept list (so the next answer is read, not lucky), and the answer must
/// equal a list read by a sited that keeps nothing yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_site_list_is_never_stale() {
    const RELEASE: &str = "20261204T120000000Z-000000";
    const LATER: &str = "20261204T130000000Z-000000";
    let instance = instance(20);
    for slug in ["alpha", "beta"] {
        let created = instance.create(slug, &format!("{slug}.example.org")).await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    }
    let root = instance.root.clone();
    let sites = instance.router.sites();
    let record = |id: &str| {
        json!({"id": id, "outcome": "success", "started_at": "2026-12-04T12:00:00.000Z",
               "finished_at": "2026-12-04T12:00:01.000Z", "release": id, "error": null})
        .to_string()
    };
    let table_with = |rows: &[(&str, &str)]| write_site_table(&root, "test", rows);
    let www = |domain: &str| root.join("www").join(domain);
    type Change<'c> = (&'c str, Box<dyn Fn() + 'c>);
    let changes: Vec<Change<'_>> = vec![
        (
            "a manifest edited in place",
            Box::new(|| {
                let path = instance.workspace("alpha").join("site.json");
                let mut manifest: Value =
                    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                manifest["name"] = "Renamed".into();
                std::fs::write(&path, manifest.to_string()).unwrap();
            }),
        ),
        (
            "a build record added",
            Box::new(|| {
                let builds = instance.workspace("alpha").join(".builder/builds");
                std::fs::create_dir_all(&builds).unwrap();
                std::fs::write(builds.join(format!("{RELEASE}.json")), record(RELEASE)).unwrap();
            }),
        ),
        (
            "a newer build record renamed into place",
            Box::new(|| {
                let builds = instance.workspace("alpha").join(".builder/builds");
                std::fs::write(builds.join("tmp"), record(LATER)).unwrap();
                std::fs::rename(builds.join("tmp"), builds.join(format!("{LATER}.json"))).unwrap();
            }),
        ),
        (
            "a release store made and preproduction linked",
            Box::new(|| {
                let ws = www("alpha.example.org");
                std::fs::create_dir_all(ws.join(".releases/pre").join(RELEASE)).unwrap();
                std::os::unix::fs::symlink(format!(".releases/pre/{RELEASE}"), ws.join("pre"))
                    .unwrap();
            }),
        ),
        (
            "preproduction flipped to another release",
            Box::new(|| {
                let ws = www("alpha.example.org");
                std::fs::create_dir_all(ws.join(".releases/pre").join(LATER)).unwrap();
                std::os::unix::fs::symlink(format!(".releases/pre/{LATER}"), ws.join("pre.new"))
                    .unwrap();
                std::fs::rename(ws.join("pre.new"), ws.join("pre")).unwrap();
            }),
        ),
        (
            "the site table rewritten without the site",
            Box::new(|| {
                table_with(&DECLARED[1..]);
            }),
        ),
        (
            "the site table rewritten with it again",
            Box::new(|| table_with(DECLARED)),
        ),
        (
            "the release store removed",
            Box::new(|| {
                std::fs::remove_dir_all(www("alpha.example.org").join(".releases/pre")).unwrap();
            }),
        ),
        (
            "a workspace removed by another process",
            Box::new(|| {
                std::fs::remove_dir_all(instance.workspace("beta")).unwrap();
            }),
        ),
        (
            "a workspace's manifest replaced by a link",
            Box::new(|| {
                let manifest = instance.workspace("alpha").join("site.json");
                std::fs::remove_file(&manifest).unwrap();
                std::os::unix::fs::symlink("/etc/hostname", &manifest).unwrap();
            }),
        ),
    ];
    let served = || listed(&instance);
    let truth = || unkept_list(&root);
    assert_eq!(served().await, truth());
    assert!(sites.list_fresh().is_some(), "the list is kept");
    let created = instance.create("gamma", "gamma.example.org").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert!(sites.list_fresh().is_none(), "a site created through sited");
    assert_eq!(served().await, truth(), "a site created through sited");
    for (name, change) in &changes {
        assert!(
            sites.list_fresh().is_some(),
            "{name}: kept before the change"
        );
        let before = served().await;
        change();
        assert!(sites.list_fresh().is_none(), "{name}: not seen");
        let (got, want) = (served().await, truth());
        assert_eq!(got, want, "{name}");
        assert_ne!(got, before, "{name}: the change shows in the list");
    }
    // The alpha of the end: no manifest it may read, so it is left out.
    let slugs: Vec<Value> = served()
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["manifest"]["slug"].clone())
        .collect();
    assert_eq!(slugs, [json!("gamma")]);

    // A session's state is not part of the kept list: it is current on every answer.
    sites.set_session_state("gamma", "running", "5d9c1f2e-0000-4000-8000-000000000000");
    assert!(sites.list_fresh().is_some());
    let listed = served().await;
    assert_eq!(
        listed[0]["session"],
        json!({"state": "running", "session_id": "5d9c1f2e-0000-4000-8000-000000000000"})
    );
}
