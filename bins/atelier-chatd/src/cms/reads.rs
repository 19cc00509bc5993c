//! The CMS's content as one signed-in user sees it, for the length of a chat turn: the data
//! tables, a table's rows, one row, the slug search, the users who can author, and the media
//! library — each from the CMS's own read route, asked with that user's session cookie and
//! nothing else, so the CMS applies its own rules (a user who may edit only their own rows is
//! shown only those).
//!
//! [`CmsReader`] holds the cookie for one turn and writes it nowhere: not to the database, not
//! to a log line, not into an error. Answers are parsed here into typed values; a refusal or a
//! failure is a [`ReadError`], which a tool names to the model.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{CmsClient, CmsError};
use crate::caller::SessionCookie;
use crate::encode::encode_component;

/// The data tables, with their live row counts.
pub const TABLES_PATH: &str = "/admin/api/cms/data/tables";

/// One row, by id.
const ROWS_PATH: &str = "/admin/api/cms/data/rows";

/// Rows across tables whose slug contains a query.
const SEARCH_PATH: &str = "/admin/api/cms/data/search";

/// The users a row can be given to (for `content.edit.any`/`content.manage`).
const AUTHORS_PATH: &str = "/admin/api/cms/data/authors";

/// Every user (for `users.manage`).
const USERS_PATH: &str = "/admin/api/cms/users";

/// The media library.
const MEDIA_PATH: &str = "/admin/api/cms/media";

/// The largest list read: a table's rows carry every cell of every row, bodies included.
const MAX_LIST_BODY: usize = 16 * 1024 * 1024; // 16 MiB

/// The largest single row read.
const MAX_ROW_BODY: usize = 4 * 1024 * 1024; // 4 MiB

/// The most search entries the CMS gives for one query.
pub const MAX_SEARCH_LIMIT: usize = 100;

/// Why a read gave no answer. Its text is what a tool tells the model; the log has the rest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The CMS has no such table or row (or the id could not name one).
    #[error("not found")]
    NotFound,
    /// The user may not read this (403 from the CMS).
    #[error("forbidden by the CMS")]
    Forbidden,
    /// The CMS no longer knows the session (signed out or expired during the turn).
    #[error("the CMS no longer accepts this session; sign in again")]
    SignedOut,
    /// Nothing answered in time, or the CMS failed (5xx).
    #[error("the CMS did not answer")]
    Unavailable(CmsError),
    /// The answer is not the route's (another status, a body of another shape).
    #[error("the CMS's answer could not be read")]
    Unreadable(CmsError),
    /// The answer is larger than chatd reads of this route, in bytes: asking again (or for
    /// fewer items, which the CMS answers whole anyway) cannot help.
    #[error(
        "the CMS's answer is larger than the {} MiB chatd reads at once, so it cannot be read \
         whole; say so rather than retry",
        .0 / (1024 * 1024)
    )]
    TooLarge(usize),
}

impl ReadError {
    /// The error a tool reports: `<tool>: <what went wrong>.`
    pub fn for_tool(&self, tool: &str) -> String {
        format!("{tool}: {self}.")
    }
}

/// A data table as the CMS lists it (`DataTable` with its `rowCount`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataTable {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its slug.
    pub slug: String,
    /// `postType`, `page`, `data`, `component`, `layout`.
    pub kind: String,
    /// One row's label.
    #[serde(default)]
    pub singular_label: String,
    /// Several rows' label.
    #[serde(default)]
    pub plural_label: String,
    /// Where its rows are routed; empty when they are not.
    #[serde(default)]
    pub route_base: String,
    /// The field that names a row.
    #[serde(default)]
    pub primary_field_id: String,
    /// Its fields.
    #[serde(default)]
    pub fields: Vec<DataField>,
    /// How many rows it has, every author's.
    #[serde(default)]
    pub row_count: u64,
}

impl DataTable {
    /// The label the content workspace shows: the plural label, else the name.
    pub fn label(&self) -> &str {
        if self.plural_label.is_empty() {
            &self.name
        } else {
            &self.plural_label
        }
    }
}

/// A field of a table, with the parts of the CMS's field union a tool reports.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataField {
    /// Its id (the key of its cell).
    pub id: String,
    /// Its label.
    pub label: String,
    /// Its type (`text`, `richText`, `select`, `media`, `relation`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether a value is required.
    #[serde(default)]
    pub required: Option<bool>,
    /// Whether the table's kind defines it.
    #[serde(default)]
    pub built_in: Option<bool>,
    /// The choices of a select or multi-select.
    #[serde(default)]
    pub options: Option<Vec<SelectOption>>,
    /// What a media field takes (`image`, `video`, `any`).
    #[serde(default)]
    pub media_kind: Option<String>,
    /// Whether a media or relation field takes several values.
    #[serde(default)]
    pub allow_multiple: Option<bool>,
    /// The table a relation points to.
    #[serde(default)]
    pub target_table_id: Option<String>,
}

/// One choice of a select field; a cell holds its id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SelectOption {
    /// Its id, the value stored in a cell.
    pub id: String,
    /// What is shown.
    pub label: String,
}

/// A row (document) as the CMS answers it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataRow {
    /// Its id.
    pub id: String,
    /// Its table.
    pub table_id: String,
    /// Its values by field id.
    #[serde(default)]
    pub cells: Map<String, Value>,
    /// Its slug (empty in a table without one).
    #[serde(default)]
    pub slug: String,
    /// `draft`, `unpublished`, `published` or `scheduled`.
    pub status: String,
    /// Its author.
    #[serde(default)]
    pub author_user_id: Option<String>,
    /// When it was made.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was published.
    #[serde(default)]
    pub published_at: Option<String>,
    /// When it is to be published.
    #[serde(default)]
    pub scheduled_publish_at: Option<String>,
}

impl DataRow {
    /// The name it goes by: its title cell, else its slug cell, else its slug, else its id.
    pub fn title(&self) -> &str {
        let cell = |id: &str| {
            self.cells
                .get(id)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        cell("title")
            .or_else(|| cell("slug"))
            .or_else(|| Some(self.slug.as_str()).filter(|s| !s.is_empty()))
            .unwrap_or(&self.id)
    }
}

/// A search hit, as the CMS gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchEntry {
    /// The row's id.
    pub id: String,
    /// Its table.
    pub table_id: String,
    /// Its table's slug.
    pub table_slug: String,
    /// Its table's name.
    pub table_name: String,
    /// Its slug.
    pub slug: String,
    /// Its status.
    pub status: String,
    /// When it last changed.
    pub updated_at: String,
}

/// A user who can be made a row's author.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Author {
    /// Their id.
    pub id: String,
    /// Their email.
    pub email: String,
    /// Their display name.
    pub display_name: String,
    /// Their role's slug.
    pub role_slug: Option<String>,
    /// Their role's name.
    pub role_name: Option<String>,
}

/// A media asset, with the parts a tool reports.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaAsset {
    /// Its id.
    pub id: String,
    /// Its file name.
    pub filename: String,
    /// Where it is served.
    pub public_path: String,
    /// Its MIME type.
    pub mime_type: String,
    /// Its alt text (the CMS sends an empty one when there is none).
    #[serde(default)]
    pub alt_text: Option<String>,
    /// Width in px.
    #[serde(default)]
    pub width: Option<u64>,
    /// Height in px.
    #[serde(default)]
    pub height: Option<u64>,
}

#[derive(Deserialize)]
struct TablesAnswer {
    tables: Vec<DataTable>,
}

#[derive(Deserialize)]
struct RowsAnswer {
    rows: Vec<DataRow>,
}

#[derive(Deserialize)]
struct RowAnswer {
    row: DataRow,
}

#[derive(Deserialize)]
struct SearchAnswer {
    entries: Vec<SearchEntry>,
}

#[derive(Deserialize)]
struct AuthorsAnswer {
    authors: Vec<Author>,
}

#[derive(Deserialize)]
struct UsersAnswer {
    users: Vec<CmsUser>,
}

/// A user as `GET /admin/api/cms/users` lists them, the parts an author option needs.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CmsUser {
    id: String,
    email: String,
    display_name: String,
    status: String,
    role: CmsRole,
}

#[derive(Deserialize)]
struct CmsRole {
    slug: String,
    name: String,
}

#[derive(Deserialize)]
struct MediaAnswer {
    assets: Vec<MediaAsset>,
}

/// Reads one answer of a CMS read route: 200 with the route's body, or the error its status
/// means.
pub fn read_answer<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, ReadError> {
    match status {
        200 => serde_json::from_slice(body)
            .map_err(|error| ReadError::Unreadable(CmsError::BadAnswer(error.to_string()))),
        401 => Err(ReadError::SignedOut),
        403 => Err(ReadError::Forbidden),
        404 => Err(ReadError::NotFound),
        500..=599 => Err(ReadError::Unavailable(CmsError::UnexpectedStatus(status))),
        other => Err(ReadError::Unreadable(CmsError::UnexpectedStatus(other))),
    }
}

/// An id as one path segment: percent-encoded, so it cannot leave its place in the route; an id
/// of dots alone names no table or row (a URL parser would read it as a step up the path).
fn segment(id: &str) -> Result<String, ReadError> {
    if id.bytes().all(|b| b == b'.') {
        return Err(ReadError::NotFound);
    }
    Ok(encode_component(id))
}

/// The CMS's content as the user of one session sees it (see the module's doc).
#[derive(Clone)]
pub struct CmsReader {
    client: CmsClient,
    cookie: SessionCookie,
}

impl fmt::Debug for CmsReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmsReader")
            .field("cms", &self.client.origin())
            .finish_non_exhaustive()
    }
}

impl CmsReader {
    /// Reads from the CMS `client` calls, as the owner of `cookie`.
    pub fn new(client: CmsClient, cookie: SessionCookie) -> Self {
        CmsReader { client, cookie }
    }

    /// Every table the user may see, with its row count.
    pub async fn tables(&self) -> Result<Vec<DataTable>, ReadError> {
        let answer: TablesAnswer = self.get(TABLES_PATH, MAX_LIST_BODY).await?;
        Ok(answer.tables)
    }

    /// The rows of table `table_id` the user may see, newest change first.
    pub async fn rows(&self, table_id: &str) -> Result<Vec<DataRow>, ReadError> {
        let path = format!("{TABLES_PATH}/{}/rows", segment(table_id)?);
        let answer: RowsAnswer = self.get(&path, MAX_LIST_BODY).await?;
        Ok(answer.rows)
    }

    /// Row `row_id`.
    pub async fn row(&self, row_id: &str) -> Result<DataRow, ReadError> {
        let path = format!("{ROWS_PATH}/{}", segment(row_id)?);
        let answer: RowAnswer = self.get(&path, MAX_ROW_BODY).await?;
        Ok(answer.row)
    }

    /// At most `limit` (capped at [`MAX_SEARCH_LIMIT`]) rows the user may see whose slug
    /// contains `query`, newest change first.
    pub async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchEntry>, ReadError> {
        let path = format!(
            "{SEARCH_PATH}?query={}&limit={}",
            encode_component(query),
            limit.clamp(1, MAX_SEARCH_LIMIT)
        );
        let answer: SearchAnswer = self.get(&path, MAX_LIST_BODY).await?;
        Ok(answer.entries)
    }

    /// The active users who can author rows. The CMS's author list needs
    /// `content.edit.any` or `content.manage`; a user refused it who manages users gets the
    /// same list from the user list instead.
    pub async fn authors(&self) -> Result<Vec<Author>, ReadError> {
        match self.get::<AuthorsAnswer>(AUTHORS_PATH, MAX_LIST_BODY).await {
            Err(ReadError::Forbidden) => {}
            other => return other.map(|answer| answer.authors),
        }
        let answer: UsersAnswer = self.get(USERS_PATH, MAX_LIST_BODY).await?;
        let mut authors: Vec<Author> = answer
            .users
            .into_iter()
            .filter(|user| user.status == "active")
            .map(|user| Author {
                id: user.id,
                email: user.email,
                display_name: user.display_name,
                role_slug: Some(user.role.slug),
                role_name: Some(user.role.name),
            })
            .collect();
        // The author list's order.
        authors.sort_by(|a, b| (&a.display_name, &a.email).cmp(&(&b.display_name, &b.email)));
        Ok(authors)
    }

    /// Every media asset not in the trash.
    pub async fn media(&self) -> Result<Vec<MediaAsset>, ReadError> {
        let answer: MediaAnswer = self.get(MEDIA_PATH, MAX_LIST_BODY).await?;
        Ok(answer.assets)
    }

    async fn get<T: DeserializeOwned>(
        &self,
        path_and_query: &str,
        limit: usize,
    ) -> Result<T, ReadError> {
        let failed = |error: CmsError| {
            // The route, never the request: its cookie stays out of the log.
            let route = path_and_query.split('?').next().unwrap_or_default();
            tracing::warn!(%error, cms = %self.client.origin(), route, "a content read failed");
            match error {
                CmsError::Unreachable(_) | CmsError::TimedOut(_) => ReadError::Unavailable(error),
                CmsError::TooLarge(limit) => ReadError::TooLarge(limit),
                CmsError::UnexpectedStatus(_) | CmsError::BadAnswer(_) => {
                    ReadError::Unreadable(error)
                }
            }
        };
        let request = self
            .client
            .get_request(path_and_query, &self.cookie)
            .map_err(failed)?;
        let (status, _, body) = self.client.exchange(request, limit).await.map_err(failed)?;
        read_answer(status.as_u16(), &body)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn statuses_become_the_errors_a_tool_names() {
        type Rows = Result<Vec<DataRow>, ReadError>;
        let cases: [(&str, u16, &str, Rows); 8] = [
            ("rows", 200, r#"{"rows": []}"#, Ok(vec![])),
            (
                "no session",
                401,
                r#"{"error":"Unauthorized"}"#,
                Err(ReadError::SignedOut),
            ),
            (
                "forbidden",
                403,
                r#"{"error":"Forbidden"}"#,
                Err(ReadError::Forbidden),
            ),
            (
                "not found",
                404,
                r#"{"error":"Table not found"}"#,
                Err(ReadError::NotFound),
            ),
            (
                "failed",
                502,
                "",
                Err(ReadError::Unavailable(CmsError::UnexpectedStatus(502))),
            ),
            (
                "redirect",
                302,
                "",
                Err(ReadError::Unreadable(CmsError::UnexpectedStatus(302))),
            ),
            (
                "another shape",
                200,
                r#"{"tables": []}"#,
                Err(ReadError::Unreadable(CmsError::BadAnswer(String::new()))),
            ),
            (
                "not JSON",
                200,
                "<html>",
                Err(ReadError::Unreadable(CmsError::BadAnswer(String::new()))),
            ),
        ];
        for (name, status, body, expected) in cases {
            // serde's wording is its own: only the kind of error is compared.
            let got = read_answer::<RowsAnswer>(status, body.as_bytes())
                .map(|a| a.rows)
                .map_err(|error| match error {
                    ReadError::Unreadable(CmsError::BadAnswer(_)) => {
                        ReadError::Unreadable(CmsError::BadAnswer(String::new()))
                    }
                    other => other,
                });
            assert_eq!(got, expected, "{name}");
        }
        assert_eq!(
            ReadError::Forbidden.for_tool("content_get_document"),
            "content_get_document: forbidden by the CMS."
        );
        assert_eq!(
            ReadError::TooLarge(MAX_LIST_BODY).for_tool("content_list_documents"),
            "content_list_documents: the CMS's answer is larger than the 16 MiB chatd reads at \
             once, so it cannot be read whole; say so rather than retry."
        );
    }

    #[test]
    fn ids_stay_in_their_path_segment() {
        let cases = [
            ("row_launch", Ok("row_launch".to_owned())),
            ("a/b", Ok("a%2Fb".to_owned())),
            ("x?y#z", Ok("x%3Fy%23z".to_owned())),
            ("%2e%2e", Ok("%252e%252e".to_owned())),
            ("..", Err(ReadError::NotFound)),
            (".", Err(ReadError::NotFound)),
        ];
        for (id, expected) in cases {
            assert_eq!(segment(id), expected, "{id}");
        }
    }

    #[test]
    fn a_row_is_named_by_its_title_then_its_slugs_then_its_id() {
        let row = |cells: Value, slug: &str| DataRow {
            id: "row_1".into(),
            table_id: "t".into(),
            cells: cells.as_object().cloned().unwrap_or_default(),
            slug: slug.into(),
            status: "draft".into(),
            author_user_id: None,
            created_at: String::new(),
            updated_at: String::new(),
            published_at: None,
            scheduled_publish_at: None,
        };
        let cases = [
            (json!({"title": "Launch", "slug": "s"}), "x", "Launch"),
            (json!({"title": "", "slug": "cell-slug"}), "x", "cell-slug"),
            (json!({"title": 3}), "row-slug", "row-slug"),
            (json!({}), "", "row_1"),
        ];
        for (cells, slug, title) in cases {
            assert_eq!(row(cells.clone(), slug).title(), title, "{cells}");
        }
    }
}
