//! The stand-in's content, in memory: data tables with their fields, rows with their authors,
//! media assets and the CMS's users; and the CMS's read routes over them, plus the one write a
//! test plays the browser with (creating a row), each checked the way the CMS checks it:
//!
//! - `GET /admin/api/cms/data/tables` → `{tables:[table + rowCount]}`: any table-read or
//!   content capability; a caller without a content capability sees only the families of
//!   tables its table-read capabilities name (system or custom).
//! - `GET /admin/api/cms/data/tables/:id/rows` → `{rows:[row]}`, newest change first; `POST`
//!   with `{cells}` → 201 `{row}`, a draft authored by the caller (`content.create`).
//! - `GET /admin/api/cms/data/rows/:id` → `{row}`, or 404 `Data row not found`.
//! - `GET /admin/api/cms/data/search?query=&limit=` → `{entries:[…]}`, matched on the slug.
//! - `GET /admin/api/cms/data/authors` → `{authors:[…]}` (`content.edit.any`/`content.manage`).
//! - `GET /admin/api/cms/users` → `{users:[user]}` (`users.manage`).
//! - `GET /admin/api/cms/media?query=&limit=` → `{assets:[asset]}` (`media.read`), matched on
//!   the file name and title.
//!
//! Rows are the CMS's own-rows rule's subject: without `content.edit.any`,
//! `content.publish.any` or `content.manage` a caller sees only the rows it owns (its
//! `authorUserId`, or its `createdByUserId` when the row has no author), and reading someone
//! else's row is 403. No session is 401, a missing capability 403 `{"error":"Forbidden"}`.
//!
//! [`ContentModel::lab`] is the seeded data: a `posts` table (title, slug, body, category,
//! cover) with three posts by two authors, a custom `team` table, two media assets and four
//! users. Writes are dated by a logical clock, one second apart, so a new row is always the
//! newest.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{authenticate, client, editor, error, CmsState, CmsUser, RecordedRequest};
use atelier_http::{json_response, Response};
use hyper::{Method, StatusCode};

/// The data routes' common prefix.
const DATA_PREFIX: &str = "/admin/api/cms/data/";

/// The tables route.
const TABLES_PATH: &str = "/admin/api/cms/data/tables";

/// The users route.
const USERS_PATH: &str = "/admin/api/cms/users";

/// The media library route.
const MEDIA_PATH: &str = "/admin/api/cms/media";

/// Any of these lets a user work with rows.
const DATA_ACCESS: [&str; 6] = [
    "content.create",
    "content.edit.own",
    "content.edit.any",
    "content.publish.own",
    "content.publish.any",
    "content.manage",
];

/// Any of these lets a user see every row, not only their own.
const ANY_ROW: [&str; 3] = ["content.edit.any", "content.publish.any", "content.manage"];

/// Any of these lets a user read the rows they own.
const OWN_ROW: [&str; 2] = ["content.edit.own", "content.publish.own"];

/// Any of these lets a user read table schemas.
const TABLE_READ: [&str; 4] = [
    "data.custom.tables.read",
    "data.custom.tables.manage",
    "data.system.tables.read",
    "data.system.tables.manage",
];

/// The most entries a search or table list answers with.
const MAX_LIMIT: usize = 100;

/// A search's entries when no limit is asked for.
const DEFAULT_LIMIT: usize = 25;

/// A data table, as the CMS's `DataTable`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabTable {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its slug.
    pub slug: String,
    /// `postType`, `page`, `data`, …
    pub kind: String,
    /// One row's label.
    pub singular_label: String,
    /// Several rows' label.
    pub plural_label: String,
    /// Where its rows are routed; empty when they are not.
    pub route_base: String,
    /// The field that names a row.
    pub primary_field_id: String,
    /// Its fields, in the CMS's field shapes.
    pub fields: Vec<Value>,
    /// Whether the CMS seeded it (system tables need the system read capabilities).
    pub system: bool,
    /// Who made it.
    pub created_by_user_id: Option<String>,
    /// Who changed it last.
    pub updated_by_user_id: Option<String>,
    /// When it was made.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
}

impl LabTable {
    fn has_field(&self, id: &str) -> bool {
        self.fields.iter().any(|field| field["id"] == id)
    }
}

/// A row of a data table, as the CMS's `DataRow` without its user references (added when it is
/// answered).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabRow {
    /// Its id.
    pub id: String,
    /// Its table.
    pub table_id: String,
    /// Its values by field id.
    pub cells: Map<String, Value>,
    /// Its slug (empty in a table without a slug field).
    pub slug: String,
    /// `draft`, `unpublished`, `published` or `scheduled`.
    pub status: String,
    /// Its author.
    pub author_user_id: Option<String>,
    /// Who made it.
    pub created_by_user_id: Option<String>,
    /// Who changed it last.
    pub updated_by_user_id: Option<String>,
    /// Who published it.
    pub published_by_user_id: Option<String>,
    /// When it was made.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was published.
    pub published_at: Option<String>,
    /// When it is to be published.
    pub scheduled_publish_at: Option<String>,
    /// When it was moved to the trash.
    pub deleted_at: Option<String>,
}

impl LabRow {
    /// Returns true if and only if `user_id` owns the row: its author, or its maker when it has
    /// no author.
    pub fn is_owned_by(&self, user_id: &str) -> bool {
        match &self.author_user_id {
            Some(author) => author == user_id,
            None => self.created_by_user_id.as_deref() == Some(user_id),
        }
    }
}

/// A media asset, as the CMS's `MediaAsset` (the fields the stand-in varies).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabMedia {
    /// Its id.
    pub id: String,
    /// Its file name.
    pub filename: String,
    /// Its MIME type.
    pub mime_type: String,
    /// Its size.
    pub size_bytes: u64,
    /// Where it is served.
    pub public_path: String,
    /// Who uploaded it.
    pub uploaded_by_user_id: Option<String>,
    /// When it was uploaded.
    pub created_at: String,
    /// Its alt text (empty when none).
    pub alt_text: String,
    /// Its caption.
    pub caption: String,
    /// Its title.
    pub title: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Width in px, for images and video.
    pub width: Option<u32>,
    /// Height in px, for images and video.
    pub height: Option<u32>,
    /// When it was moved to the trash.
    pub deleted_at: Option<String>,
}

impl LabMedia {
    /// The asset as the media route answers it: the varied fields and the CMS's others at their
    /// defaults.
    pub fn answer(&self) -> Value {
        let mut value = json!(self);
        for (key, default) in [
            ("durationMs", Value::Null),
            ("dominantColor", Value::Null),
            ("replacedAt", Value::Null),
            ("folderIds", json!([])),
            ("blurHash", Value::Null),
            ("variants", json!([])),
            ("posterPath", Value::Null),
            ("storageAdapterId", json!("")),
            ("externallyHosted", json!(false)),
        ] {
            value[key] = default;
        }
        value
    }
}

/// Everything the stand-in's content routes read and write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContentModel {
    /// The data tables, in the order they were made.
    pub tables: Vec<LabTable>,
    /// The rows of every table, in the order they were made.
    pub rows: Vec<LabRow>,
    /// The media library.
    pub media: Vec<LabMedia>,
    /// The CMS's users, all active, in the order they were made.
    pub users: Vec<CmsUser>,
    /// How many writes the logical clock has dated.
    writes: u32,
}

/// The seeded author who has a session ([`AUTHOR_COOKIE`](super::AUTHOR_COOKIE)).
pub fn ana() -> CmsUser {
    named(super::author(), "Ana Novak", "ana@lab.example")
}

/// The seeded author without a session.
pub fn ben() -> CmsUser {
    named(
        CmsUser::new(
            "usr_lab_writer_000000",
            "author",
            &["content.create", "content.edit.own", "content.publish.own"],
        ),
        "Ben Ortiz",
        "ben@lab.example",
    )
}

fn named(mut user: CmsUser, display_name: &str, email: &str) -> CmsUser {
    user.display_name = display_name.to_owned();
    user.email = email.to_owned();
    user
}

fn cells(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), value.clone()))
        .collect()
}

fn seeded_row(
    id: &str,
    table_id: &str,
    cells: Map<String, Value>,
    status: &str,
    author: Option<&str>,
    dates: (&str, &str),
) -> LabRow {
    let slug = cells
        .get("slug")
        .and_then(Value::as_str)
        .map(slugify)
        .unwrap_or_default();
    LabRow {
        id: id.to_owned(),
        table_id: table_id.to_owned(),
        cells,
        slug,
        status: status.to_owned(),
        author_user_id: author.map(str::to_owned),
        created_by_user_id: author.map(str::to_owned),
        updated_by_user_id: author.map(str::to_owned),
        published_by_user_id: None,
        created_at: dates.0.to_owned(),
        updated_at: dates.1.to_owned(),
        published_at: None,
        scheduled_publish_at: None,
        deleted_at: None,
    }
}

impl ContentModel {
    /// The stand-in's seeded content: a `posts` table with three posts by two authors (Ana's
    /// published launch post and scheduled teaser, Ben's draft guide), a custom `team` table
    /// with one row, two media assets, and the editor, client and both authors as users.
    pub fn lab() -> ContentModel {
        let (ana, ben) = (ana(), ben());
        let made = "2026-10-01T09:00:00.000Z";
        let table = |id: &str, name: &str, kind: &str, system: bool, fields: Vec<Value>| LabTable {
            id: id.to_owned(),
            name: name.to_owned(),
            slug: name.to_lowercase(),
            kind: kind.to_owned(),
            singular_label: name.trim_end_matches('s').to_owned(),
            plural_label: name.to_owned(),
            route_base: if kind == "postType" {
                format!("/{}", name.to_lowercase())
            } else {
                String::new()
            },
            primary_field_id: fields
                .first()
                .and_then(|f| f["id"].as_str())
                .unwrap_or_default()
                .to_owned(),
            fields,
            system,
            created_by_user_id: None,
            updated_by_user_id: None,
            created_at: made.to_owned(),
            updated_at: made.to_owned(),
        };
        let posts = table(
            "tbl_posts",
            "Posts",
            "postType",
            true,
            vec![
                json!({"id": "title", "label": "Title", "type": "text", "required": true, "builtIn": true}),
                json!({"id": "slug", "label": "Slug", "type": "text", "builtIn": true}),
                json!({"id": "body", "label": "Body", "type": "richText", "format": "markdown", "builtIn": true}),
                json!({"id": "category", "label": "Category", "type": "select", "options": [
                    {"id": "opt_news", "label": "News", "value": "news"},
                    {"id": "opt_howto", "label": "How-to", "value": "howto"}]}),
                json!({"id": "cover", "label": "Cover", "type": "media", "mediaKind": "image"}),
            ],
        );
        let team = table(
            "tbl_team",
            "Team",
            "data",
            false,
            vec![
                json!({"id": "name", "label": "Name", "type": "text", "required": true}),
                json!({"id": "slug", "label": "Slug", "type": "text"}),
                json!({"id": "lead", "label": "Lead", "type": "relation", "targetTableId": "tbl_team"}),
            ],
        );
        let mut launch = seeded_row(
            "row_launch",
            "tbl_posts",
            cells(&[
                ("title", json!("Launch day")),
                ("slug", json!("launch-day")),
                ("body", json!("# We launched\n\nToday.")),
                ("category", json!("opt_news")),
                ("cover", json!("med_hero")),
            ]),
            "published",
            Some(&ana.id),
            ("2026-11-01T09:00:00.000Z", "2026-11-02T10:00:00.000Z"),
        );
        launch.published_at = Some("2026-11-02T10:00:00.000Z".to_owned());
        launch.published_by_user_id = Some(ana.id.clone());
        let guide = seeded_row(
            "row_guide",
            "tbl_posts",
            cells(&[
                ("title", json!("Setup guide")),
                ("slug", json!("setup-guide")),
                ("category", json!("opt_howto")),
            ]),
            "draft",
            Some(&ben.id),
            ("2026-11-03T09:00:00.000Z", "2026-11-04T10:00:00.000Z"),
        );
        let mut later = seeded_row(
            "row_later",
            "tbl_posts",
            cells(&[
                ("title", json!("Coming soon")),
                ("slug", json!("coming-soon")),
            ]),
            "scheduled",
            Some(&ana.id),
            ("2026-11-05T09:00:00.000Z", "2026-11-05T09:00:00.000Z"),
        );
        later.scheduled_publish_at = Some("2026-12-24T09:00:00.000Z".to_owned());
        let mut crew = seeded_row(
            "row_crew",
            "tbl_team",
            cells(&[
                ("name", json!("Launch crew")),
                ("slug", json!("launch-crew")),
            ]),
            "draft",
            None,
            ("2026-10-02T09:00:00.000Z", "2026-10-02T09:00:00.000Z"),
        );
        crew.created_by_user_id = Some(editor().id);
        let asset =
            |id: &str, filename: &str, mime: &str, alt: &str, size: Option<(u32, u32)>| LabMedia {
                id: id.to_owned(),
                filename: filename.to_owned(),
                mime_type: mime.to_owned(),
                size_bytes: 48_213,
                public_path: format!("/uploads/{filename}"),
                uploaded_by_user_id: Some(ana.id.clone()),
                created_at: String::new(),
                alt_text: alt.to_owned(),
                caption: String::new(),
                title: String::new(),
                tags: Vec::new(),
                width: size.map(|s| s.0),
                height: size.map(|s| s.1),
                deleted_at: None,
            };
        let mut hero = asset(
            "med_hero",
            "hero.jpg",
            "image/jpeg",
            "Launch crowd",
            Some((1600, 900)),
        );
        hero.created_at = "2026-10-20T09:00:00.000Z".to_owned();
        let mut deck = asset("med_deck", "launch-deck.pdf", "application/pdf", "", None);
        deck.created_at = "2026-10-25T09:00:00.000Z".to_owned();
        ContentModel {
            tables: vec![posts, team],
            rows: vec![launch, guide, later, crew],
            media: vec![hero, deck],
            users: vec![editor(), client(), ana, ben],
            writes: 0,
        }
    }

    /// The next write's date: one second after the last, past every seeded date.
    fn tick(&mut self) -> String {
        let n = self.writes;
        self.writes += 1;
        format!(
            "2026-12-01T{:02}:{:02}:{:02}.000Z",
            (n / 3600) % 24,
            (n / 60) % 60,
            n % 60
        )
    }

    fn table(&self, id: &str) -> Option<&LabTable> {
        self.tables.iter().find(|t| t.id == id)
    }

    fn live_rows(&self) -> impl Iterator<Item = &LabRow> {
        self.rows.iter().filter(|r| r.deleted_at.is_none())
    }

    fn user_ref(&self, id: Option<&str>) -> Value {
        self.users
            .iter()
            .find(|u| Some(u.id.as_str()) == id)
            .map_or(Value::Null, author_option)
    }

    /// A row as the CMS answers it, with its user references.
    pub fn row_answer(&self, row: &LabRow) -> Value {
        let mut value = json!(row);
        for (key, id) in [
            ("author", &row.author_user_id),
            ("createdBy", &row.created_by_user_id),
            ("updatedBy", &row.updated_by_user_id),
            ("publishedBy", &row.published_by_user_id),
        ] {
            value[key] = self.user_ref(id.as_deref());
        }
        value
    }

    /// Makes a draft row in `table_id` authored by `user_id`; its slug comes from the `slug`
    /// cell (made URL-safe) when the table has a slug field.
    pub fn create_row(
        &mut self,
        table_id: &str,
        cells: Map<String, Value>,
        user_id: &str,
    ) -> Option<LabRow> {
        let slug = match self.table(table_id)? {
            table if table.has_field("slug") => cells
                .get("slug")
                .and_then(Value::as_str)
                .map(slugify)
                .unwrap_or_default(),
            _ => String::new(),
        };
        let now = self.tick();
        let mut row = seeded_row(
            &format!("row_lab_{:04}", self.rows.len() + 1),
            table_id,
            cells,
            "draft",
            Some(user_id),
            (&now, &now),
        );
        row.slug = slug;
        self.rows.push(row.clone());
        Some(row)
    }
}

/// A user as the CMS's author picker lists them.
fn author_option(user: &CmsUser) -> Value {
    json!({
        "id": user.id,
        "email": user.email,
        "displayName": user.display_name,
        "roleSlug": user.role.slug,
        "roleName": user.role.name,
    })
}

/// A user as `GET /admin/api/cms/users` lists them.
fn public_user(user: &CmsUser) -> Value {
    let mut value = user.me_body()["user"].clone();
    value["failedLoginCount"] = json!(0);
    value["lockedUntil"] = Value::Null;
    value["avatarUrl"] = Value::Null;
    value
}

/// The CMS's slug rule: lower case, runs of anything but letters and digits become one `-`,
/// none at either end.
pub fn slugify(text: &str) -> String {
    let mut slug = String::with_capacity(text.len());
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.trim_end_matches('-').to_owned()
}

fn has_any(user: &CmsUser, capabilities: &[&str]) -> bool {
    user.capabilities()
        .iter()
        .any(|c| capabilities.contains(&c.as_str()))
}

/// `%XX` escapes decoded, as `decodeURIComponent` (and, with `plus`, a form value) reads them;
/// a malformed escape stays as it is.
fn percent_decode(text: &str, plus: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', _) if plus => out.push(b' '),
            (byte, _) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `name` in a query string, decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(key, true) == name).then(|| percent_decode(value, true))
    })
}

/// A `limit` as the CMS reads it: a number clamped to 1..=[`MAX_LIMIT`], else `default`.
fn limit_param(query: Option<&str>, default: Option<usize>) -> Option<usize> {
    match query_param(query, "limit") {
        Some(text) => Some(
            text.trim()
                .parse::<usize>()
                .unwrap_or(DEFAULT_LIMIT)
                .clamp(1, MAX_LIMIT),
        ),
        None => default,
    }
}

fn forbidden() -> Response {
    error(StatusCode::FORBIDDEN, "Forbidden")
}

fn method_not_allowed() -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed")
}

/// The content routes a request may be for.
enum Route {
    Tables,
    TableRows(String),
    Row(String),
    Search,
    Authors,
    Users,
    Media,
}

impl Route {
    fn of(path: &str) -> Option<Route> {
        match path {
            TABLES_PATH => return Some(Route::Tables),
            USERS_PATH => return Some(Route::Users),
            MEDIA_PATH => return Some(Route::Media),
            _ => {}
        }
        let rest = path.strip_prefix(DATA_PREFIX)?;
        let segments: Vec<&str> = rest.split('/').collect();
        match segments.as_slice() {
            ["search"] => Some(Route::Search),
            ["authors"] => Some(Route::Authors),
            ["tables", id, "rows"] if !id.is_empty() => {
                Some(Route::TableRows(percent_decode(id, false)))
            }
            ["rows", id] if !id.is_empty() => Some(Route::Row(percent_decode(id, false))),
            _ => None,
        }
    }
}

/// Answers a request for one of the content routes, or `None` when it is for none of them.
pub(super) fn answer(
    state: &CmsState,
    request: &RecordedRequest,
    query: Option<&str>,
    cookie: Option<&str>,
) -> Option<Response> {
    let route = Route::of(&request.path)?;
    let writes = matches!(route, Route::TableRows(_));
    if request.method != Method::GET && !(writes && request.method == Method::POST) {
        return Some(method_not_allowed());
    }
    let user = match authenticate(state, cookie) {
        Ok(user) => user,
        Err(refusal) => return Some(error(StatusCode::UNAUTHORIZED, refusal)),
    };
    let mut content = super::lock(&state.content);
    Some(match route {
        Route::Tables => tables(&content, &user, query),
        Route::TableRows(id) if request.method == Method::POST => {
            create_row(&mut content, &user, &id, &request.body)
        }
        Route::TableRows(id) => rows(&content, &user, &id),
        Route::Row(id) => row(&content, &user, &id),
        Route::Search => search(&content, &user, query),
        Route::Authors => authors(&content, &user),
        Route::Users => users(&content, &user),
        Route::Media => media(&content, &user, query),
    })
}

fn tables(content: &ContentModel, user: &CmsUser, query: Option<&str>) -> Response {
    let content_access = has_any(user, &DATA_ACCESS);
    if !content_access && !has_any(user, &TABLE_READ) {
        return forbidden();
    }
    let filter = query_param(query, "query")
        .map(|q| q.trim().to_lowercase())
        .unwrap_or_default();
    let mut listed: Vec<&LabTable> = content
        .tables
        .iter()
        .filter(|t| {
            // A caller that picks loop sources (a content capability) sees every table; one
            // with table-read capabilities only sees the families they name.
            content_access
                || if t.system {
                    has_any(
                        user,
                        &["data.system.tables.read", "data.system.tables.manage"],
                    )
                } else {
                    has_any(
                        user,
                        &["data.custom.tables.read", "data.custom.tables.manage"],
                    )
                }
        })
        .filter(|t| {
            t.name.to_lowercase().contains(&filter) || t.slug.to_lowercase().contains(&filter)
        })
        .collect();
    listed.sort_by(|a, b| (&a.kind, &a.created_at).cmp(&(&b.kind, &b.created_at)));
    let limit = limit_param(query, None).unwrap_or(usize::MAX);
    let tables: Vec<Value> = listed
        .into_iter()
        .take(limit)
        .map(|table| {
            let mut value = json!(table);
            value["rowCount"] = json!(content
                .live_rows()
                .filter(|r| r.table_id == table.id)
                .count());
            value
        })
        .collect();
    json_response(StatusCode::OK, &json!({ "tables": tables }))
}

/// Returns true if and only if `user` may see `row` under the own-rows rule.
fn can_read(user: &CmsUser, row: &LabRow) -> bool {
    has_any(user, &ANY_ROW) || (row.is_owned_by(&user.id) && has_any(user, &OWN_ROW))
}

/// The rows `user` sees: all with an any-row capability, else only their own.
fn visible(user: &CmsUser, row: &LabRow) -> bool {
    has_any(user, &ANY_ROW) || row.is_owned_by(&user.id)
}

/// Newest change first, as the CMS orders rows.
fn newest_first(rows: &mut [&LabRow]) {
    rows.sort_by(|a, b| (&b.updated_at, &b.created_at).cmp(&(&a.updated_at, &a.created_at)));
}

fn rows(content: &ContentModel, user: &CmsUser, table_id: &str) -> Response {
    if !has_any(user, &DATA_ACCESS) {
        return forbidden();
    }
    if content.table(table_id).is_none() {
        return error(StatusCode::NOT_FOUND, "Table not found");
    }
    let mut listed: Vec<&LabRow> = content
        .live_rows()
        .filter(|r| r.table_id == table_id && visible(user, r))
        .collect();
    newest_first(&mut listed);
    let rows: Vec<Value> = listed.into_iter().map(|r| content.row_answer(r)).collect();
    json_response(StatusCode::OK, &json!({ "rows": rows }))
}

fn create_row(content: &mut ContentModel, user: &CmsUser, table_id: &str, body: &[u8]) -> Response {
    if !has_any(user, &["content.create"]) {
        return forbidden();
    }
    if content.table(table_id).is_none() {
        return error(StatusCode::NOT_FOUND, "Table not found");
    }
    let cells = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut body)) => match body.remove("cells") {
            None => Some(Map::new()),
            Some(Value::Object(cells)) => Some(cells),
            Some(_) => None,
        },
        _ => None,
    };
    let Some(cells) = cells else {
        return error(StatusCode::BAD_REQUEST, "Invalid row payload");
    };
    match content.create_row(table_id, cells, &user.id) {
        Some(row) => json_response(
            StatusCode::CREATED,
            &json!({ "row": content.row_answer(&row) }),
        ),
        None => error(StatusCode::NOT_FOUND, "Table not found"),
    }
}

fn row(content: &ContentModel, user: &CmsUser, id: &str) -> Response {
    if !has_any(user, &DATA_ACCESS) {
        return forbidden();
    }
    let Some(row) = content.live_rows().find(|r| r.id == id) else {
        return error(StatusCode::NOT_FOUND, "Data row not found");
    };
    if !can_read(user, row) {
        return forbidden();
    }
    json_response(StatusCode::OK, &json!({ "row": content.row_answer(row) }))
}

fn search(content: &ContentModel, user: &CmsUser, query: Option<&str>) -> Response {
    if !has_any(user, &DATA_ACCESS) {
        return forbidden();
    }
    let needle = query_param(query, "query")
        .map(|q| q.trim().to_lowercase())
        .unwrap_or_default();
    if needle.is_empty() {
        return json_response(StatusCode::OK, &json!({ "entries": [] }));
    }
    let limit = limit_param(query, Some(DEFAULT_LIMIT)).unwrap_or(DEFAULT_LIMIT);
    let mut matched: Vec<&LabRow> = content
        .live_rows()
        .filter(|r| r.slug.to_lowercase().contains(&needle) && visible(user, r))
        .collect();
    newest_first(&mut matched);
    let entries: Vec<Value> = matched
        .into_iter()
        .filter_map(|r| {
            let table = content.table(&r.table_id)?;
            Some(json!({
                "id": r.id, "tableId": r.table_id, "tableSlug": table.slug,
                "tableName": table.name, "slug": r.slug, "status": r.status,
                "updatedAt": r.updated_at,
            }))
        })
        .take(limit)
        .collect();
    json_response(StatusCode::OK, &json!({ "entries": entries }))
}

fn authors(content: &ContentModel, user: &CmsUser) -> Response {
    if !has_any(user, &["content.edit.any", "content.manage"]) {
        return forbidden();
    }
    let mut people: Vec<&CmsUser> = content.users.iter().collect();
    people.sort_by(|a, b| (&a.display_name, &a.email).cmp(&(&b.display_name, &b.email)));
    let authors: Vec<Value> = people.into_iter().map(author_option).collect();
    json_response(StatusCode::OK, &json!({ "authors": authors }))
}

fn users(content: &ContentModel, user: &CmsUser) -> Response {
    if !has_any(user, &["users.manage"]) {
        return forbidden();
    }
    let users: Vec<Value> = content.users.iter().map(public_user).collect();
    json_response(StatusCode::OK, &json!({ "users": users }))
}

fn media(content: &ContentModel, user: &CmsUser, query: Option<&str>) -> Response {
    if !has_any(user, &["media.read"]) {
        return forbidden();
    }
    let needle = query_param(query, "query")
        .map(|q| q.trim().to_lowercase())
        .unwrap_or_default();
    let mut listed: Vec<&LabMedia> = content
        .media
        .iter()
        .filter(|m| m.deleted_at.is_none())
        .filter(|m| {
            m.filename.to_lowercase().contains(&needle) || m.title.to_lowercase().contains(&needle)
        })
        .collect();
    listed.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    let limit = limit_param(query, None).unwrap_or(usize::MAX);
    let assets: Vec<Value> = listed
        .into_iter()
        .take(limit)
        .map(LabMedia::answer)
        .collect();
    json_response(StatusCode::OK, &json!({ "assets": assets }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn slugs_follow_the_cms_rule() {
        for (input, slug) in [
            ("Autumn menu", "autumn-menu"),
            ("  Café -- Crème!  ", "café-crème"),
            ("already-a-slug", "already-a-slug"),
            ("***", ""),
        ] {
            assert_eq!(slugify(input), slug, "{input}");
        }
    }

    #[test]
    fn query_values_are_decoded_like_a_form() {
        let query = Some("query=launch+day%21&limit=3&empty=");
        assert_eq!(query_param(query, "query").as_deref(), Some("launch day!"));
        assert_eq!(limit_param(query, None), Some(3));
        assert_eq!(query_param(query, "empty").as_deref(), Some(""));
        assert_eq!(query_param(query, "missing"), None);
        assert_eq!(limit_param(Some("limit=500"), None), Some(MAX_LIMIT));
        assert_eq!(limit_param(Some("limit=x"), None), Some(DEFAULT_LIMIT));
        assert_eq!(percent_decode("a%2Fb%zz", false), "a/b%zz");
    }

    #[test]
    fn ownership_is_the_author_or_else_the_maker() {
        let content = ContentModel::lab();
        let crew = content.rows.iter().find(|r| r.id == "row_crew").unwrap();
        assert!(crew.is_owned_by(&editor().id));
        let launch = content.rows.iter().find(|r| r.id == "row_launch").unwrap();
        assert!(launch.is_owned_by(&ana().id) && !launch.is_owned_by(&ben().id));
    }

    #[test]
    fn a_new_row_is_the_newest_and_takes_its_slug_from_the_slug_cell() {
        let mut content = ContentModel::lab();
        let cells = cells(&[
            ("title", json!("Autumn menu")),
            ("slug", json!("Autumn Menu")),
        ]);
        let row = content.create_row("tbl_posts", cells, &ben().id).unwrap();
        assert_eq!(row.slug, "autumn-menu");
        assert_eq!(
            (row.status.as_str(), row.author_user_id.as_deref()),
            ("draft", Some(ben().id.as_str()))
        );
        assert!(content.rows.iter().all(|r| r.updated_at <= row.updated_at));
        assert!(content.create_row("tbl_gone", Map::new(), "u").is_none());
    }
}
