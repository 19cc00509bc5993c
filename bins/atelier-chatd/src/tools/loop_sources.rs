//! `site_list_loop_sources`: the loop sources a `<instatic-loop>` can iterate and the data
//! tables it can iterate through `data.rows`, with the `{currentEntry.<field>}` token of
//! every field.
//!
//! The three built-in sources — `data.rows` (published rows of one data table),
//! `site.pages` (the site's pages) and `site.media` (the media library) — are defined in the
//! CMS's own code, so they are restated here with the labels, fields, filters and order
//! options the CMS gives them. The data tables are the caller's: [`loop_sources`] takes them
//! as a list, so whatever source the tables come from feeds the same answer.

use serde_json::{json, Value};

/// A field of a data table as the loop listing needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataTableField {
    /// Its id (the token's name).
    pub id: String,
    /// Its label.
    pub label: String,
    /// Its type (`text`, `richText`, `media`, `relation`, …).
    pub kind: String,
    /// The table a relation field points to.
    pub target_table_id: Option<String>,
}

/// A data table (collection) of the CMS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataTable {
    /// Its id, passed as `data-table-id`.
    pub id: String,
    /// Its slug.
    pub slug: String,
    /// Its name.
    pub name: String,
    /// `postType`, `page`, `data`, ….
    pub kind: String,
    /// One row's label.
    pub singular_label: Option<String>,
    /// Several rows' label.
    pub plural_label: Option<String>,
    /// The field that names a row.
    pub primary_field_id: Option<String>,
    /// Where its rows are routed; empty when not routable.
    pub route_base: String,
    /// How many rows it has.
    pub row_count: usize,
    /// Its fields.
    pub fields: Vec<DataTableField>,
}

/// A built-in source field: id, label, and how a loop renders it.
type SourceField = (&'static str, &'static str, Option<&'static str>);

const DATA_ROWS_FIELDS: [SourceField; 15] = [
    ("slug", "Slug", None),
    ("title", "Title (post-type)", None),
    ("authorName", "Author name", None),
    ("authorRoleName", "Author role", None),
    ("body", "Body (post-type, markdown)", Some("html")),
    ("featuredMedia", "Featured media (post-type)", Some("media")),
    ("firstImage", "First inline image", Some("media")),
    ("seoTitle", "SEO title (post-type)", None),
    ("seoDescription", "SEO description (post-type)", None),
    ("permalink", "Permalink", Some("url")),
    ("publishedAt", "Published date", None),
    ("publishedByName", "Published by", None),
    ("publishedByRoleName", "Publisher role", None),
    ("createdAt", "Created date", None),
    ("updatedAt", "Updated date", None),
];

const SITE_PAGES_FIELDS: [SourceField; 3] = [
    ("title", "Title", None),
    ("slug", "Slug", None),
    ("permalink", "Permalink", Some("url")),
];

const SITE_MEDIA_FIELDS: [SourceField; 6] = [
    ("filename", "Filename", None),
    ("path", "Path", Some("url")),
    ("url", "URL", Some("url")),
    ("src", "Source URL", Some("media")),
    ("mimeType", "MIME type", None),
    ("createdAt", "Upload date", None),
];

fn token(field_id: &str) -> String {
    format!("{{currentEntry.{field_id}}}")
}

fn source_fields(fields: &[SourceField]) -> Vec<Value> {
    fields
        .iter()
        .map(|(id, label, format)| {
            let mut field = json!({"id": id, "label": label, "token": token(id)});
            if let Some(format) = format {
                field["format"] = json!(format);
            }
            field
        })
        .collect()
}

fn order_options(options: &[(&str, &str)]) -> Value {
    options
        .iter()
        .map(|(id, label)| json!({"id": id, "label": label}))
        .collect()
}

/// The built-in sources, in the CMS's registration order.
pub fn built_in_sources() -> Vec<Value> {
    let source = |id: &str,
                  label: &str,
                  description: &str,
                  fields: &[SourceField],
                  filter: Value,
                  order: Value| {
        json!({"id": id, "label": label, "description": description,
               "requestDependent": false, "perVisitor": false,
               "fields": source_fields(fields), "filterSchema": filter, "orderByOptions": order})
    };
    vec![
        source(
            "data.rows",
            "Data rows",
            "Loop published rows in a data table (posts, products, etc.).",
            &DATA_ROWS_FIELDS,
            json!({"tableId": {"type": "select", "label": "Table", "options": []}}),
            order_options(&[
                ("publishedAt", "Published date"),
                ("createdAt", "Created date"),
                ("updatedAt", "Last updated"),
                ("slug", "Slug (A–Z)"),
            ]),
        ),
        source(
            "site.pages",
            "Site pages",
            "Loop pages from the current site document — useful for nav menus and sitemaps.",
            &SITE_PAGES_FIELDS,
            json!({"excludeTemplates": {"type": "toggle", "label": "Exclude template pages"},
                   "templateOnly": {"type": "toggle", "label": "Only template pages"}}),
            order_options(&[
                ("definition", "Definition order"),
                ("title", "Title"),
                ("slug", "Slug"),
            ]),
        ),
        source(
            "site.media",
            "Media library",
            "Loop uploaded media assets — filter by mime-type to scope to images or videos.",
            &SITE_MEDIA_FIELDS,
            json!({"mimePrefix": {"type": "select", "label": "Media type", "options": [
                {"label": "All", "value": ""},
                {"label": "Images", "value": "image/"},
                {"label": "Videos", "value": "video/"},
                {"label": "Audio", "value": "audio/"},
            ]}}),
            order_options(&[("createdAt", "Upload date"), ("filename", "Filename")]),
        ),
    ]
}

/// How a table field renders in a loop, by its type.
fn field_format(kind: &str) -> Option<&'static str> {
    match kind {
        "richText" => Some("html"),
        "url" => Some("url"),
        "media" => Some("media"),
        _ => None,
    }
}

/// A table's bindable fields followed by the `data.rows` fields it does not define itself.
/// Whole-document fields (page trees, field schemas) cannot be bound and relations to tables
/// not in `tables` lead nowhere, so both are left out.
fn table_fields(table: &DataTable, tables: &[DataTable]) -> Vec<Value> {
    let mut fields: Vec<Value> = Vec::new();
    let mut push = |id: &str, field: Value| {
        match fields.iter_mut().find(|f| f["id"] == id) {
            // A later field with the same id replaces the earlier one in place.
            Some(existing) => *existing = field,
            None => fields.push(field),
        }
    };
    for field in &table.fields {
        if matches!(field.kind.as_str(), "pageTree" | "fieldSchema") {
            continue;
        }
        if field.kind == "relation" {
            let target = field.target_table_id.as_deref();
            if !tables.iter().any(|t| Some(t.id.as_str()) == target) {
                continue;
            }
        }
        let mut entry = json!({"id": field.id, "label": field.label, "type": field.kind,
                               "token": token(&field.id)});
        if let Some(format) = field_format(&field.kind) {
            entry["format"] = json!(format);
        }
        push(&field.id, entry);
    }
    for entry in source_fields(&DATA_ROWS_FIELDS) {
        let id = entry["id"].as_str().unwrap_or_default().to_owned();
        push(&id, entry);
    }
    fields
}

/// The whole `site_list_loop_sources` answer: usage notes, the built-in sources, and
/// `tables` with their row counts and field tokens.
pub fn loop_sources(tables: &[DataTable]) -> Value {
    let data_tables: Vec<Value> = tables
        .iter()
        .map(|table| {
            json!({
                "id": table.id, "slug": table.slug, "name": table.name, "kind": table.kind,
                "singularLabel": table.singular_label, "pluralLabel": table.plural_label,
                "primaryFieldId": table.primary_field_id,
                "routable": !table.route_base.is_empty(),
                "versioned": table.kind == "postType",
                "rowCount": table.row_count,
                "fields": table_fields(table, tables),
            })
        })
        .collect();
    json!({
        "usage": {
            "loopElement": "<instatic-loop data-source-id=\"data.rows\" data-table-id=\"<table id>\" data-order-by=\"publishedAt\" data-direction=\"desc\" data-limit=\"3\">...</instatic-loop>",
            "tokenSyntax": "{currentEntry.field}",
            "invalidTokenSyntax": "{{post.field}}",
        },
        "sources": built_in_sources(),
        "dataTables": data_tables,
    })
}
