//! The CMS stand-in's binary as a systemd test or a demo runs it: started on a loopback port, its
//! two users told apart by their session cookies, anything else refused as the CMS refuses it,
//! and a non-loopback address refused before anything listens.

use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use atelier_lab_model::cms::{CLIENT_COOKIE, EDITOR_COOKIE, MFA_PENDING_COOKIE, SESSION_COOKIE};
use serde_json::{json, Value};

/// The stand-in, killed when dropped.
struct Cms(Child);

impl Drop for Cms {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_binary_answers_me_for_its_users_and_refuses_the_rest() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_atelier-lab-cms"))
        .args(["--listen", &addr.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let _cms = Cms(child);
    assert_eq!(ready.trim(), format!("listening on {addr}"));

    let client = reqwest::Client::new();
    let me = |cookie: Option<String>| {
        let mut request = client.get(format!("http://{addr}/admin/api/cms/me"));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, editor) = me(Some(format!("a=1; {SESSION_COOKIE}={EDITOR_COOKIE}"))).await;
    assert_eq!(status, 200);
    let capabilities = editor["capabilities"].as_array().unwrap();
    assert!(
        capabilities.contains(&json!("ai.chat")) && capabilities.contains(&json!("ai.tools.write"))
    );
    assert_eq!(editor["user"]["id"], "usr_lab_editor_000000");
    assert_eq!(editor["role"]["capabilities"], editor["capabilities"]);

    let (status, client_user) = me(Some(format!("{SESSION_COOKIE}={CLIENT_COOKIE}"))).await;
    assert_eq!(status, 200);
    assert_ne!(client_user["user"]["id"], editor["user"]["id"]);
    assert!(!client_user["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("ai.chat")));

    for (name, cookie, error) in [
        ("no cookie", None, "Unauthorized"),
        (
            "unknown cookie",
            Some(format!("{SESSION_COOKIE}=nobody")),
            "Unauthorized",
        ),
        (
            "empty cookie",
            Some(format!("{SESSION_COOKIE}=")),
            "Unauthorized",
        ),
        (
            "mfa pending",
            Some(format!("{SESSION_COOKIE}={MFA_PENDING_COOKIE}")),
            "mfa_required",
        ),
    ] {
        assert_eq!(me(cookie).await, (401, json!({ "error": error })), "{name}");
    }
}

#[test]
fn a_non_loopback_address_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_atelier-lab-cms"))
        .args(["--listen", "0.0.0.0:3001"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
}
