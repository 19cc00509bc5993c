//! `site.json`, the daemon-owned manifest of a workspace: validated on every read, written
//! atomically through `atelier-fs` (a run can write the workspace, so nothing is trusted).

use atelier_fs::{FsError, Root};

use crate::domain::normalize_domain;
use atelier_site_api::Slug;

pub use atelier_layout::workspace::MANIFEST_FILE;

/// A manifest larger than this is refused unread: it is a few hundred bytes when we write it.
const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

pub(crate) use atelier_layout::workspace::WORKSPACE_FILE_MODE;

pub use atelier_site_api::limits::MAX_NAME_CHARS;
pub use atelier_site_api::{BuildSpec, Published, SiteManifest, DEFAULT_TEMPLATE};

/// The coding agents the contract knows.
pub use atelier_site_api::DriverId as Driver;

/// Why a manifest could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read or written (a planted link is one of these).
    #[error("site.json: {0}")]
    Fs(#[from] FsError),
    /// The file is not a valid manifest.
    #[error("site.json of '{slug}' is invalid: {why}")]
    Invalid {
        /// The workspace it was read from.
        slug: String,
        /// What is wrong.
        why: String,
    },
}

/// Checks what JSON types cannot: grammars, lengths and that the slug is the workspace's.
pub fn validate(manifest: &SiteManifest, workspace_slug: &str) -> Result<(), ManifestError> {
    let invalid = |why: String| ManifestError::Invalid {
        slug: workspace_slug.to_owned(),
        why,
    };
    if manifest.slug != workspace_slug || Slug::parse(&manifest.slug).is_err() {
        return Err(invalid(format!(
            "slug {:?} is not the workspace's",
            manifest.slug
        )));
    }
    let name_chars = manifest.name.chars().count();
    if manifest.name.trim().is_empty() || name_chars > MAX_NAME_CHARS {
        return Err(invalid("name must be 1-200 characters".to_owned()));
    }
    if normalize_domain(&manifest.domain).as_deref() != Ok(manifest.domain.as_str()) {
        return Err(invalid(format!(
            "domain {:?} breaks the grammar",
            manifest.domain
        )));
    }
    if manifest.created_at.is_empty() {
        return Err(invalid("created_at is empty".to_owned()));
    }
    Ok(())
}

/// The manifest as written: 2-space pretty JSON and a trailing newline.
pub fn to_bytes(manifest: &SiteManifest) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(manifest).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Reads and validates the manifest of the workspace `workspace` (named `slug`); `Ok(None)`
/// when there is none.
pub fn read_manifest(workspace: &Root, slug: &str) -> Result<Option<SiteManifest>, ManifestError> {
    let bytes = match workspace.read_limited(MANIFEST_FILE, MAX_MANIFEST_BYTES) {
        Ok(bytes) => bytes,
        Err(FsError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let manifest: SiteManifest =
        serde_json::from_slice(&bytes).map_err(|e| ManifestError::Invalid {
            slug: slug.to_owned(),
            why: e.to_string(),
        })?;
    validate(&manifest, slug)?;
    Ok(Some(manifest))
}

/// Validates and writes the manifest atomically (tmp + fsync + rename) into `workspace`.
pub fn write_manifest(workspace: &Root, manifest: &SiteManifest) -> Result<(), ManifestError> {
    validate(manifest, &manifest.slug)?;
    workspace.write_atomic(MANIFEST_FILE, &to_bytes(manifest), WORKSPACE_FILE_MODE)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> SiteManifest {
        SiteManifest {
            slug: "museum".into(),
            name: "The Museum".into(),
            domain: "museum.example.org".into(),
            owner_user_id: 7,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            driver: Driver::ClaudeCode,
            template: "basic".into(),
            build: BuildSpec::default(),
            published: None,
        }
    }

    #[test]
    fn round_trip_keeps_key_order_and_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        write_manifest(&root, &manifest()).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(MANIFEST_FILE)).unwrap();
        assert!(text.ends_with("}\n"));
        let keys: Vec<usize> = [
            "\"slug\"",
            "\"name\"",
            "\"domain\"",
            "\"owner_user_id\"",
            "\"published\"",
        ]
        .iter()
        .map(|k| text.find(k).unwrap())
        .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert_eq!(read_manifest(&root, "museum").unwrap(), Some(manifest()));

        // Absent template, build and published take the defaults, as the original schema did.
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let object = value.as_object_mut().unwrap();
        object.remove("template");
        object.remove("published");
        object.insert("build".into(), serde_json::json!({}));
        std::fs::write(tmp.path().join(MANIFEST_FILE), value.to_string()).unwrap();
        assert_eq!(read_manifest(&root, "museum").unwrap(), Some(manifest()));
    }

    #[test]
    fn invalid_manifests_are_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        assert!(read_manifest(&root, "museum").unwrap().is_none());
        let cases: Vec<(&str, String)> = vec![
            ("not json", "{".into()),
            (
                "another slug",
                serde_json::to_string(&SiteManifest {
                    slug: "other".into(),
                    ..manifest()
                })
                .unwrap(),
            ),
            (
                "empty name",
                serde_json::to_string(&SiteManifest {
                    name: " ".into(),
                    ..manifest()
                })
                .unwrap(),
            ),
            (
                "bad domain",
                serde_json::to_string(&SiteManifest {
                    domain: "nodots".into(),
                    ..manifest()
                })
                .unwrap(),
            ),
            (
                "unknown driver",
                serde_json::to_string(&manifest())
                    .unwrap()
                    .replace("claude_code", "gpt"),
            ),
            (
                "string owner",
                serde_json::to_string(&manifest())
                    .unwrap()
                    .replace("7", "\"7\""),
            ),
        ];
        for (name, text) in cases {
            std::fs::write(tmp.path().join(MANIFEST_FILE), text).unwrap();
            let err = read_manifest(&root, "museum").unwrap_err();
            assert!(
                matches!(err, ManifestError::Invalid { .. }),
                "case {name}: {err}"
            );
        }
        std::fs::remove_file(tmp.path().join(MANIFEST_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join(MANIFEST_FILE)).unwrap();
        let err = read_manifest(&root, "museum").unwrap_err();
        assert!(
            matches!(err, ManifestError::Fs(FsError::SymlinkRefused { .. })),
            "{err}"
        );
    }
}
