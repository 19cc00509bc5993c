//! The content store the content tools read: collections with their field schemas, documents,
//! users and media, in chatd's SQLite. It is filled from a JSON export of the CMS with
//! `atelier-chatd import-content`, which replaces it whole in one transaction.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError};

/// A field of a collection's schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Field {
    /// Its id (the key in a document's fields).
    pub id: String,
    /// Its label.
    pub label: String,
    /// Its type (`text`, `body`, `richText`, `select`, `media`, `relation`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether a value is required.
    #[serde(default)]
    pub required: bool,
    /// Whether the CMS defines it (title, slug, …).
    #[serde(default)]
    pub built_in: bool,
    /// The choices of a select or multi-select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<FieldOption>>,
    /// The media kind of a media field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_kind: Option<String>,
    /// Whether a media or relation field takes several values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_multiple: Option<bool>,
    /// The collection a relation points to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_table_id: Option<String>,
    /// How a loop renders the value (`date`, `url`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// One choice of a select field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldOption {
    /// The stored value.
    pub value: String,
    /// What is shown.
    pub label: String,
}

/// A collection (a data table of the CMS).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Collection {
    /// Its id.
    pub id: String,
    /// Its slug.
    pub slug: String,
    /// Its name.
    pub name: String,
    /// One item's label.
    #[serde(default)]
    pub singular_label: Option<String>,
    /// Several items' label.
    #[serde(default)]
    pub plural_label: Option<String>,
    /// `postType`, `page`, or another kind of table.
    pub kind: String,
    /// Where its documents are routed; empty when not routable.
    #[serde(default)]
    pub route_base: String,
    /// The field that names a document.
    #[serde(default)]
    pub primary_field_id: Option<String>,
    /// Whether documents keep versions.
    #[serde(default)]
    pub versioned: bool,
    /// Its field schema.
    pub fields: Vec<Field>,
}

/// A document of a collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Document {
    /// Its id.
    pub id: String,
    /// Its collection.
    pub collection_id: String,
    /// Its title.
    pub title: String,
    /// Its slug.
    #[serde(default)]
    pub slug: Option<String>,
    /// `draft`, `unpublished`, `published` or `scheduled`.
    pub status: String,
    /// Its author.
    #[serde(default)]
    pub author_user_id: Option<String>,
    /// Its field values by field id.
    #[serde(default)]
    pub fields: serde_json::Map<String, Value>,
    /// When it was created (ISO 8601).
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was published.
    #[serde(default)]
    pub published_at: Option<String>,
    /// When it is scheduled to publish.
    #[serde(default)]
    pub scheduled_publish_at: Option<String>,
}

/// A user who can author documents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContentUser {
    /// Their id.
    pub id: String,
    /// Their email.
    pub email: String,
    /// Their display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Their role's slug.
    #[serde(default)]
    pub role_slug: Option<String>,
    /// Their role's name.
    #[serde(default)]
    pub role_name: Option<String>,
}

/// A media asset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Media {
    /// Its id.
    pub id: String,
    /// Its file name.
    pub filename: String,
    /// Where it is served.
    pub public_path: String,
    /// Its MIME type.
    pub mime_type: String,
    /// Its alt text.
    #[serde(default)]
    pub alt_text: Option<String>,
    /// Width in px, for images.
    #[serde(default)]
    pub width: Option<u32>,
    /// Height in px, for images.
    #[serde(default)]
    pub height: Option<u32>,
}

/// A whole content export, as `import-content` reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentExport {
    /// Collections.
    #[serde(default)]
    pub collections: Vec<Collection>,
    /// Documents.
    #[serde(default)]
    pub documents: Vec<Document>,
    /// Users.
    #[serde(default)]
    pub users: Vec<ContentUser>,
    /// Media.
    #[serde(default)]
    pub media: Vec<Media>,
}

/// Why an export is refused; nothing is imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentImportError {
    /// Two records of one kind share an id or a collection slug.
    #[error("duplicate {kind} {id:?}")]
    Duplicate {
        /// `collection`, `document`, …
        kind: &'static str,
        /// The id.
        id: String,
    },
    /// A document names a collection the export does not have.
    #[error("document {document:?} belongs to unknown collection {collection:?}")]
    UnknownCollection {
        /// The document.
        document: String,
        /// Its collection.
        collection: String,
    },
    /// A document's status is not one of the four.
    #[error("document {document:?} has unknown status {status:?}")]
    BadStatus {
        /// The document.
        document: String,
        /// Its status.
        status: String,
    },
    /// A required text is empty.
    #[error("{kind} {id:?} has an empty {field}")]
    Empty {
        /// What has it.
        kind: &'static str,
        /// Its id.
        id: String,
        /// Which field.
        field: &'static str,
    },
}

/// How much an import stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImportCounts {
    /// Collections.
    pub collections: usize,
    /// Documents.
    pub documents: usize,
    /// Users.
    pub users: usize,
    /// Media.
    pub media: usize,
}

fn unique<'a>(
    kind: &'static str,
    ids: impl Iterator<Item = &'a str>,
) -> Result<(), ContentImportError> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if id.is_empty() {
            return Err(ContentImportError::Empty {
                kind,
                id: String::new(),
                field: "id",
            });
        }
        if !seen.insert(id) {
            return Err(ContentImportError::Duplicate {
                kind,
                id: id.to_owned(),
            });
        }
    }
    Ok(())
}

impl ContentExport {
    /// Checks the export's own consistency.
    pub fn validate(&self) -> Result<(), ContentImportError> {
        unique("collection", self.collections.iter().map(|c| c.id.as_str()))?;
        unique(
            "collection slug",
            self.collections.iter().map(|c| c.slug.as_str()),
        )?;
        unique("document", self.documents.iter().map(|d| d.id.as_str()))?;
        unique("user", self.users.iter().map(|u| u.id.as_str()))?;
        unique("media", self.media.iter().map(|m| m.id.as_str()))?;
        for document in &self.documents {
            if !self
                .collections
                .iter()
                .any(|c| c.id == document.collection_id)
            {
                return Err(ContentImportError::UnknownCollection {
                    document: document.id.clone(),
                    collection: document.collection_id.clone(),
                });
            }
            if !crate::tools::content::STATUSES.contains(&document.status.as_str()) {
                return Err(ContentImportError::BadStatus {
                    document: document.id.clone(),
                    status: document.status.clone(),
                });
            }
        }
        Ok(())
    }
}

impl Store {
    /// Replaces the whole content store with `export`, in one transaction.
    pub fn replace_content(&self, export: &ContentExport) -> Result<ImportCounts, StoreError> {
        let mut connection = self.connection()?;
        let transaction = connection.transaction()?;
        transaction.execute_batch(
            "DELETE FROM content_documents; DELETE FROM content_collections;
             DELETE FROM content_users; DELETE FROM content_media;",
        )?;
        for (position, collection) in export.collections.iter().enumerate() {
            transaction.execute(
                "INSERT INTO content_collections (id, position, record_json) VALUES (?1, ?2, ?3)",
                params![
                    collection.id,
                    position as i64,
                    serde_json::to_string(collection)?
                ],
            )?;
        }
        for (position, document) in export.documents.iter().enumerate() {
            transaction.execute(
                "INSERT INTO content_documents (id, collection_id, position, record_json)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    document.id,
                    document.collection_id,
                    position as i64,
                    serde_json::to_string(document)?
                ],
            )?;
        }
        for (position, user) in export.users.iter().enumerate() {
            transaction.execute(
                "INSERT INTO content_users (id, position, record_json) VALUES (?1, ?2, ?3)",
                params![user.id, position as i64, serde_json::to_string(user)?],
            )?;
        }
        for (position, media) in export.media.iter().enumerate() {
            transaction.execute(
                "INSERT INTO content_media (id, position, record_json) VALUES (?1, ?2, ?3)",
                params![media.id, position as i64, serde_json::to_string(media)?],
            )?;
        }
        transaction.commit()?;
        Ok(ImportCounts {
            collections: export.collections.len(),
            documents: export.documents.len(),
            users: export.users.len(),
            media: export.media.len(),
        })
    }

    fn records<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<T>, StoreError> {
        let connection = self.connection()?;
        let mut statement = connection.prepare_cached(sql)?;
        let rows = statement.query_map(args, |row| row.get::<_, String>(0))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(serde_json::from_str(&row?)?);
        }
        Ok(out)
    }

    /// Every collection, in export order.
    pub fn collections(&self) -> Result<Vec<Collection>, StoreError> {
        self.records(
            "SELECT record_json FROM content_collections ORDER BY position",
            &[],
        )
    }

    /// The documents of collection `id`, in export order.
    pub fn collection_documents(&self, id: &str) -> Result<Vec<Document>, StoreError> {
        self.records(
            "SELECT record_json FROM content_documents WHERE collection_id = ?1 ORDER BY position",
            &[&id],
        )
    }

    /// Every document, in export order.
    pub fn all_documents(&self) -> Result<Vec<Document>, StoreError> {
        self.records(
            "SELECT record_json FROM content_documents ORDER BY position",
            &[],
        )
    }

    /// Document `id`.
    pub fn content_document(&self, id: &str) -> Result<Option<Document>, StoreError> {
        let connection = self.connection()?;
        let json: Option<String> = connection
            .query_row(
                "SELECT record_json FROM content_documents WHERE id = ?1",
                [id],
                |row| row.get(0),
            )
            .optional()?;
        Ok(json.map(|j| serde_json::from_str(&j)).transpose()?)
    }

    /// Every user.
    pub fn content_users(&self) -> Result<Vec<ContentUser>, StoreError> {
        self.records(
            "SELECT record_json FROM content_users ORDER BY position",
            &[],
        )
    }

    /// Every media asset.
    pub fn content_media(&self) -> Result<Vec<Media>, StoreError> {
        self.records(
            "SELECT record_json FROM content_media ORDER BY position",
            &[],
        )
    }
}
