//! Pairing as the engine pairs: the `/health` fingerprint is checked before the first byte of
//! any other call; a mismatch sends nothing else; a token rotated after pairing meets sited's
//! 401; no answer is `unreachable` or `timeout`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_site_client::{instance_fingerprint, Error, Mismatch, Route};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::ctl::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_succeeds_once_then_every_call_carries_the_token_and_actor() {
    let instance = support::instance().await;
    let client = instance.client();
    assert!(!client.is_paired());
    let caps = client.capabilities().await.unwrap();
    assert!(client.is_paired());
    let ids: Vec<&str> = caps.drivers.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["claude_code", "opencode", "pi", "atelier"]);
    client.list_sites().await.unwrap();
    let health = client.pair().await.unwrap();
    assert_eq!(health.service, "dedalo-site-builder");
    assert_eq!(
        health.instance_fingerprint,
        instance_fingerprint("test", support::TOKEN)
    );

    let seen = instance.seen();
    let paths: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("GET", "/publication/site_builder/health"),
            ("GET", "/publication/site_builder/v1/capabilities"),
            ("GET", "/publication/site_builder/v1/sites"),
            ("GET", "/publication/site_builder/health"),
        ],
        "one pairing, remembered; `pair` asks again"
    );
    for request in &seen {
        assert_eq!(request.header("host"), Some("site-builder.invalid"));
        if request.path.ends_with("/health") {
            for header in ["authorization", "x-dedalo-user-id", "x-dedalo-username"] {
                assert_eq!(
                    request.header(header),
                    None,
                    "the pairing sends no {header}"
                );
            }
        } else {
            let bearer = format!("Bearer {}", support::TOKEN);
            assert_eq!(request.header("authorization"), Some(bearer.as_str()));
            assert_eq!(request.header("x-dedalo-user-id"), Some("42"));
            assert_eq!(request.header("x-dedalo-username"), Some("ana"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatched_fingerprint_refuses_and_nothing_else_reaches_sited() {
    let instance = support::instance().await;
    let cases: &[(&str, &str, &str)] = &[
        (
            "another token",
            "test",
            "another-token-0000000000000000000000000",
        ),
        ("another instance", "museum", support::TOKEN),
    ];
    for (name, inst, token) in cases {
        let before = instance.seen().len();
        let client = instance.client_with(inst, token);
        let error = client
            .create_site(atelier_site_client::NewSite {
                slug: atelier_site_client::Slug::parse("alpha").unwrap(),
                name: "Alpha".into(),
                domain: "alpha.example.org".into(),
                template: None,
                driver: None,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::InstanceMismatch {
                    why: Mismatch::Different,
                    ..
                }
            ),
            "{name}: {error}"
        );
        assert_eq!(error.code(), "instance_mismatch");
        assert!(
            !error.to_string().contains(token),
            "{name}: the token never shows"
        );
        let after = instance.seen();
        let sent: Vec<&str> = after[before..].iter().map(|s| s.path.as_str()).collect();
        assert_eq!(sent, ["/publication/site_builder/health"], "{name}");
        assert!(!client.is_paired(), "{name}: a failure is not remembered");
    }
    assert!(
        !instance.root.join("sites/alpha").exists(),
        "the create never happened"
    );
}

/// A fake daemon that records every byte it receives and answers each request with `answer`
/// (or never, when `None`).
struct Recorder {
    socket: PathBuf,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

async fn recorder(dir: &Path, answer: Option<(&'static str, String)>) -> Recorder {
    let socket = dir.join("fake.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&received);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let log = Arc::clone(&log);
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head (the pairing has no body), then everything else that comes.
                while !bytes.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => bytes.extend_from_slice(&buf[..n]),
                    }
                }
                log.lock().unwrap().push(bytes.clone());
                let Some((status, body)) = answer else {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let index = log.lock().unwrap().len() - 1;
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => log.lock().unwrap()[index].extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    Recorder { socket, received }
}

fn client_of(socket: &Path, token: &str) -> atelier_site_client::Client {
    atelier_site_client::Client::new(
        atelier_site_client::Target {
            socket: socket.to_owned(),
            base_path: atelier_site_client::BasePath::default(),
            instance: atelier_layout::InstanceName::new("example").unwrap(),
            token: atelier_site_client::ServiceToken::new(token, "test").unwrap(),
        },
        atelier_site_client::Actor::new(1, "ops").unwrap(),
    )
    .with_timeout(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_bytes_a_refused_pairing_sends_are_one_unauthenticated_health_request() {
    let token = "x".repeat(32);
    let good = instance_fingerprint("example", &token);
    let cases: Vec<(&str, String, Mismatch)> = vec![
        (
            "different",
            format!(
                r#"{{"status":"ok","instance_fingerprint":"{}"}}"#,
                instance_fingerprint("example", "other")
            ),
            Mismatch::Different,
        ),
        (
            "uppercase",
            format!(r#"{{"instance_fingerprint":"{}"}}"#, good.to_uppercase()),
            Mismatch::Different,
        ),
        (
            "missing",
            r#"{"status":"ok","service":"dedalo-site-builder"}"#.into(),
            Mismatch::Missing,
        ),
        (
            "not a string",
            r#"{"instance_fingerprint":42}"#.into(),
            Mismatch::Missing,
        ),
        ("not JSON", "ok".into(), Mismatch::Missing),
    ];
    for (name, body, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let fake = recorder(dir.path(), Some(("200 OK", body))).await;
        let client = client_of(&fake.socket, &token);
        let error = client
            .delete_site(&atelier_site_client::Slug::parse("alpha").unwrap(), true)
            .await
            .unwrap_err();
        match error {
            Error::InstanceMismatch { why, .. } => assert_eq!(why, want, "{name}"),
            other => panic!("{name}: {other}"),
        }
        drop(client);
        // Give a stray connection every chance to arrive before counting.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let received = fake.received.lock().unwrap().clone();
        assert_eq!(received.len(), 1, "{name}: one connection");
        let text = String::from_utf8(received[0].clone()).unwrap();
        assert!(
            text.starts_with("GET /publication/site_builder/health HTTP/1.1\r\n"),
            "{name}: {text:?}"
        );
        assert_eq!(
            text.matches("HTTP/1.1").count(),
            1,
            "{name}: one request: {text:?}"
        );
        let lower = text.to_ascii_lowercase();
        assert!(
            lower.contains("\r\nhost: site-builder.invalid\r\n"),
            "{name}: {text:?}"
        );
        for absent in ["authorization", "x-dedalo", "delete", "actor", &token] {
            assert!(
                !lower.contains(absent),
                "{name}: {absent} was sent: {text:?}"
            );
        }
    }
}

/// A sited that answers the pairing with a refusal was reached: the client says what sited
/// said (here, a base path it does not serve `/health` under), not that it is unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_refused_with_a_problem_keeps_sited_s_answer() {
    let instance = support::instance().await;
    let client = atelier_site_client::Client::new(
        atelier_site_client::Target {
            base_path: atelier_site_client::BasePath::parse("/elsewhere").unwrap(),
            ..instance.client().target().clone()
        },
        atelier_site_client::Actor::new(1, "ops").unwrap(),
    );
    let error = client.capabilities().await.unwrap_err();
    let problem = error
        .problem()
        .unwrap_or_else(|| panic!("a problem: {error}"));
    assert_eq!(problem.status, 401, "{error}");
    assert!(
        error.to_string().contains("Missing bearer token"),
        "{error}"
    );
    assert_eq!(instance.seen().len(), 1, "nothing but the pairing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_is_unreachable_or_a_timeout() {
    let token = "x".repeat(32);
    let dir = tempfile::tempdir().unwrap();

    let missing = client_of(&dir.path().join("absent.sock"), &token);
    let error = missing.capabilities().await.unwrap_err();
    assert_eq!(error.code(), "unreachable", "{error}");
    // Each failure to connect says what to look at.
    assert!(
        error.to_string().contains(
            "nothing is there: check --socket, and that the daemon's socket unit is active \
             (systemctl status atelier-sited@example.socket)"
        ),
        "the instance's own unit: {error}"
    );
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let error = client_of(&stale, &token).capabilities().await.unwrap_err();
    assert_eq!(error.code(), "unreachable", "{error}");
    assert!(
        error.to_string().contains(
            "no one accepts on it: its socket unit is stopped; start it (systemctl start \
             atelier-sited@example.socket) and see journalctl -u atelier-sited@example.service"
        ),
        "{error}"
    );

    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    let unhealthy = recorder(
        &dir.path().join("b"),
        Some(("503 Service Unavailable", "{}".into())),
    )
    .await;
    let error = client_of(&unhealthy.socket, &token)
        .capabilities()
        .await
        .unwrap_err();
    assert_eq!(error.code(), "unreachable", "{error}");
    assert!(error.to_string().contains("503"), "{error}");

    std::fs::create_dir_all(dir.path().join("c")).unwrap();
    let silent = recorder(&dir.path().join("c"), None).await;
    let error = client_of(&silent.socket, &token)
        .capabilities()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_rotated_after_pairing_meets_the_401_problem() {
    let instance =
        support::instance_with(support::TOKEN, "rotated-token-00000000000000000000000000").await;
    let client = instance.client();
    let error = client.send(&Route::ListSites).await.unwrap_err();
    let problem = error.problem().expect("a problem");
    assert_eq!(problem.status, 401);
    assert_eq!(problem.title, "Unauthorized");
    assert_eq!(
        problem.r#type,
        "https://dedalo.dev/site-builder/problems/unauthorized"
    );
    assert_eq!(problem.reason, None);
    assert_eq!(problem.detail, "Invalid bearer token");
    assert!(client.is_paired(), "the pairing itself succeeded");

    let out = instance.ctl(&["sites", "list"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "error: Unauthorized (401): Invalid bearer token\n"
    );
}
