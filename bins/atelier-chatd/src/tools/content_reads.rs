//! The content workspace's seven server-side reads, answered from the CMS itself as the
//! chatting user ([`CmsReader`]), so each read sees exactly what the CMS shows that user —
//! including a document the browser created a moment ago, and only their own rows when that is
//! all their role may read. The CMS's rows and assets are mapped onto the compact results the
//! model is given; lists are filtered and paged here, so a result stays small.

use serde_json::{json, Value};

use crate::cms::reads::{CmsReader, DataField, DataRow, DataTable, ReadError, MAX_SEARCH_LIMIT};

/// The kinds of collection the content workspace shows.
const VISIBLE_KINDS: [&str; 2] = ["postType", "page"];

/// A list's length when the model names none.
const DEFAULT_LIMIT: usize = 25;

/// Runs content read `name` on `input` (already validated); `Err` is the tool's error text.
pub async fn run(cms: &CmsReader, name: &str, input: &Value) -> Result<Value, String> {
    let failed = |error: ReadError| error.for_tool(name);
    let text = |key: &str| input[key].as_str().unwrap_or_default();
    match name {
        "content_list_collections" => list_collections(cms).await.map_err(failed),
        "content_get_collection_schema" => {
            let id = text("tableId");
            match collection_schema(cms, id).await {
                Ok(Some(schema)) => Ok(schema),
                Ok(None) => Err(format!("Collection {id} not found.")),
                Err(error) => Err(failed(error)),
            }
        }
        "content_list_documents" => match list_documents(cms, input).await {
            Err(ReadError::NotFound) => Err(format!("Collection {} not found.", text("tableId"))),
            other => other.map_err(failed),
        },
        "content_get_document" => match cms.row(text("documentId")).await {
            Ok(row) => Ok(document(&row)),
            Err(ReadError::NotFound) => Err(format!("Document {} not found.", text("documentId"))),
            Err(error) => Err(failed(error)),
        },
        "content_search_documents" => search_documents(cms, input).await.map_err(failed),
        "content_list_users" => cms
            .authors()
            .await
            .map(|users| json!({ "users": users }))
            .map_err(failed),
        "content_list_media" => list_media(cms, input).await.map_err(failed),
        other => Err(format!("Unknown tool: {other}")),
    }
}

fn summary(table: &DataTable) -> Value {
    json!({
        "id": table.id,
        "slug": table.slug,
        "label": table.label(),
        "kind": table.kind,
        "rowCount": table.row_count,
        "primaryFieldId": table.primary_field_id,
    })
}

async fn list_collections(cms: &CmsReader) -> Result<Value, ReadError> {
    let collections: Vec<Value> = cms
        .tables()
        .await?
        .iter()
        .filter(|table| VISIBLE_KINDS.contains(&table.kind.as_str()))
        .map(summary)
        .collect();
    Ok(json!({ "collections": collections }))
}

fn field_view(field: &DataField) -> Value {
    let mut view = json!({
        "id": field.id, "label": field.label, "type": field.kind,
        "required": field.required.unwrap_or(false), "builtIn": field.built_in.unwrap_or(false),
    });
    match field.kind.as_str() {
        "select" | "multiSelect" => {
            // A cell holds the option's id, so that is the value the model writes.
            let options: Vec<Value> = field
                .options
                .iter()
                .flatten()
                .map(|o| json!({"value": o.id, "label": o.label}))
                .collect();
            view["options"] = json!(options);
        }
        "media" => {
            view["mediaKind"] = json!(field.media_kind);
            view["allowMultiple"] = json!(field.allow_multiple.unwrap_or(false));
        }
        "relation" => {
            view["targetTableId"] = json!(field.target_table_id);
            view["allowMultiple"] = json!(field.allow_multiple.unwrap_or(false));
        }
        _ => {}
    }
    view
}

/// The schema of table `id` among every table the user sees, not only the visible kinds: a
/// relation may point anywhere.
async fn collection_schema(cms: &CmsReader, id: &str) -> Result<Option<Value>, ReadError> {
    let tables = cms.tables().await?;
    Ok(tables.iter().find(|t| t.id == id).map(|table| {
        let mut view = summary(table);
        view["fields"] = table.fields.iter().map(field_view).collect();
        json!({ "collection": view })
    }))
}

fn light(row: &DataRow) -> Value {
    json!({
        "id": row.id, "tableId": row.table_id, "title": row.title(), "slug": row.slug,
        "status": row.status, "authorUserId": row.author_user_id, "updatedAt": row.updated_at,
    })
}

fn document(row: &DataRow) -> Value {
    json!({"document": {
        "id": row.id, "tableId": row.table_id, "title": row.title(), "slug": row.slug,
        "status": row.status, "authorUserId": row.author_user_id, "createdAt": row.created_at,
        "updatedAt": row.updated_at, "publishedAt": row.published_at,
        "scheduledPublishAt": row.scheduled_publish_at, "fields": row.cells,
    }})
}

fn usize_of(input: &Value, key: &str, default: usize) -> usize {
    input[key]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(default)
}

async fn list_documents(cms: &CmsReader, input: &Value) -> Result<Value, ReadError> {
    let limit = usize_of(input, "limit", DEFAULT_LIMIT);
    let offset = usize_of(input, "offset", 0);
    let rows = cms
        .rows(input["tableId"].as_str().unwrap_or_default())
        .await?;
    let matching: Vec<&DataRow> = rows
        .iter()
        .filter(|row| input["status"].as_str().is_none_or(|s| row.status == s))
        .filter(|row| {
            input["authorUserId"]
                .as_str()
                .is_none_or(|a| row.author_user_id.as_deref() == Some(a))
        })
        .collect();
    let page: Vec<Value> = matching
        .iter()
        .skip(offset)
        .take(limit)
        .map(|row| light(row))
        .collect();
    Ok(json!({"total": matching.len(), "offset": offset, "limit": limit, "documents": page}))
}

/// The CMS's slug search, narrowed to the content workspace's kinds of collection. As many
/// hits as the CMS gives are asked for, so that hits in hidden tables do not crowd out the
/// limit's worth of visible ones.
async fn search_documents(cms: &CmsReader, input: &Value) -> Result<Value, ReadError> {
    let query = input["query"].as_str().unwrap_or_default();
    let limit = usize_of(input, "limit", DEFAULT_LIMIT);
    let (entries, tables) = tokio::join!(cms.search(query, MAX_SEARCH_LIMIT), cms.tables());
    let (entries, tables) = (entries?, tables?);
    let results: Vec<_> = entries
        .into_iter()
        .filter(|entry| {
            tables
                .iter()
                .any(|t| t.id == entry.table_id && VISIBLE_KINDS.contains(&t.kind.as_str()))
        })
        .take(limit)
        .collect();
    Ok(json!({"query": query, "results": results}))
}

/// Media whose file name or alt text contains `query` and whose MIME type contains `mimeType`,
/// both without case.
async fn list_media(cms: &CmsReader, input: &Value) -> Result<Value, ReadError> {
    let query = input["query"].as_str().unwrap_or_default().to_lowercase();
    let mime = input["mimeType"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    let limit = usize_of(input, "limit", DEFAULT_LIMIT);
    let assets = cms.media().await?;
    let matching: Vec<Value> = assets
        .iter()
        .filter(|m| {
            format!("{} {}", m.filename, m.alt_text.as_deref().unwrap_or(""))
                .to_lowercase()
                .contains(&query)
        })
        .filter(|m| m.mime_type.to_lowercase().contains(&mime))
        .map(|m| {
            json!({
                "id": m.id, "filename": m.filename, "publicPath": m.public_path,
                "mimeType": m.mime_type, "altText": m.alt_text, "width": m.width,
                "height": m.height,
            })
        })
        .collect();
    let total = matching.len();
    let media: Vec<Value> = matching.into_iter().take(limit).collect();
    Ok(json!({"total": total, "media": media}))
}
