//! The binary run the way a developer runs it: settings refused by name (the CMS origin too),
//! the bind fallback, a turn refused without a stored credential, SIGTERM, state kept across
//! runs, and the `purge` subcommand run beside a serving chatd.

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixStream;

const TOKEN: &str = "test-service-token-000000000000000000000000";

/// Kills the daemon if a test fails before it stops it.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_atelier-chatd"));
    command
        .arg("--listen")
        .arg(dir.join("chatd.sock"))
        .arg("--database")
        .arg(dir.join("chat.sqlite3"))
        .arg("--token-file")
        .arg(dir.join("token"))
        .env_remove("CREDENTIALS_DIRECTORY")
        .env_remove("LISTEN_FDS")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("CHATD_DATABASE")
        .env_remove("CHATD_PUBLIC_ORIGIN")
        .env_remove("CHATD_CMS_ORIGIN");
    command
}

async fn start(dir: &Path) -> Daemon {
    let socket = dir.join("chatd.sock");
    let _ = std::fs::remove_file(&socket);
    let child = command(dir)
        .args(["--public-origin", "https://cms.example"])
        .env("CHATD_CMS_ORIGIN", support::cms_origin())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = Daemon(child);
    for _ in 0..400 {
        if UnixStream::connect(&socket).await.is_ok() {
            return daemon;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("chatd never listened");
}

async fn stop(mut daemon: Daemon) {
    let pid = daemon.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    for _ in 0..400 {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("chatd did not exit after SIGTERM");
}

async fn call(socket: &Path, method: Method, path: &str, body: Value) -> (StatusCode, String) {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "chatd")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("cookie", support::cookie_for("alice", "ai.chat"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[test]
fn an_unknown_setting_is_refused_by_name_with_the_configuration_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    let output = command(dir.path())
        .env("CHATD_PUBLIC_ORIGN", "https://cms.example")
        .env("CHATD_OPENAI_URL", "api.openai.test")
        .output()
        .unwrap();
    // 78: the unit's RestartPreventExitStatus=, so a bad setting is not restarted in a loop.
    assert_eq!(output.status.code(), Some(78), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nothing was started"), "{stderr}");
    // Every problem at once, the missing origins too.
    assert!(stderr.contains("4 problems: "), "{stderr}");
    assert!(stderr.contains("CHATD_PUBLIC_ORIGN"), "{stderr}");
    assert!(
        stderr.contains("CHATD_OPENAI_URL \"api.openai.test\""),
        "{stderr}"
    );
}

#[test]
fn a_cms_origin_off_loopback_or_missing_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    for (name, origin) in [
        ("missing", None),
        ("a host name", Some("http://cms.example:3001")),
        ("off the machine", Some("http://192.0.2.7:3001")),
    ] {
        let mut command = command(dir.path());
        command.args(["--public-origin", "https://cms.example"]);
        if let Some(origin) = origin {
            command.env("CHATD_CMS_ORIGIN", origin);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(78), "{name}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("CHATD_CMS_ORIGIN"), "{name}: {stderr}");
    }
}

#[tokio::test]
async fn the_binary_serves_stops_on_sigterm_and_keeps_its_state() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let socket = dir.path().join("chatd.sock");

    let daemon = start(dir.path()).await;
    let (status, body) = call(
        &socket,
        Method::POST,
        "/admin/api/ai/conversations",
        json!({"scope": "data", "credentialId": "c", "modelId": "m"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["conversation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The production providers run a turn on the conversation's stored credential only.
    let (status, body) = call(
        &socket,
        Method::POST,
        "/admin/api/ai/chat/data",
        json!({"conversationId": id, "content": [{"kind": "text", "text": "hello"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"error": "Credential not found or no longer accessible."})
    );
    let (status, _) = call(
        &socket,
        Method::PUT,
        &format!("/admin/api/ai/conversations/{id}"),
        json!({"title": "hello"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    stop(daemon).await;

    let daemon = start(dir.path()).await;
    let (status, body) = call(
        &socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let conversation: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(conversation["conversation"]["title"], "hello");
    assert_eq!(conversation["conversation"]["messages"], json!([]));
    stop(daemon).await;
}

/// Runs `atelier-chatd purge` on the database in `dir` with `args`; its stdout as JSON.
fn purge(dir: &Path, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_atelier-chatd"))
        .arg("purge")
        .arg("--database")
        .arg(dir.join("chat.sqlite3"))
        .args(args)
        .env_remove("CHATD_DATABASE")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn purge_removes_conversations_deleted_over_30_days_ago_while_chatd_serves() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), TOKEN).unwrap();
    let socket = dir.path().join("chatd.sock");
    let database = dir.path().join("chat.sqlite3");
    let daemon = start(dir.path()).await;

    let mut ids = Vec::new();
    for _ in ["31 days ago", "29 days ago", "live"] {
        let (status, body) = call(
            &socket,
            Method::POST,
            "/admin/api/ai/conversations",
            json!({"scope": "site", "credentialId": "c", "modelId": "m"}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        ids.push(body["conversation"]["id"].as_str().unwrap().to_owned());
    }
    let (old, recent, live) = (&ids[0], &ids[1], &ids[2]);
    // A message in each, written beside the serving chatd.
    let store = atelier_chatd::store::Store::open(&database).unwrap();
    for id in &ids {
        store
            .append_message(
                id,
                &atelier_chatd::store::NewMessage {
                    role: atelier_chatd::store::Role::User,
                    content: vec![atelier_chatd::store::ContentBlock::Text {
                        text: "hello".into(),
                    }],
                    tool_call: None,
                },
            )
            .unwrap();
    }
    drop(store);
    for id in [old, recent] {
        let (status, _) = call(
            &socket,
            Method::DELETE,
            &format!("/admin/api/ai/conversations/{id}"),
            Value::Null,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
    // Backdate the deletions, spelled as chatd writes them.
    let sql = rusqlite::Connection::open(&database).unwrap();
    let ago = |days: i64| {
        let ts = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(days * 24);
        atelier_chatd::audit::iso_millis(ts)
    };
    for (id, days) in [(old, 31), (recent, 29)] {
        sql.execute(
            "UPDATE ai_conversations SET deleted_at = ?2 WHERE id = ?1",
            rusqlite::params![id, ago(days)],
        )
        .unwrap();
    }
    let rows = |table: &str, column: &str, id: &str| -> i64 {
        sql.query_row(
            &format!("SELECT count(*) FROM {table} WHERE {column} = ?1"),
            [id],
            |row| row.get(0),
        )
        .unwrap()
    };

    assert_eq!(
        purge(dir.path(), &[]),
        json!({"conversations": 1, "messages": 1})
    );
    assert_eq!(rows("ai_conversations", "id", old), 0, "31 days ago: gone");
    assert_eq!(rows("ai_messages", "conversation_id", old), 0);
    assert_eq!(
        rows("ai_conversations", "id", recent),
        1,
        "29 days ago: kept"
    );
    assert_eq!(rows("ai_messages", "conversation_id", recent), 1);
    // The live conversation still answers through the serving chatd.
    let (status, body) = call(
        &socket,
        Method::GET,
        &format!("/admin/api/ai/conversations/{live}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["conversation"]["messages"].as_array().unwrap().len(),
        1
    );

    // A shorter retention reaches the recent one too; nothing twice.
    assert_eq!(
        purge(dir.path(), &["--older-than-days", "28"]),
        json!({"conversations": 1, "messages": 1})
    );
    assert_eq!(rows("ai_conversations", "id", recent), 0);
    assert_eq!(
        purge(dir.path(), &["--older-than-days", "28"]),
        json!({"conversations": 0, "messages": 0})
    );
    stop(daemon).await;
}

#[test]
fn purge_refuses_a_database_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_atelier-chatd"))
        .args(["purge", "--database"])
        .arg(dir.path().join("missing.sqlite3"))
        .env_remove("CHATD_DATABASE")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no database at"), "{stderr}");
    assert!(!dir.path().join("missing.sqlite3").exists());
}
