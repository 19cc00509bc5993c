//! sited over a real unix socket: the routes and the bearer gate through the library's router,
//! and the binary itself run the way a developer runs it (bind fallback, SIGTERM, exit 0).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions panic on broken fixtures by design"
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use atelier_sited::{instance_fingerprint, RawSettings, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

const TOKEN: &str = "test-service-token-000000000000000000000000";
const BASE: &str = "/publication/site_builder";

struct Reply {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: String,
}

async fn request(socket: &Path, method: Method, path: &str, auth: Option<&str>) -> Reply {
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
        .send_request(builder.body(Empty::<Bytes>::new()).unwrap())
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

/// Serves the router on a fresh socket; the server stops when the test's runtime ends.
fn serve_router(dir: &Path) -> std::path::PathBuf {
    let socket = dir.join("sited.sock");
    let settings = RawSettings {
        instance: "test".into(),
        service_token: Some(TOKEN.into()),
        ..RawSettings::default()
    }
    .validate()
    .unwrap();
    let router = Router::new(&settings);
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(atelier_http::serve(
        listener.into(),
        move |request| {
            let router = router.clone();
            async move { router.handle(request).await }
        },
        std::future::pending(),
        Duration::from_secs(1),
    ));
    socket
}

#[tokio::test]
async fn health_is_public_and_carries_the_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let socket = serve_router(dir.path());
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
    let dir = tempfile::tempdir().unwrap();
    let socket = serve_router(dir.path());
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
    let dir = tempfile::tempdir().unwrap();
    let socket = serve_router(dir.path());
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
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nothing was started"), "{stderr}");
}

#[tokio::test]
async fn the_binary_serves_on_its_fallback_socket_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sited.sock");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_atelier-sited"))
        .args(["--instance", "test", "--listen"])
        .arg(&socket)
        .arg("--token-file")
        .arg(&token_file)
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
