//! What sited's integration tests share: an instance's settings in `none` confinement, with the
//! real shim and the scripted test agent as Claude Code.

use std::path::Path;

use atelier_sited::RawSettings;
pub use atelier_test_support::workspace::{bin as workspace_bin, templates_dir};

/// The service token every test instance uses.
pub const TOKEN: &str = "test-service-token-000000000000000000000000";

/// Settings of instance `test` under `root` (sites/, audit/, agents/, sites.json): unconfined
/// runs through the real shim, the scripted agent standing in for Claude Code.
pub fn raw_settings(root: &Path) -> RawSettings {
    RawSettings {
        instance: "test".into(),
        service_token: Some(TOKEN.into()),
        sites_root: Some(root.join("sites")),
        audit_dir: Some(root.join("audit")),
        site_table_file: Some(root.join("sites.json")),
        publication_api_url: Some("https://api.example.org/publication/v2".into()),
        templates_dir: Some(templates_dir()),
        agent_confinement: Some("none".into()),
        deployment: Some("development".into()),
        agent_state_root: Some(root.join("agents")),
        shim_bin: Some(workspace_bin("atelier-shim")),
        // The scripted stand-in: the contract needs every ending on demand (hang, crash, a
        // given output size, no result line), which no real CLI can be made to show.
        claude_code_bin: Some(workspace_bin("atelier-test-agent")),
        build_bin: Some(workspace_bin("atelier-build")),
        ..RawSettings::default()
    }
}

/// Makes the roots `raw_settings` names, marked for instance `test`.
pub fn make_roots(root: &Path) {
    for sub in ["sites", "audit", "agents"] {
        std::fs::create_dir_all(root.join(sub)).expect("a root");
    }
    std::fs::write(root.join("sites/.atelier_instance"), "test\n").expect("the marker");
}

/// The engine's mount prefix.
pub const BASE: &str = "/publication/site_builder";

/// A reply read whole.
pub struct Reply {
    /// The status.
    pub status: hyper::StatusCode,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends one authenticated request over `socket` and returns the response head and body stream.
pub async fn open(
    socket: &Path,
    method: hyper::Method,
    path: &str,
    body: &str,
) -> hyper::Response<hyper::body::Incoming> {
    open_with(socket, method, path, body, &[]).await
}

/// [`open`] with `headers` added to the request.
pub async fn open_with(
    socket: &Path,
    method: hyper::Method,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> hyper::Response<hyper::body::Incoming> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("{BASE}{path}"))
        .header("host", "sited")
        .header("authorization", format!("Bearer {TOKEN}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .expect("a request");
    sender.send_request(request).await.expect("a response")
}

/// Sends one authenticated request with a JSON body (none when `body` is null).
pub async fn call(
    socket: &Path,
    method: hyper::Method,
    path: &str,
    body: serde_json::Value,
) -> Reply {
    use http_body_util::BodyExt as _;
    let text = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let response = open(socket, method, path, &text).await;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("UTF-8"),
    }
}

/// Follows a session's stream from `after` until the server closes it (at most `wait`), and
/// returns the stored events' JSON in order; an `event: error` frame is returned as its data.
pub async fn follow_events(
    socket: &Path,
    id: &str,
    after: i64,
    wait: std::time::Duration,
) -> Vec<serde_json::Value> {
    use http_body_util::BodyExt as _;
    let response = open(
        socket,
        hyper::Method::GET,
        &format!("/v1/sessions/{id}/events?after={after}"),
        "",
    )
    .await;
    assert_eq!(response.status(), hyper::StatusCode::OK);
    let body = tokio::time::timeout(wait, response.into_body().collect())
        .await
        .expect("the stream closes in time")
        .expect("the stream")
        .to_bytes();
    let mut parser = atelier_sse::SseParser::new();
    let items = parser.push(&body).expect("a well-formed stream");
    parser.finish().expect("the stream ends with a whole frame");
    items
        .into_iter()
        .filter_map(|item| match item {
            atelier_sse::SseItem::Frame(frame) => {
                Some(serde_json::from_str(&frame.data).expect("JSON data"))
            }
            atelier_sse::SseItem::Comment(_) => None,
        })
        .collect()
}

/// The actor every test mutation names.
pub fn actor() -> serde_json::Value {
    serde_json::json!({"user_id": 42, "username": "ana"})
}

/// `POST /v1/sites` of `slug` at `domain`, as the engine creates a site (named after its slug).
pub async fn create_site(socket: &Path, slug: &str, domain: &str) -> Reply {
    let body = serde_json::json!({"slug": slug, "name": slug, "domain": domain, "actor": actor()});
    call(socket, hyper::Method::POST, "/v1/sites", body).await
}

/// `POST /v1/sites/alpha/sessions` with `prompt`, as the engine starts a session.
pub async fn start_session(socket: &Path, prompt: impl Into<String>) -> Reply {
    let body = serde_json::json!({"prompt": prompt.into(), "actor": actor()});
    call(
        socket,
        hyper::Method::POST,
        "/v1/sites/alpha/sessions",
        body,
    )
    .await
}

/// `DELETE` of `path` (a site, with its query), as the engine deletes a site.
pub async fn delete_site(socket: &Path, path: &str) -> Reply {
    let body = serde_json::json!({"actor": actor()});
    call(socket, hyper::Method::DELETE, path, body).await
}

/// Writes a stamped `sites.json` declaring `sites` (slug, domain), each with a webspace under
/// `<root>/www/<domain>` marked for instance `owner` ("test" unless the domain starts with
/// "foreign").
pub fn declare_sites(root: &Path, sites: &[(&str, &str)]) {
    use serde_json::json;
    use sha2::Digest as _;
    let rows: Vec<serde_json::Value> = sites
        .iter()
        .map(|(slug, domain)| {
            let ws = root.join("www").join(domain);
            std::fs::create_dir_all(&ws).expect("a webspace");
            let owner = if domain.starts_with("foreign") { "other" } else { "test" };
            std::fs::write(ws.join(".atelier_instance"), format!("{owner}\n")).expect("a marker");
            for store in [".releases/pre", ".releases/web"] {
                std::fs::create_dir_all(ws.join(store)).expect("a release store");
            }
            let ws = ws.to_str().expect("UTF-8");
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
        "version": 1, "instance": "test", "webspace_base": root.join("www"), "sites": rows,
    }))
    .expect("JSON")
        + "\n";
    let stamp = format!(
        "// atelier-provision: test sites {}\n",
        hex::encode(sha2::Sha256::digest(body.as_bytes()))
    );
    std::fs::write(root.join("sites.json"), stamp + &body).expect("sites.json");
}

/// The arguments that run sited's binary on the instance under `root` (made by `make_roots`
/// and `declare_sites`), bound to `socket`, in development mode with the shim and the test
/// agent.
pub fn sited_args(root: &Path, socket: &Path) -> Vec<std::ffi::OsString> {
    let token = root.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("the token file");
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    let mut flag = |name: &str, value: &std::ffi::OsStr| {
        args.push(name.into());
        args.push(value.to_owned());
    };
    flag("--instance", "test".as_ref());
    flag("--deployment", "development".as_ref());
    flag("--agent-confinement", "none".as_ref());
    flag("--listen", socket.as_os_str());
    flag("--token-file", token.as_os_str());
    flag("--sites-root", root.join("sites").as_os_str());
    flag("--audit-dir", root.join("audit").as_os_str());
    flag("--site-table-file", root.join("sites.json").as_os_str());
    flag(
        "--publication-api-url",
        "https://api.example.org/publication/v2".as_ref(),
    );
    flag("--templates-dir", templates_dir().as_os_str());
    flag("--agent-state-root", root.join("agents").as_os_str());
    flag("--shim-bin", workspace_bin("atelier-shim").as_os_str());
    // The same scripted stand-in, for the same reason, as the binary's flag.
    flag(
        "--claude-code-bin",
        workspace_bin("atelier-test-agent").as_os_str(),
    );
    flag("--build-bin", workspace_bin("atelier-build").as_os_str());
    args
}

/// Waits until nothing holds site `slug` (a turn's or a create's task frees it last), at most
/// ten seconds, and fails the test if something still does.
pub async fn site_freed(router: &atelier_sited::Router, slug: &str) {
    let holder = || router.sites().reservations().holder(slug);
    for _ in 0..1000 {
        if holder().is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(holder(), None, "{slug} stayed held");
}

/// Serves `router` on a fresh unix socket at `socket` until the test's runtime ends.
pub fn serve(router: atelier_sited::Router, socket: &Path) {
    let listener = tokio::net::UnixListener::bind(socket).expect("binding the test socket");
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request| {
            let router = router.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        std::time::Duration::from_secs(1),
    ));
}
