//! A whole site-editing turn over chatd's real socket: the scripted model lists documents
//! (answered by chatd), reads one and inserts HTML with a <style> block and a script (run by
//! the scripted browser, which gets the script and handler stripped), lists documents again
//! (seeing the snapshot the browser posted with its last result), applies CSS, and replies.
//! The stream, the bridge traffic, what the model was sent and the persisted history are
//! checked against the reference's shapes.

use crate::support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::{
    last_tool_result, scripted, send, serve_in_process, text_round, tool_round, Answer,
};
use atelier_chatd::prompts::SITE_PREFIX;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const CAPS: &str = "ai.chat,ai.tools.write,site.read,site.structure.edit,site.style.edit";

const INSERTED: &str = "<section class=\"hero\"><style>.hero { color: var(--brand) } .hero a:hover { color: red }</style><h1 onclick=\"steal()\">Welcome</h1><script>alert(1)</script><a href=\"javascript:steal()\">Go</a></section>";
const CSS: &str = ".hero { padding: var(--space-m) !important }";

#[tokio::test]
async fn a_site_editing_turn_runs_reads_here_and_writes_in_the_browser() {
    let rounds: Vec<Vec<String>> = vec![
        tool_round("call_1", "site_list_documents", &json!({})),
        tool_round(
            "call_2",
            "site_read_document",
            &json!({"document": {"type": "page", "id": "p-home"}}),
        ),
        tool_round(
            "call_3",
            "site_insert_html",
            &json!({"parentId": "n-root", "html": INSERTED, "index": 0}),
        ),
        tool_round("call_4", "site_list_documents", &json!({})),
        tool_round(
            "call_5",
            "site_apply_css",
            &json!({"operation": "merge", "css": CSS}),
        ),
        text_round("Added a hero section in the brand colour."),
    ];
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    let provider = scripted(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        Answer::Sse {
            frames: rounds[n.min(rounds.len() - 1)].clone(),
            hang: false,
        }
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let socket = serve_in_process(dir.path(), support::cms_origin(), &provider.base_url);

    let reply = send(
        &socket,
        "alice",
        CAPS,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(&json!({"scope": "site", "credentialId": "c", "modelId": "m"})),
    )
    .await;
    let id = reply.json().await["conversation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let snapshot: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/site_snapshot.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut after_insert = snapshot.clone();
    after_insert["site"]["pages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "p-landing", "title": "Landing", "slug": "landing", "rootNodeId": "n-landing"}));

    let mut stream = send(
        &socket,
        "alice",
        CAPS,
        Method::POST,
        "/admin/api/ai/chat/site",
        Some(&json!({"conversationId": id, "content": [{"kind": "text", "text": "Add a hero"}], "snapshot": snapshot})),
    )
    .await;
    assert_eq!(stream.status, StatusCode::OK);
    let (mut events, mut requests) = (Vec::new(), Vec::new());
    let mut bridge = String::new();
    while let Some(event) = stream.line().await {
        match event["type"].as_str().unwrap() {
            "bridgeReady" => bridge = event["bridgeId"].as_str().unwrap().to_owned(),
            "toolRequest" => {
                let (result, posted) = match event["toolName"].as_str().unwrap() {
                    "site_read_document" => (
                        json!({"ok": true, "data": {"html": "<main uid=\"n-root\"></main>", "css": "", "pageInfo": {"part": 1, "totalParts": 1, "nextPart": null}}}),
                        None,
                    ),
                    "site_insert_html" => (
                        json!({"ok": true, "data": {"nodeIds": ["n-hero"]}}),
                        Some(after_insert.clone()),
                    ),
                    "site_apply_css" => (json!({"ok": true, "data": {"cssRulesUpdated": 1}}), None),
                    other => panic!("unexpected browser tool {other}"),
                };
                let mut body =
                    json!({"bridgeId": bridge, "requestId": event["requestId"], "result": result});
                if let Some(posted) = posted {
                    body["snapshot"] = posted;
                }
                let answer = send(
                    &socket,
                    "alice",
                    CAPS,
                    Method::POST,
                    "/admin/api/ai/tool-result",
                    Some(&body),
                )
                .await;
                assert_eq!(answer.status, StatusCode::OK);
                requests.push(event.clone());
            }
            _ => {}
        }
        events.push(event);
    }
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let server_call = ["toolCall", "context", "toolResult"];
    let browser_call = ["toolCall", "context", "toolRequest", "toolResult"];
    let mut expected = vec!["bridgeReady"];
    for round in [
        &server_call[..],
        &browser_call,
        &browser_call,
        &server_call,
        &browser_call,
    ] {
        expected.extend_from_slice(round);
    }
    expected.extend_from_slice(&["text", "context", "usage", "done"]);
    assert_eq!(kinds, expected);
    assert!(
        events
            .iter()
            .filter(|e| e["type"] == "toolResult")
            .all(|e| e["ok"] == true),
        "{events:?}"
    );

    // The bridge traffic: inputs validated and cleaned, the payload stripped, CSS as written.
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[0]["input"],
        json!({"document": {"type": "page", "id": "p-home"}})
    );
    let html = requests[1]["input"]["html"].as_str().unwrap();
    assert_eq!(
        html,
        "<section class=\"hero\"><style>.hero { color: var(--brand) } .hero a:hover { color: red }</style><h1>Welcome</h1><a>Go</a></section>"
    );
    assert_eq!(requests[1]["input"]["parentId"], "n-root");
    assert_eq!(requests[1]["input"]["index"], 0);
    assert_eq!(
        requests[2]["input"],
        json!({"operation": "merge", "css": CSS})
    );
    // The model's own toolCall line carries what it sent, unvalidated.
    let insert_call = events
        .iter()
        .find(|e| e["type"] == "toolCall" && e["toolName"] == "site_insert_html")
        .unwrap();
    assert_eq!(insert_call["input"]["html"], INSERTED);

    // What the model was sent: the site prompt, all 35 tools, and the server reads' results.
    let sent = provider.bodies();
    assert_eq!(sent.len(), 6);
    assert_eq!(sent[0]["system"][0]["text"], SITE_PREFIX);
    assert!(sent[0]["system"][1]["text"]
        .as_str()
        .unwrap()
        .starts_with("Page: \"Home\""));
    assert_eq!(sent[0]["tools"].as_array().unwrap().len(), 35);
    let last_result = last_tool_result;
    assert!(last_result(&sent[1]).contains("\"summary\":\"Homepage\""));
    assert!(!last_result(&sent[1]).contains("p-landing"));
    // The second listing sees the snapshot posted with the insert's result.
    assert!(
        last_result(&sent[4]).contains("p-landing"),
        "{}",
        last_result(&sent[4])
    );
    // Heavy evidence: the document read is replayed whole while it is the newest of its kind.
    assert!(
        last_result(&sent[2]).contains("uid=\\\"n-root\\\""),
        "{}",
        last_result(&sent[2])
    );

    // The persisted history: the user's message, each call and result, the reply.
    let (_, detail) = support::call_as(
        &socket,
        CAPS,
        Method::GET,
        &format!("/admin/api/ai/conversations/{id}"),
    )
    .await;
    let rows: Vec<(String, Value)> = detail["conversation"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"][0]["kind"].clone(),
            )
        })
        .collect();
    let mut expected_rows = vec![("user".to_owned(), json!("text"))];
    for _ in 0..5 {
        expected_rows.push(("assistant".into(), json!("toolCall")));
        expected_rows.push(("tool".into(), json!("toolResult")));
    }
    expected_rows.push(("assistant".into(), json!("text")));
    assert_eq!(rows, expected_rows);
    let tool_rows: Vec<&Value> = detail["conversation"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert!(tool_rows
        .iter()
        .all(|m| m["content"] == json!([{"kind": "toolResult", "ok": true}])));
}
