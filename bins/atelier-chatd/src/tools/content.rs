//! The content workspace's 15 tools: seven reads that chatd answers by asking the CMS as the
//! chatting user, eight run by the content editor in the browser. Names, shapes and capability
//! groups are the editor's contract; every description is Atelier's own.

use serde_json::Value;

use super::schema::{int_min, int_range, object, one_of_strings, record, s1, string, unknown};
use super::{Execution, ToolSpec};
use crate::store::Scope;

/// Any capability that lets a user work on documents.
pub const DOC_READ: &[&str] = &[
    "content.create",
    "content.edit.own",
    "content.edit.any",
    "content.publish.own",
    "content.publish.any",
    "content.manage",
];
/// Any capability that lets a user read collection schemas.
pub const SCHEMA_READ: &[&str] = &[
    "data.custom.tables.read",
    "data.custom.tables.manage",
    "data.system.tables.read",
    "data.system.tables.manage",
];
const EDIT: &[&str] = &["content.edit.own", "content.edit.any", "content.manage"];
const PUBLISH: &[&str] = &["content.publish.own", "content.publish.any"];
const AUTHOR: &[&str] = &["content.edit.any", "content.manage"];

/// The statuses a document can have.
pub const STATUSES: [&str; 4] = ["draft", "unpublished", "published", "scheduled"];

fn spec(
    name: &'static str,
    execution: Execution,
    mutates: bool,
    capabilities: &'static [&'static str],
    description: &'static str,
    input_schema: Value,
) -> ToolSpec {
    ToolSpec {
        name,
        scope: Scope::Content,
        execution,
        mutates,
        capabilities,
        description,
        input_schema,
    }
}

/// The content tools in the order they are offered: the seven reads, then the browser tools.
pub fn tools() -> Vec<ToolSpec> {
    use Execution::{Browser, Server};
    let document = || object(vec![("documentId", s1())], vec![]);
    vec![
        spec("content_list_collections", Server, false, SCHEMA_READ,
            "List the content collections (post types and pages) with id, slug, label, kind, number of documents and primary field.",
            object(vec![], vec![])),
        spec("content_get_collection_schema", Server, false, SCHEMA_READ,
            "Show one collection's fields: id, label, type, whether required or built in, and the options, media kind or relation target where the type has them. Read this before writing fields you have not seen.",
            object(vec![("tableId", s1())], vec![])),
        spec("content_list_documents", Server, false, DOC_READ,
            "List a collection's documents (id, title, slug, status, author, last update), optionally by status or author, limit documents (1–200, default 25) from offset.",
            object(
                vec![("tableId", s1())],
                vec![
                    ("status", one_of_strings(&STATUSES)),
                    ("authorUserId", s1()),
                    ("limit", int_range(1, 200)),
                    ("offset", int_min(0)),
                ],
            )),
        spec("content_get_document", Server, false, DOC_READ,
            "Read one document in full: every field value, status, author, slug and its dates.",
            document()),
        spec("content_search_documents", Server, false, DOC_READ,
            "Find documents whose slug contains the query (the slug follows the title), across the content collections (limit 1–100, default 25).",
            object(vec![("query", s1())], vec![("limit", int_range(1, 100))])),
        spec("content_list_users", Server, false, &["users.manage"],
            "List the users who can be set as authors: id, email, display name and role.",
            object(vec![], vec![])),
        spec("content_list_media", Server, false, &["media.read"],
            "Find media for media fields by a case-insensitive match on file name and alt text, and on MIME type (limit 1–100, default 25). Uploading stays with the user.",
            object(vec![], vec![("query", string()), ("mimeType", string()), ("limit", int_range(1, 100))])),
        spec("content_create_document", Browser, true, &["content.create"],
            "Create a draft in a collection, optionally with initial field values, and open it.",
            object(vec![("tableId", s1())], vec![("fields", record(unknown()))])),
        spec("content_delete_document", Browser, true, EDIT,
            "Move a document to the trash (it can be restored there).",
            document()),
        spec("content_set_document_status", Browser, true, PUBLISH,
            "Set a document's status; scheduled needs scheduledAt.",
            object(vec![("documentId", s1()), ("status", one_of_strings(&STATUSES))], vec![("scheduledAt", s1())])),
        spec("content_set_document_field", Browser, true, EDIT,
            "Write one field. Body fields take markdown.",
            object(vec![("documentId", s1()), ("fieldId", s1()), ("value", unknown())], vec![])),
        spec("content_set_document_fields", Browser, true, EDIT,
            "Write several fields in one save; prefer this when writing a whole post.",
            object(vec![("documentId", s1()), ("fields", record(unknown()))], vec![])),
        spec("content_set_document_author", Browser, true, AUTHOR,
            "Make another user the document's author (ids from content_list_users).",
            object(vec![("documentId", s1()), ("userId", s1())], vec![])),
        spec("content_set_active_document", Browser, true, &[],
            "Open a document in the editor so the next writes go to it.",
            document()),
        spec("content_set_active_collection", Browser, true, &[],
            "Switch the sidebar to a collection.",
            object(vec![("tableId", s1())], vec![])),
    ]
}
