//! The CMS stand-in's binary as a systemd test or a demo runs it: started on a loopback port, its
//! users told apart by their session cookies, anything else refused as the CMS refuses it, and a
//! non-loopback address refused before anything listens. Its content routes, served in process:
//! the CMS's shapes, the own-rows rule, the 401s and 403s, and a row posted as the browser posts
//! it read back by the next list and search.

use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use atelier_lab_model::cms::{
    author, CmsState, LabCms, AUTHOR_COOKIE, CLIENT_COOKIE, EDITOR_COOKIE, MFA_PENDING_COOKIE,
    SESSION_COOKIE,
};
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

    // The author's session reads the seeded blog, their own posts only.
    let rows = client
        .get(format!(
            "http://{addr}/admin/api/cms/data/tables/tbl_posts/rows"
        ))
        .header("cookie", format!("{SESSION_COOKIE}={AUTHOR_COOKIE}"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(column(&rows["rows"], "id"), ["row_later", "row_launch"]);

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

/// A stand-in with the seeded content on this test's runtime, and a way to call it.
struct Content {
    cms: LabCms,
    http: reqwest::Client,
}

impl Content {
    fn start() -> Content {
        let state = Arc::new(CmsState::with_lab_users());
        Content {
            cms: LabCms::spawn("127.0.0.1:0".parse().unwrap(), state).unwrap(),
            http: reqwest::Client::new(),
        }
    }

    /// `method path` with the session `cookie` (a cookie value; `None` sends none) and `body`.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        cookie: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.cms.origin()));
        if let Some(cookie) = cookie {
            request = request.header("cookie", format!("{SESSION_COOKIE}={cookie}"));
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str, cookie: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, Some(cookie), None)
            .await
    }
}

/// The values of `key` in the objects of `list`.
fn column<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item[key].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_content_routes_answer_in_the_cms_shapes() {
    let content = Content::start();
    let (status, body) = content
        .get("/admin/api/cms/data/tables", EDITOR_COOKIE)
        .await;
    assert_eq!(status, 200);
    // By kind, then by age; each with its live row count.
    assert_eq!(column(&body["tables"], "id"), ["tbl_team", "tbl_posts"]);
    let posts = &body["tables"][1];
    assert_eq!(
        (
            &posts["rowCount"],
            &posts["kind"],
            &posts["primaryFieldId"],
            &posts["system"]
        ),
        (&json!(3), &json!("postType"), &json!("title"), &json!(true))
    );
    assert_eq!(
        posts["fields"][3]["options"][0],
        json!({"id": "opt_news", "label": "News", "value": "news"})
    );
    let (_, narrowed) = content
        .get(
            "/admin/api/cms/data/tables?query=POST&limit=5",
            EDITOR_COOKIE,
        )
        .await;
    assert_eq!(column(&narrowed["tables"], "id"), ["tbl_posts"]);

    let (status, body) = content
        .get("/admin/api/cms/data/tables/tbl_posts/rows", EDITOR_COOKIE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        column(&body["rows"], "id"),
        ["row_later", "row_guide", "row_launch"]
    );
    let launch = &body["rows"][2];
    assert_eq!(launch["cells"]["title"], "Launch day");
    assert_eq!(launch["author"]["displayName"], "Ana Novak");
    assert_eq!(launch["publishedAt"], "2026-11-02T10:00:00.000Z");
    assert_eq!(launch["deletedAt"], Value::Null);

    let (status, body) = content
        .get("/admin/api/cms/data/rows/row_guide", EDITOR_COOKIE)
        .await;
    assert_eq!((status, &body["row"]["slug"]), (200, &json!("setup-guide")));

    // The slug is what search matches, across tables, newest change first.
    let (status, body) = content
        .get("/admin/api/cms/data/search?query=LAUNCH", EDITOR_COOKIE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["entries"],
        json!([
            {"id": "row_launch", "tableId": "tbl_posts", "tableSlug": "posts", "tableName": "Posts",
             "slug": "launch-day", "status": "published", "updatedAt": "2026-11-02T10:00:00.000Z"},
            {"id": "row_crew", "tableId": "tbl_team", "tableSlug": "team", "tableName": "Team",
             "slug": "launch-crew", "status": "draft", "updatedAt": "2026-10-02T09:00:00.000Z"}
        ])
    );
    let (_, one) = content
        .get(
            "/admin/api/cms/data/search?query=launch&limit=1",
            EDITOR_COOKIE,
        )
        .await;
    assert_eq!(column(&one["entries"], "id"), ["row_launch"]);

    let (status, body) = content
        .get("/admin/api/cms/data/authors", EDITOR_COOKIE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        column(&body["authors"], "displayName"),
        [
            "Ana Novak",
            "Ben Ortiz",
            "usr_lab_client_000000",
            "usr_lab_editor_000000"
        ]
    );
    assert_eq!(
        body["authors"][0],
        json!({"id": "usr_lab_author_000000", "email": "ana@lab.example", "displayName": "Ana Novak",
               "roleSlug": "author", "roleName": "author"})
    );

    let (status, body) = content.get("/admin/api/cms/media", EDITOR_COOKIE).await;
    assert_eq!(status, 200);
    assert_eq!(column(&body["assets"], "id"), ["med_deck", "med_hero"]);
    let hero = &body["assets"][1];
    assert_eq!(
        (
            &hero["publicPath"],
            &hero["altText"],
            &hero["width"],
            &hero["folderIds"]
        ),
        (
            &json!("/uploads/hero.jpg"),
            &json!("Launch crowd"),
            &json!(1600),
            &json!([])
        )
    );
    // The query matches file names (and titles), not alt text.
    let (_, hero_only) = content
        .get("/admin/api/cms/media?query=HERO", EDITOR_COOKIE)
        .await;
    assert_eq!(column(&hero_only["assets"], "id"), ["med_hero"]);
    let (_, crowd) = content
        .get("/admin/api/cms/media?query=crowd", EDITOR_COOKIE)
        .await;
    assert_eq!(crowd["assets"], json!([]));
    let (_, first) = content
        .get("/admin/api/cms/media?limit=1", EDITOR_COOKIE)
        .await;
    assert_eq!(column(&first["assets"], "id"), ["med_deck"]);
}

#[tokio::test]
async fn an_author_without_the_any_capabilities_sees_only_their_own_rows() {
    let content = Content::start();
    let (_, rows) = content
        .get("/admin/api/cms/data/tables/tbl_posts/rows", AUTHOR_COOKIE)
        .await;
    assert_eq!(column(&rows["rows"], "id"), ["row_later", "row_launch"]);
    assert!(rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|row| row["authorUserId"] == author().id));
    let (status, body) = content
        .get("/admin/api/cms/data/rows/row_guide", AUTHOR_COOKIE)
        .await;
    assert_eq!((status, body), (403, json!({"error": "Forbidden"})));
    let (status, _) = content
        .get("/admin/api/cms/data/rows/row_launch", AUTHOR_COOKIE)
        .await;
    assert_eq!(status, 200);
    let (_, found) = content
        .get("/admin/api/cms/data/search?query=n", AUTHOR_COOKIE)
        .await;
    assert_eq!(column(&found["entries"], "id"), ["row_later", "row_launch"]);
    // Counting rows is not reading them: the table list counts every row.
    let (_, tables) = content
        .get("/admin/api/cms/data/tables", AUTHOR_COOKIE)
        .await;
    assert_eq!(tables["tables"][1]["rowCount"], 3);
}

#[tokio::test]
async fn the_content_routes_refuse_as_the_cms_refuses() {
    let content = Content::start();
    let routes = [
        "/admin/api/cms/data/tables",
        "/admin/api/cms/data/tables/tbl_posts/rows",
        "/admin/api/cms/data/rows/row_launch",
        "/admin/api/cms/data/search?query=launch",
        "/admin/api/cms/data/authors",
        "/admin/api/cms/users",
        "/admin/api/cms/media",
    ];
    for route in routes {
        let (status, body) = content.call(reqwest::Method::GET, route, None, None).await;
        assert_eq!(
            (status, body),
            (401, json!({"error": "Unauthorized"})),
            "{route}"
        );
        let (status, body) = content.get(route, MFA_PENDING_COOKIE).await;
        assert_eq!(
            (status, body),
            (401, json!({"error": "mfa_required"})),
            "{route}"
        );
    }
    // The client role has no content capability: its custom-table read shows the custom tables
    // only, and every row route, the authors and the users are closed to it.
    let (status, tables) = content
        .get("/admin/api/cms/data/tables", CLIENT_COOKIE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(column(&tables["tables"], "id"), ["tbl_team"]);
    for route in &routes[1..6] {
        let (status, body) = content.get(route, CLIENT_COOKIE).await;
        assert_eq!(
            (status, body),
            (403, json!({"error": "Forbidden"})),
            "{route}"
        );
    }
    let (status, _) = content.get("/admin/api/cms/media", CLIENT_COOKIE).await;
    assert_eq!(status, 200);
    // Users need users.manage, which not even the editor has.
    let (status, _) = content.get("/admin/api/cms/users", EDITOR_COOKIE).await;
    assert_eq!(status, 403);
    let manager = content
        .cms
        .state()
        .session_for("usr_lab_manager", "users.manage");
    let (status, users) = content.get("/admin/api/cms/users", &manager).await;
    assert_eq!(status, 200);
    assert_eq!(users["users"][2]["role"]["slug"], "author");
    assert_eq!(users["users"][2]["status"], "active");

    for (route, error) in [
        (
            "/admin/api/cms/data/tables/tbl_gone/rows",
            "Table not found",
        ),
        ("/admin/api/cms/data/rows/row_gone", "Data row not found"),
    ] {
        let (status, body) = content.get(route, EDITOR_COOKIE).await;
        assert_eq!((status, body), (404, json!({ "error": error })), "{route}");
    }
    let (status, _) = content
        .call(
            reqwest::Method::DELETE,
            "/admin/api/cms/data/rows/row_launch",
            Some(EDITOR_COOKIE),
            None,
        )
        .await;
    assert_eq!(status, 405);
}

#[tokio::test]
async fn a_row_posted_like_the_browser_posts_it_is_read_back() {
    let content = Content::start();
    let post = |cookie: &'static str, body: Value| {
        content.call(
            reqwest::Method::POST,
            "/admin/api/cms/data/tables/tbl_posts/rows",
            Some(cookie),
            Some(body),
        )
    };
    // Creating needs content.create, which the editor lacks; a body without cells objects is
    // refused.
    let (status, _) = post(EDITOR_COOKIE, json!({"cells": {"title": "x"}})).await;
    assert_eq!(status, 403);
    let (status, body) = post(AUTHOR_COOKIE, json!({"cells": ["title"]})).await;
    assert_eq!(
        (status, body),
        (400, json!({"error": "Invalid row payload"}))
    );

    let (status, created) = post(
        AUTHOR_COOKIE,
        json!({"cells": {"title": "Autumn menu", "slug": "Autumn Menu", "body": "Squash soup."}}),
    )
    .await;
    assert_eq!(status, 201);
    let row = &created["row"];
    assert_eq!(
        (
            &row["slug"],
            &row["status"],
            &row["authorUserId"],
            &row["author"]["displayName"]
        ),
        (
            &json!("autumn-menu"),
            &json!("draft"),
            &json!(author().id),
            &json!("Ana Novak")
        )
    );
    let id = row["id"].as_str().unwrap();

    let (_, rows) = content
        .get("/admin/api/cms/data/tables/tbl_posts/rows", AUTHOR_COOKIE)
        .await;
    assert_eq!(rows["rows"][0]["id"], id, "the newest row comes first");
    let (_, found) = content
        .get("/admin/api/cms/data/search?query=autumn", EDITOR_COOKIE)
        .await;
    assert_eq!(column(&found["entries"], "id"), [id]);
    let (_, read) = content
        .get(&format!("/admin/api/cms/data/rows/{id}"), EDITOR_COOKIE)
        .await;
    assert_eq!(read["row"]["cells"]["body"], "Squash soup.");
    assert_eq!(content.cms.state().content().rows.len(), 5);
}
