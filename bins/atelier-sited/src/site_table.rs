//! The provisioner's site table `sites.json`, read (never written) on every use, and the proof
//! that a site's webspace is this instance's and writable.

use std::path::{Component, Path, PathBuf};

use atelier_fs::Root;
use atelier_layout::paths::INSTANCE_MARKER_FILE;
use atelier_layout::{files, stamp};

use crate::domain::normalize_domain;
use atelier_site_api::Slug;

/// The table is a few KiB; a bigger one is refused unread.
const MAX_TABLE_BYTES: u64 = 4 * 1024 * 1024;

/// A site table or webspace refusal: `409 webspace_unavailable` at request time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WebspaceError(pub String);

pub use atelier_layout::files::{SiteRow, SurfacePaths, Surfaces};

/// The verified table.
#[derive(Debug, Clone)]
pub struct SiteTable {
    rows: Vec<SiteRow>,
}

/// The directory the table at `path` is read from, opened as [`SiteTable::read`] opens it
/// (its own path may be a link the operator made; the table in it is never followed).
pub fn directory(path: &Path) -> Result<Root, WebspaceError> {
    let refuse = |why: String| WebspaceError(format!("site table {}: {why}", path.display()));
    let dir = path
        .parent()
        .ok_or_else(|| refuse("has no directory".into()))?;
    Root::open_following_symlink(dir).map_err(|e| refuse(e.to_string()))
}

impl SiteTable {
    /// Reads and verifies the table at `path` for `instance`: the stamp names this instance
    /// and kind, the body hashes to the stamp, and every row is well formed and unique.
    pub fn read(path: &Path, instance: &str) -> Result<SiteTable, WebspaceError> {
        let refuse = |why: String| WebspaceError(format!("site table {}: {why}", path.display()));
        let name = path
            .file_name()
            .ok_or_else(|| refuse("has no file name".into()))?;
        let bytes = directory(path)?
            .read_limited(name, MAX_TABLE_BYTES)
            .map_err(|e| refuse(e.to_string()))?;
        let body = stamp::verify(&bytes, instance, files::SITE_TABLE_KIND)
            .map_err(|e| refuse(e.to_string()))?;
        let table: files::SiteTable =
            serde_json::from_slice(body).map_err(|e| refuse(format!("is not valid: {e}")))?;
        if table.version > files::FORMAT_VERSION {
            return Err(refuse(format!(
                "version {} is newer than {}",
                table.version,
                files::FORMAT_VERSION
            )));
        }
        if table.instance != instance {
            return Err(refuse(format!("belongs to instance {}", table.instance)));
        }
        for (i, row) in table.sites.iter().enumerate() {
            check_row(row).map_err(|why| refuse(format!("site {:?}: {why}", row.slug)))?;
            let earlier = &table.sites[..i];
            if earlier
                .iter()
                .any(|r| r.slug == row.slug || r.domain == row.domain)
            {
                return Err(refuse(format!("site {:?} is declared twice", row.slug)));
            }
        }
        Ok(SiteTable { rows: table.sites })
    }

    /// The row of `slug`.
    pub fn row(&self, slug: &str) -> Option<&SiteRow> {
        self.rows.iter().find(|r| r.slug == slug)
    }
}

fn check_row(row: &SiteRow) -> Result<(), String> {
    Slug::parse(&row.slug).map_err(|e| e.to_string())?;
    if normalize_domain(&row.domain).as_deref() != Ok(row.domain.as_str()) {
        return Err(format!("domain {:?} breaks the grammar", row.domain));
    }
    if !is_clean_absolute(&row.webspace) {
        return Err("webspace is not a clean absolute path".into());
    }
    for surface in [&row.surfaces.preprod, &row.surfaces.prod] {
        for path in [&surface.store_dir, &surface.link_path] {
            if !is_clean_absolute(path) || !path.starts_with(&row.webspace) || path == &row.webspace
            {
                return Err(format!(
                    "{} is not strictly inside the webspace",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

fn is_clean_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// Proves `row`'s webspace: a real directory whose instance marker names `instance` and in
/// which a probe file can be written. Returns it held open.
pub fn prove_webspace(row: &SiteRow, instance: &str) -> Result<Root, WebspaceError> {
    let refuse = |why: String| {
        WebspaceError(format!(
            "webspace {} of '{}': {why}",
            row.webspace.display(),
            row.slug
        ))
    };
    let root = Root::open(&row.webspace).map_err(|e| refuse(e.to_string()))?;
    let marker = root
        .read_limited(INSTANCE_MARKER_FILE, 4096)
        .map_err(|e| refuse(format!("no instance marker ({e})")))?;
    let marker = String::from_utf8_lossy(&marker);
    if marker.trim() != instance {
        return Err(refuse(format!("belongs to instance {}", marker.trim())));
    }
    let probe = format!(".atelier_write_probe.{}", std::process::id());
    root.write_atomic(&probe, b"", 0o600)
        .and_then(|_| root.remove_file(&probe))
        .map_err(|e| refuse(format!("not writable ({e})")))?;
    Ok(root)
}

/// A release store the webspace refuses: a link, a file or another refused entry where the
/// store (or a directory above it) belongs, which is never followed.
pub fn store_refused(store: &Path, why: impl std::fmt::Display) -> WebspaceError {
    WebspaceError(format!("release store {}: {why}", store.display()))
}

/// The relative path of `path` inside `webspace` (both already checked by [`SiteTable::read`]).
pub fn inside(webspace: &Path, path: &Path) -> Option<PathBuf> {
    path.strip_prefix(webspace).ok().map(Path::to_path_buf)
}
