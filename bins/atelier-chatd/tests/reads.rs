//! The server-side reads against fixtures — a posted site snapshot and the CMS stand-in's
//! seeded content, read as the chatting user — compared with golden JSON; the CMS's own-rows
//! rule reaching the tools; a CMS that does not answer named in the tool's error; a document
//! the browser creates in a whole content turn found by the turn's next reads; and the system
//! prompts: a static prefix byte-identical across turns and providers, the dynamic suffix
//! built from the snapshot.
//!
//! `ATELIER_UPDATE_GOLDEN=1 cargo test -p atelier-chatd --test main reads::` rewrites the goldens.

use crate::support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::{
    last_tool_result, scripted, send, serve_in_process, text_round, tool_round, Answer,
};
use atelier_chatd::caller::{Caller, SessionCookie};
use atelier_chatd::cms::reads::CmsReader;
use atelier_chatd::cms::CmsClient;
use atelier_chatd::prompts::{system_prompt, withheld_tools, CONTENT_PREFIX, SITE_PREFIX};
use atelier_chatd::runtime::prepare_input;
use atelier_chatd::store::Scope;
use atelier_chatd::tools::snapshot::SiteSnapshot;
use atelier_chatd::tools::{base_modules, catalogue, content_reads, site_reads};
use atelier_lab_model::cms::{author, CmsState, LabCms, AUTHOR_COOKIE, SESSION_COOKIE};
use atelier_llm::{
    AnthropicDriver, ChatCompletionsDriver, ChatRequest, Driver, Endpoint, Message,
    ResponsesDriver, SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
};
use hyper::header::{HeaderMap, COOKIE};
use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn assert_golden(name: &str, value: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var_os("ATELIER_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (ATELIER_UPDATE_GOLDEN=1 writes it)",
            path.display()
        )
    });
    assert_eq!(text, expected, "{} differs", path.display());
}

fn snapshot() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("site_snapshot.json")).unwrap()).unwrap()
}

/// What the golden reads' user may do: read the site, every row, the tables, users and media.
const READER_CAPS: &str =
    "site.read,content.edit.any,data.custom.tables.read,users.manage,media.read";

/// A caller with exactly `capabilities` (comma-separated).
fn user_with(user_id: &str, capabilities: &str) -> Caller {
    Caller {
        user_id: user_id.into(),
        capabilities: capabilities.split(',').map(str::to_owned).collect(),
        label: None,
    }
}

/// A CMS stand-in of the test's own, with the seeded content.
fn lab_cms() -> LabCms {
    LabCms::spawn(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(CmsState::with_lab_users()),
    )
    .unwrap()
}

/// The CMS at `origin` as the holder of session cookie value `cookie` sees it.
fn cms_reader(origin: &str, cookie: &str) -> CmsReader {
    let mut headers = HeaderMap::new();
    headers.insert(
        COOKIE,
        format!("{SESSION_COOKIE}={cookie}").parse().unwrap(),
    );
    CmsReader::new(
        CmsClient::new(origin.parse().unwrap()),
        SessionCookie::from_headers(&headers).unwrap(),
    )
}

/// One user as the tools meet them: chatd's caller, and their session at the CMS.
struct User {
    caller: Caller,
    cms: CmsReader,
}

impl User {
    /// `cms` as user `user_id` with `capabilities` (comma-separated) sees it, through a session
    /// made for them there.
    fn at(cms: &LabCms, user_id: &str, capabilities: &str) -> User {
        let cookie = cms.state().session_for(user_id, capabilities);
        User {
            caller: user_with(user_id, capabilities),
            cms: cms_reader(&cms.origin(), &cookie),
        }
    }

    /// Runs read `name` as this user with no site snapshot posted.
    async fn read(&self, name: &str, input: Value) -> Value {
        let snapshot = SiteSnapshot::placeholder();
        read(&self.cms, &self.caller, &snapshot, name, input).await
    }
}

/// Runs read `name` as `caller` through the tool's own checks, against `snapshot` and `cms`:
/// `{ok, data}` or `{ok, error}`, as the model would read it.
async fn read(
    cms: &CmsReader,
    caller: &Caller,
    snapshot: &SiteSnapshot,
    name: &str,
    input: Value,
) -> Value {
    let tools = catalogue();
    let spec = tools.iter().find(|t| t.name == name).unwrap();
    let input = prepare_input(spec, caller, &input).unwrap();
    let outcome = if spec.scope == Scope::Site {
        site_reads::run(cms, snapshot, name, &input).await
    } else {
        content_reads::run(cms, name, &input).await
    };
    match outcome {
        Ok(data) => json!({"ok": true, "data": data}),
        Err(error) => json!({"ok": false, "error": error}),
    }
}

#[tokio::test]
async fn server_reads_answer_from_the_snapshot_and_the_cms() {
    let cms = lab_cms();
    let User {
        caller,
        cms: reader,
    } = User::at(&cms, "usr_lab_reader", READER_CAPS);
    let raw = snapshot();
    let snapshot = SiteSnapshot::read(Some(&raw));
    assert_eq!(snapshot.page.title, "Home");
    let mut site = Map::new();
    for (case, name, input) in [
        ("documents", "site_list_documents", json!({})),
        ("modules", "site_list_modules", json!({})),
        (
            "modules in category TYPOGRAPHY",
            "site_list_modules",
            json!({"category": "TYPOGRAPHY"}),
        ),
        ("tokens", "site_list_tokens", json!({})),
        ("fonts only", "site_list_tokens", json!({"family": "fonts"})),
        ("post types", "site_list_post_types", json!({})),
        ("loop sources", "site_list_loop_sources", json!({})),
        ("breakpoints", "site_list_breakpoints", json!({})),
    ] {
        let result = read(&reader, &caller, &snapshot, name, input).await;
        site.insert(case.to_owned(), result);
    }
    assert_golden("reads/site.json", &Value::Object(site));
    let mut content = Map::new();
    for (case, name, input) in [
        ("collections", "content_list_collections", json!({})),
        (
            "schema of posts",
            "content_get_collection_schema",
            json!({"tableId": "tbl_posts"}),
        ),
        (
            "schema of a data table",
            "content_get_collection_schema",
            json!({"tableId": "tbl_team"}),
        ),
        (
            "schema not found",
            "content_get_collection_schema",
            json!({"tableId": "tbl_gone"}),
        ),
        (
            "posts",
            "content_list_documents",
            json!({"tableId": "tbl_posts"}),
        ),
        (
            "posts by ana, page 2 of 2",
            "content_list_documents",
            json!({"tableId": "tbl_posts", "authorUserId": "usr_lab_author_000000", "limit": 1, "offset": 1}),
        ),
        (
            "published posts",
            "content_list_documents",
            json!({"tableId": "tbl_posts", "status": "published"}),
        ),
        (
            "documents of an unknown collection",
            "content_list_documents",
            json!({"tableId": "tbl_gone"}),
        ),
        (
            "document",
            "content_get_document",
            json!({"documentId": "row_launch"}),
        ),
        (
            "document not found",
            "content_get_document",
            json!({"documentId": "row_gone"}),
        ),
        (
            "an id that is not one path segment",
            "content_get_document",
            json!({"documentId": "../tables/tbl_posts"}),
        ),
        (
            "search launch (visible tables only)",
            "content_search_documents",
            json!({"query": "LAUNCH"}),
        ),
        ("users", "content_list_users", json!({})),
        (
            "media: images",
            "content_list_media",
            json!({"mimeType": "image/"}),
        ),
        (
            "media: launch (file name or alt text), limit 1",
            "content_list_media",
            json!({"query": "launch", "limit": 1}),
        ),
    ] {
        let result = read(&reader, &caller, &snapshot, name, input).await;
        content.insert(case.to_owned(), result);
    }
    assert_golden("reads/content.json", &Value::Object(content));

    // A malformed snapshot is the placeholder, not an error.
    let placeholder = SiteSnapshot::read(Some(&json!({"page": "not an object"})));
    assert_eq!(placeholder, SiteSnapshot::placeholder());
}

/// The ids of the objects in `list`.
fn ids(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_user_who_may_edit_only_their_own_rows_reads_only_those() {
    let cms = lab_cms();
    let ana = author();
    let ana = User {
        caller: user_with(&ana.id, &ana.capabilities().join(",")),
        cms: cms_reader(&cms.origin(), AUTHOR_COOKIE),
    };
    let listed = ana
        .read("content_list_documents", json!({"tableId": "tbl_posts"}))
        .await;
    assert_eq!(listed["data"]["total"], 2);
    assert_eq!(
        ids(&listed["data"]["documents"]),
        ["row_later", "row_launch"]
    );
    let theirs = ana
        .read("content_get_document", json!({"documentId": "row_guide"}))
        .await;
    assert_eq!(
        theirs,
        json!({"ok": false, "error": "content_get_document: forbidden by the CMS."})
    );
    let own = ana
        .read("content_get_document", json!({"documentId": "row_launch"}))
        .await;
    assert_eq!(
        own["data"]["document"]["authorUserId"],
        ana.caller.user_id.as_str()
    );
    let found = ana
        .read("content_search_documents", json!({"query": "n"}))
        .await;
    assert_eq!(ids(&found["data"]["results"]), ["row_later", "row_launch"]);
    // The CMS counts every author's rows in a collection; only the rows themselves are hidden.
    let collections = ana.read("content_list_collections", json!({})).await;
    assert_eq!(collections["data"]["collections"][0]["rowCount"], 3);

    // An editor of every row sees all three.
    let editor = User::at(&cms, "usr_lab_any", "content.edit.any");
    let all = editor
        .read("content_list_documents", json!({"tableId": "tbl_posts"}))
        .await;
    assert_eq!(
        ids(&all["data"]["documents"]),
        ["row_later", "row_guide", "row_launch"]
    );
}

#[tokio::test]
async fn without_the_author_list_a_user_manager_gets_the_users_from_the_user_list() {
    let cms = lab_cms();
    let manager = User::at(&cms, "usr_lab_manager", "users.manage");
    let reader = User::at(&cms, "usr_lab_reader", READER_CAPS);
    let from_users = manager.read("content_list_users", json!({})).await;
    let from_authors = reader.read("content_list_users", json!({})).await;
    assert_eq!(from_users["ok"], true, "{from_users}");
    assert_eq!(from_users, from_authors);
    // The manager's author list is refused, so the user list answers; the reader's is not.
    let asked: Vec<String> = cms
        .state()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|path| path.ends_with("/users") || path.ends_with("/authors"))
        .collect();
    assert_eq!(
        asked,
        [
            "/admin/api/cms/data/authors",
            "/admin/api/cms/users",
            "/admin/api/cms/data/authors"
        ]
    );
}

#[tokio::test]
async fn a_cms_that_does_not_answer_is_a_named_tool_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let cookie = "a-session-that-stays-secret";
    let user = User {
        caller: user_with("usr_lab_reader", READER_CAPS),
        cms: cms_reader(&origin, cookie),
    };
    assert!(!format!("{:?}", user.cms).contains(cookie));
    for (name, input) in [
        ("content_list_collections", json!({})),
        (
            "content_get_collection_schema",
            json!({"tableId": "tbl_posts"}),
        ),
        ("content_list_documents", json!({"tableId": "tbl_posts"})),
        ("content_get_document", json!({"documentId": "row_launch"})),
        ("content_search_documents", json!({"query": "launch"})),
        ("content_list_users", json!({})),
        ("content_list_media", json!({})),
        ("site_list_post_types", json!({})),
        ("site_list_loop_sources", json!({})),
    ] {
        assert_eq!(
            user.read(name, input).await,
            json!({"ok": false, "error": format!("{name}: the CMS did not answer.")}),
        );
    }
    // The reads that need no CMS still answer.
    let modules = user.read("site_list_modules", json!({})).await;
    assert_eq!(modules["ok"], true);

    // A session the CMS forgets during the turn is named as such.
    let cms = lab_cms();
    let leaver = User::at(&cms, "usr_lab_leaver", READER_CAPS);
    cms.state()
        .revoke(&cms.state().session_for("usr_lab_leaver", READER_CAPS));
    let result = leaver.read("content_list_collections", json!({})).await;
    assert_eq!(
        result["error"],
        "content_list_collections: the CMS no longer accepts this session; sign in again."
    );
}

/// A CMS answer larger than chatd reads of its route is named as such (it cannot be had by
/// asking again), not as an answer that could not be read.
#[tokio::test]
async fn a_cms_answer_past_the_read_bound_is_named_too_large() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let len = 17 * 1024 * 1024;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
                );
                if stream.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; 64 * 1024];
                for _ in 0..len / chunk.len() {
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let user = User {
        caller: user_with("usr_lab_reader", READER_CAPS),
        cms: cms_reader(&origin, "a-session"),
    };
    let result = user
        .read("content_list_documents", json!({"tableId": "tbl_posts"}))
        .await;
    assert_eq!(
        result,
        json!({"ok": false, "error": "content_list_documents: the CMS's answer is larger than \
            the 16 MiB chatd reads at once, so it cannot be read whole; say so rather than retry."})
    );
}

/// The capabilities of the content turn's user: write content of their own, with the AI.
const WRITER_CAPS: &str =
    "ai.chat,ai.tools.write,content.create,content.edit.own,data.custom.tables.read";

#[tokio::test]
async fn a_document_created_in_the_browser_is_found_by_the_turn_s_next_reads() {
    let writer = "usr_lab_turn_writer";
    // The model creates a post (in the browser), searches for it, reads the document it found,
    // and replies.
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    let provider = scripted(move |seen| {
        let frames = match counter.fetch_add(1, Ordering::SeqCst) {
            0 => tool_round(
                "call_1",
                "content_create_document",
                &json!({"tableId": "tbl_posts", "fields": {"title": "Autumn menu", "slug": "autumn-menu", "body": "Squash soup."}}),
            ),
            1 => tool_round("call_2", "content_search_documents", &json!({"query": "autumn"})),
            2 => {
                let found: Value = serde_json::from_str(&last_tool_result(&seen.body)).unwrap();
                let id = found["results"][0]["id"].as_str().unwrap_or("none");
                tool_round("call_3", "content_get_document", &json!({"documentId": id}))
            }
            _ => text_round("The autumn menu is drafted."),
        };
        Answer::Sse { frames, hang: false }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let socket = serve_in_process(dir.path(), support::cms_origin(), &provider.base_url);
    let conversation = send(
        &socket,
        writer,
        WRITER_CAPS,
        Method::POST,
        "/admin/api/ai/conversations",
        Some(&json!({"scope": "content", "credentialId": "c", "modelId": "m"})),
    )
    .await
    .json()
    .await;
    let id = conversation["conversation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut stream = send(
        &socket,
        writer,
        WRITER_CAPS,
        Method::POST,
        "/admin/api/ai/chat/content",
        Some(&json!({"conversationId": id, "content": [{"kind": "text", "text": "Draft the autumn menu"}]})),
    )
    .await;
    assert_eq!(stream.status, StatusCode::OK);
    let created = Mutex::new(Value::Null);
    let mut bridge = String::new();
    let mut results = Vec::new();
    while let Some(event) = stream.line().await {
        match event["type"].as_str().unwrap() {
            "bridgeReady" => bridge = event["bridgeId"].as_str().unwrap().to_owned(),
            "toolRequest" => {
                // The browser runs the write against the CMS, as the same user, and reports.
                assert_eq!(event["toolName"], "content_create_document");
                let input = &event["input"];
                let table = input["tableId"].as_str().unwrap();
                let answer = reqwest::Client::new()
                    .post(format!(
                        "{}/admin/api/cms/data/tables/{table}/rows",
                        support::cms_origin()
                    ))
                    .header("cookie", support::cookie_for(writer, WRITER_CAPS))
                    .json(&json!({"cells": input["fields"]}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status().as_u16(), 201);
                let row: Value = answer.json().await.unwrap();
                *created.lock().unwrap() = row["row"].clone();
                let posted = send(
                    &socket,
                    writer,
                    WRITER_CAPS,
                    Method::POST,
                    "/admin/api/ai/tool-result",
                    Some(&json!({"bridgeId": bridge, "requestId": event["requestId"],
                                 "result": {"ok": true, "data": {"documentId": row["row"]["id"]}}})),
                )
                .await;
                assert_eq!(posted.status, StatusCode::OK);
            }
            "toolResult" => results.push(event),
            _ => {}
        }
    }
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r["ok"] == true), "{results:?}");
    let created = created.into_inner().unwrap();
    let row_id = created["id"].as_str().unwrap();

    // What the model was sent after each read: the new document, found and read back whole.
    let sent = provider.bodies();
    assert_eq!(sent.len(), 4);
    let found: Value = serde_json::from_str(&last_tool_result(&sent[2])).unwrap();
    assert_eq!(
        found,
        json!({"query": "autumn", "results": [{"id": row_id, "tableId": "tbl_posts", "tableSlug": "posts",
               "tableName": "Posts", "slug": "autumn-menu", "status": "draft", "updatedAt": created["updatedAt"]}]})
    );
    let document: Value = serde_json::from_str(&last_tool_result(&sent[3])).unwrap();
    assert_eq!(document["document"]["id"], row_id);
    assert_eq!(document["document"]["title"], "Autumn menu");
    assert_eq!(document["document"]["authorUserId"], writer);
    assert_eq!(document["document"]["fields"]["body"], "Squash soup.");

    // chatd asked as the user, with their cookie and nothing else of theirs, and kept none of it.
    let cookie = support::cookie_for(writer, WRITER_CAPS);
    let mut reads: Vec<_> = support::cms_state()
        .requests()
        .into_iter()
        .filter(|r| {
            r.path.starts_with("/admin/api/cms/data/")
                && r.header("cookie") == Some(cookie.as_str())
        })
        .map(|r| {
            (
                r.method.to_string(),
                r.path.clone(),
                r.header("authorization").is_none(),
            )
        })
        .collect();
    // The search and the tables listing go out together: they arrive in either order.
    if let Some(together) = reads.get_mut(1..3) {
        together.sort();
    }
    assert_eq!(
        reads,
        [
            (
                "POST".to_owned(),
                "/admin/api/cms/data/tables/tbl_posts/rows".to_owned(),
                true
            ),
            ("GET".into(), "/admin/api/cms/data/search".into(), true),
            ("GET".into(), "/admin/api/cms/data/tables".into(), true),
            (
                "GET".into(),
                format!("/admin/api/cms/data/rows/{row_id}"),
                true
            ),
        ]
    );
    let secret = cookie.trim_start_matches(&format!("{SESSION_COOKIE}="));
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the session cookie",
                path.display()
            );
        }
    }
}

fn request_for(system: Vec<String>) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        system,
        messages: vec![Message::user_text("hi")],
        tools: catalogue()
            .iter()
            .filter(|t| t.scope == Scope::Site)
            .map(|t| t.definition())
            .collect(),
        max_tokens: None,
        scope: Some("site".into()),
        tool_choice: Default::default(),
    }
}

#[test]
fn the_static_prefix_is_byte_identical_across_turns_and_providers() {
    let first = snapshot();
    let mut second = first.clone();
    second["page"]["title"] = json!("About us");
    second["selectedNodeId"] = json!(null);
    second["site"]["settings"]["framework"] = json!(null);
    let turns = [
        system_prompt(Scope::Site, Some(&first)),
        system_prompt(Scope::Site, Some(&second)),
        system_prompt(Scope::Site, None),
    ];
    for parts in &turns {
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], SITE_PREFIX);
        assert_eq!(parts[1], SYSTEM_PROMPT_DYNAMIC_BOUNDARY);
    }
    assert_ne!(turns[0][2], turns[1][2]);
    let endpoint = Endpoint::new(
        reqwest::Client::new(),
        "http://127.0.0.1:9",
        Some("k".into()),
    );
    let drivers: Vec<Box<dyn Driver>> = vec![
        Box::new(AnthropicDriver::new(endpoint.clone())),
        Box::new(ResponsesDriver::openai(endpoint.clone())),
        Box::new(ResponsesDriver::openrouter(endpoint.clone())),
        Box::new(ChatCompletionsDriver::ollama(endpoint.clone())),
        Box::new(ChatCompletionsDriver::openai_compatible(endpoint)),
    ];
    for driver in &drivers {
        let bodies: Vec<Value> = turns
            .iter()
            .map(|t| driver.request_body(&request_for(t.clone())))
            .collect();
        for body in &bodies {
            let system_text = match driver.label() {
                "Anthropic" => {
                    // Only the prefix is marked for caching.
                    assert_eq!(
                        body["system"][0]["cache_control"],
                        json!({"type": "ephemeral"})
                    );
                    assert!(body["system"][1].get("cache_control").is_none());
                    body["system"][0]["text"].as_str().unwrap().to_owned()
                }
                "OpenAI" | "OpenRouter" => body["instructions"].as_str().unwrap().to_owned(),
                _ => body["messages"][0]["content"].as_str().unwrap().to_owned(),
            };
            assert!(system_text.starts_with(SITE_PREFIX), "{}", driver.label());
            assert!(!system_text.contains(SYSTEM_PROMPT_DYNAMIC_BOUNDARY));
        }
        if driver.label() == "OpenAI" {
            assert_eq!(bodies[0]["prompt_cache_key"], bodies[1]["prompt_cache_key"]);
        }
    }
    // The prefix's own rules.
    assert!(SITE_PREFIX.contains("site_insert_html"));
    assert!(SITE_PREFIX.contains("Structure as HTML, styling as CSS"));
    assert!(SITE_PREFIX.contains("No raw HTML/CSS/JSON in the reply"));
    for banned in ["Module ids:", "base.container", "base.text"] {
        assert!(!SITE_PREFIX.contains(banned), "{banned}");
    }
    let headings = [
        "Building",
        "Design system first",
        "Structure as HTML, styling as CSS",
        "Behavior and runtime code",
        "Responsive",
        "Documents",
        "Pages",
        "Loops (repeated CMS/data lists)",
        "Templates (CMS layouts)",
        "Notes",
        "Reply",
    ];
    let positions: Vec<usize> = headings
        .iter()
        .map(|h| {
            SITE_PREFIX
                .find(&format!("\n{h}\n"))
                .unwrap_or_else(|| panic!("{h}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "sections in order"
    );
    let content = system_prompt(Scope::Content, None);
    assert_eq!(content[0], CONTENT_PREFIX);
    assert_eq!(system_prompt(Scope::Data, None).len(), 1);
}

/// A caller offered fewer tools than the prompt names is told which it has; one offered all of
/// them gets the prompt unchanged.
#[test]
fn a_caller_offered_fewer_tools_is_told_which_it_has() {
    let all = catalogue();
    let caller = |capabilities: &[&str]| Caller {
        user_id: "u1".into(),
        capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
        label: None,
    };
    let note = |capabilities: &[&str], scope: Scope| {
        let offered = atelier_chatd::tools::offered(&all, scope, &caller(capabilities));
        withheld_tools(scope, &offered, &all)
    };
    // Every capability any tool names, and the chat's own.
    let mut everything: Vec<&str> = all
        .iter()
        .flat_map(|t| t.capabilities.iter().copied())
        .collect();
    everything.extend(["ai.chat", "ai.tools.write"]);
    assert_eq!(note(&everything, Scope::Site), None);
    assert_eq!(note(&everything, Scope::Content), None);
    // Without ai.tools.write: no browser tool, and the prompt's note names the server ones.
    let reader = note(&["ai.chat", "site.read"], Scope::Site).expect("a note");
    assert!(
        reader.starts_with("The editor's role gives you only these tools in this conversation: ")
            && reader.contains("site_list_documents")
            && !reader.contains("site_read_document"),
        "{reader}"
    );
    assert_eq!(
        note(&["ai.chat"], Scope::Site).as_deref(),
        Some(
            "The editor's role gives you no tools in this conversation: answer from what the \
             user tells you, and say which permission a read or a change would need."
        )
    );
    assert_eq!(
        note(&["ai.chat"], Scope::Data),
        None,
        "a scope without tools"
    );
}

#[test]
fn the_dynamic_suffixes_follow_the_snapshot() {
    let site = system_prompt(Scope::Site, Some(&snapshot())).pop().unwrap();
    let placeholder = system_prompt(Scope::Site, Some(&json!("garbage")))
        .pop()
        .unwrap();
    // The shape the editor's content workspace posts.
    let field = |id: &str, kind: &str, required: bool, built_in: bool| {
        json!({"id": id, "label": id.to_uppercase(), "type": kind, "required": required,
            "builtIn": built_in})
    };
    let content_snapshot = json!({
        "currentUser": {"id": "usr_ana", "displayName": "Ana", "email": "ana@example.org"},
        "collections": [
            {"id": "t-posts", "slug": "posts", "label": "Posts", "kind": "postType", "docCount": 3}
        ],
        "activeTableId": "t-posts",
        "activeDocument": {
            "id": "d-launch", "tableId": "t-posts", "title": "Launch day", "slug": "launch-day",
            "status": "published", "authorUserId": "usr_ana",
            "updatedAt": "2026-11-30T09:00:00.000Z",
            "fields": {
                "title": "Launch day",
                "body": "x".repeat(250),
                "summary": "y".repeat(130),
                "views": 42,
                "cover": null,
                "tags": ["a", "b"]
            },
            // Lines follow the schema; a field the document has no value for is (empty).
            "schema": [
                field("title", "text", true, true),
                field("body", "body", false, true),
                field("summary", "text", false, false),
                field("views", "number", false, false),
                field("cover", "media", false, false),
                field("tags", "multiSelect", false, false),
                field("seoTitle", "text", false, true)
            ]
        }
    });
    let content = system_prompt(Scope::Content, Some(&content_snapshot))
        .pop()
        .unwrap();
    let empty_content = system_prompt(Scope::Content, None).pop().unwrap();
    assert_golden(
        "prompts/suffixes.json",
        &json!({"site": site, "site placeholder": placeholder, "content": content, "content without snapshot": empty_content}),
    );
    assert!(site.starts_with(
        "Page: \"Home\" · current document: page:p-home · root: n-root · selected: n-hero"
    ));
    assert!(
        site.contains(
            "Tokens — colors: [brand=hsla(212.08, 100%, 51.96%, 1), ink=hsla(0, 0%, 6.67%, 1), \
             accent=oklch(0.7 0.15 30)]; type --text-*: [s, m, l, xl]; spacing --space-*: [xs, s, m]; \
             fonts: [--font-heading→Inter, --font-body→system-ui, sans-serif]"
        ),
        "{site}"
    );
    assert!(placeholder.contains("Tokens: (none — no design system yet"));
}

/// A snapshot with every part the CMS editor posts, as small as it gets.
fn example_snapshot() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixture("instatic_example_snapshot.json")).unwrap(),
    )
    .unwrap()
}

/// Runs site read `name` on `raw` as the golden reads' user, against the seeded CMS.
async fn site_read(raw: &Value, name: &str, input: Value) -> Value {
    let cms = lab_cms();
    let user = User::at(&cms, "usr_lab_reader", READER_CAPS);
    let snapshot = SiteSnapshot::read(Some(raw));
    read(&user.cms, &user.caller, &snapshot, name, input).await["data"].clone()
}

#[tokio::test]
async fn the_example_snapshot_names_its_tokens_in_the_prompt_and_the_token_list() {
    let raw = example_snapshot();
    let suffix = system_prompt(Scope::Site, Some(&raw)).pop().unwrap();
    assert!(
        suffix.ends_with(
            "Tokens — colors: [primary=hsla(17.83, 62.16%, 43.53%, 1)]; \
             type --text-*: [s, m, l, xl]; fonts: [--font-body→Inter]"
        ),
        "{suffix}"
    );
    assert!(suffix.starts_with(
        "Page: \"Home\" · current document: page:pg_home · root: n_body · selected: n_h1"
    ));

    let tokens = &site_read(&raw, "site_list_tokens", json!({})).await["tokens"];
    let primary = &tokens["colors"][0];
    assert_eq!(primary["slug"], "primary");
    assert_eq!(primary["category"], "brand");
    assert_eq!(primary["cssVar"], "--primary");
    assert_eq!(primary["ref"], "var(--primary)");
    assert_eq!(primary["value"], "hsla(17.83, 62.16%, 43.53%, 1)");
    assert_eq!(primary["darkValue"], "hsla(20, 67.54%, 62.55%, 1)");
    assert_eq!(
        primary["utilityClasses"],
        json!(["text-primary", "bg-primary", "border-primary"])
    );
    // Two shades, no transparent steps, no tints.
    assert_eq!(
        primary["variants"],
        json!([
            {"variant": "d-1", "cssVar": "--primary-d-1", "ref": "var(--primary-d-1)",
             "value": "hsla(17.83, 62.16%, 31.92%, 1)",
             "utilityClasses": ["text-primary-d-1", "bg-primary-d-1", "border-primary-d-1"]},
            {"variant": "d-2", "cssVar": "--primary-d-2", "ref": "var(--primary-d-2)",
             "value": "hsla(17.83, 62.16%, 20.31%, 1)",
             "utilityClasses": ["text-primary-d-2", "bg-primary-d-2", "border-primary-d-2"]}
        ])
    );
    let text = &tokens["typography"][0];
    assert_eq!(
        (
            &text["id"],
            &text["family"],
            &text["name"],
            &text["namingConvention"]
        ),
        (
            &json!("tg1"),
            &json!("typography"),
            &json!("Text"),
            &json!("text")
        )
    );
    let steps: Vec<&Value> = text["steps"].as_array().unwrap().iter().collect();
    let names: Vec<&str> = steps
        .iter()
        .map(|s| s["cssVar"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["--text-s", "--text-m", "--text-l", "--text-xl"]);
    // Base step m: 16 px at 320 px wide to 19 px at 1400 px, in rem of a 10 px root.
    assert_eq!(
        steps[1],
        &json!({"step": "m", "cssVar": "--text-m", "ref": "var(--text-m)",
                "value": "clamp(1.6rem, calc(0.28vw + 1.51rem), 1.9rem)", "utilityClasses": []})
    );
    assert_eq!(
        steps[0]["value"],
        "clamp(1.42rem, calc(0vw + 1.42rem), 1.43rem)"
    );
    assert_eq!(tokens["spacing"], json!([]));
    assert_eq!(
        tokens["fonts"],
        json!([{"name": "Body", "cssVar": "--font-body", "ref": "var(--font-body)",
                "family": "Inter", "stack": "\"Inter\", sans-serif"}])
    );
    let fonts_only =
        &site_read(&raw, "site_list_tokens", json!({"family": "fonts"})).await["tokens"];
    assert_eq!(fonts_only["fonts"], tokens["fonts"]);
    assert_eq!(fonts_only["colors"], json!([]));
    assert_eq!(fonts_only["typography"], json!([]));
}

#[tokio::test]
async fn the_example_snapshot_lists_templates_and_component_roots() {
    let raw = example_snapshot();
    let documents = site_read(&raw, "site_list_documents", json!({})).await;
    let documents = documents["documents"].as_array().unwrap();
    let refs: Vec<(&str, &str, &str)> = documents
        .iter()
        .map(|d| {
            (
                d["document"]["type"].as_str().unwrap(),
                d["document"]["id"].as_str().unwrap(),
                d["rootNodeId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        refs,
        [
            ("page", "pg_home", "n_body"),
            ("template", "pg_post", "n_tb"),
            ("visualComponent", "vc_card", "vc_root"),
        ]
    );
    assert_eq!(documents[1]["summary"], "Post type template for posts");
    assert_eq!(
        documents[1]["template"],
        json!({"target": {"kind": "postTypes", "tableSlugs": ["posts"]}, "priority": 10})
    );
    let suffix = system_prompt(Scope::Site, Some(&raw)).pop().unwrap();
    assert!(suffix
        .contains("visualComponent:vc_card=\"Card\" (root=vc_root; Visual component definition)"));
    assert!(suffix.contains("Pages: [pg_home=index (active), pg_post=post [template:posts]]"));

    // Every page has a slug: a snapshot with a page without one is not a snapshot.
    let mut slugless = raw.clone();
    slugless["site"]["pages"][0]
        .as_object_mut()
        .unwrap()
        .remove("slug");
    assert_eq!(
        SiteSnapshot::read(Some(&slugless)),
        SiteSnapshot::placeholder()
    );
}

/// Every base module the CMS registers, by id.
const BASE_MODULE_IDS: [&str; 25] = [
    "base.body",
    "base.container",
    "base.loop",
    "base.text",
    "base.list",
    "base.outlet",
    "base.image",
    "base.svg",
    "base.button",
    "base.link",
    "base.form",
    "base.label",
    "base.input",
    "base.textarea",
    "base.select",
    "base.option",
    "base.option-group",
    "base.checkbox",
    "base.radio",
    "base.submit",
    "base.form-message",
    "base.video",
    "base.slot-instance",
    "base.slot-outlet",
    "base.visual-component-ref",
];

#[tokio::test]
async fn site_list_modules_is_the_base_module_catalogue() {
    assert_eq!(base_modules::ids(), BASE_MODULE_IDS);
    let listed = site_read(&example_snapshot(), "site_list_modules", json!({})).await;
    assert_eq!(listed["modules"], Value::Array(base_modules::catalogue()));
    let ids: Vec<&str> = listed["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = BASE_MODULE_IDS
        .iter()
        .copied()
        .filter(|id| *id != "base.body")
        .collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let text = listed["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "base.text")
        .unwrap();
    assert_eq!(text["name"], "Text");
    assert_eq!(text["category"], "Typography");
    assert_eq!(text["canHaveChildren"], false);
    assert_eq!(
        text["props"][0],
        json!({"key": "text", "type": "textarea", "label": "Text", "defaultValue": "Add your text here."})
    );
    assert_eq!(text["props"][1]["defaultValue"], "p");
    let media = site_read(
        &example_snapshot(),
        "site_list_modules",
        json!({"category": "media"}),
    )
    .await;
    let media: Vec<&str> = media["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(media, ["base.image", "base.svg", "base.video"]);
}

#[tokio::test]
async fn site_list_loop_sources_offers_the_built_in_sources() {
    let listed = site_read(&example_snapshot(), "site_list_loop_sources", json!({})).await;
    let ids: Vec<&str> = listed["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["data.rows", "site.pages", "site.media"]);
    assert_eq!(
        listed["sources"][1]["fields"][2],
        json!({"id": "permalink", "label": "Permalink", "token": "{currentEntry.permalink}", "format": "url"})
    );
    // The tables are the CMS's, as the user's session lists them, with their row counts.
    let tables: Vec<(&str, &str, u64)> = listed["dataTables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap(),
                t["kind"].as_str().unwrap(),
                t["rowCount"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tables,
        [("tbl_team", "data", 1), ("tbl_posts", "postType", 3)]
    );
    assert_eq!(listed["dataTables"][1]["routable"], true);
}
