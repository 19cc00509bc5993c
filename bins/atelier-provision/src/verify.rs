//! `verify`: the serving proof. Every site's served links must be symlinks into their own
//! release store, resolving either to the empty store itself (nothing published yet) or to a
//! release directory that holds bytes.

use std::path::{Component, Path, PathBuf};

use atelier_layout::paths::{Layout, Surface};
use serde::Serialize;

use crate::host::under_root;

/// What one served surface of one site was found to serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SurfaceProof {
    /// The site.
    pub slug: String,
    /// The surface.
    pub surface: Surface,
    /// The served link.
    pub link: PathBuf,
    /// The release served, or `None` when nothing is published yet.
    pub release: Option<String>,
    /// What is wrong, if anything.
    pub problem: Option<Unproved>,
}

/// Why a served surface is not provably served, each with a stable reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unproved {
    /// Nothing stands at the served path.
    #[error("the served link is missing")]
    LinkMissing,
    /// Something other than a symlink stands at the served path.
    #[error("the served path is not a symlink")]
    NotASymlink,
    /// The symlink could not be read.
    #[error("unreadable link: {0}")]
    LinkUnreadable(String),
    /// The link resolves to nothing, or to something other than a directory.
    #[error("its target {} is missing or not a directory", .0.display())]
    TargetMissing(PathBuf),
    /// The link resolves outside the surface's release store.
    #[error("it points outside its store: {}", .0.display())]
    OutsideStore(PathBuf),
    /// The served release directory is empty.
    #[error("release {0} holds no bytes")]
    EmptyRelease(String),
}

// === impl Unproved ===

impl Unproved {
    /// The stable snake_case reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unproved::LinkMissing => "link_missing",
            Unproved::NotASymlink => "not_a_symlink",
            Unproved::LinkUnreadable(_) => "link_unreadable",
            Unproved::TargetMissing(_) => "target_missing",
            Unproved::OutsideStore(_) => "outside_store",
            Unproved::EmptyRelease(_) => "empty_release",
        }
    }
}

/// `--json` shows a problem as its reason and its sentence, as it does a plan's refusal.
impl Serialize for Unproved {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut s = serializer.serialize_struct("Unproved", 2)?;
        s.serialize_field("reason", self.reason())?;
        s.serialize_field("message", &self.to_string())?;
        s.end()
    }
}

/// Proves every declared site's served links below `root`.
pub fn verify(layout: &Layout<'_>, root: &Path) -> Vec<SurfaceProof> {
    let mut out = Vec::new();
    for site in &layout.declaration().sites {
        for surface in Surface::ALL {
            let link = layout.served_link(site, surface);
            let store = layout.release_store(site, surface);
            let (release, problem) = match prove(root, &link, &store) {
                Ok(release) => (release, None),
                Err(problem) => (None, Some(problem)),
            };
            out.push(SurfaceProof {
                slug: site.slug.clone(),
                surface,
                link,
                release,
                problem,
            });
        }
    }
    out
}

fn prove(root: &Path, link: &Path, store: &Path) -> Result<Option<String>, Unproved> {
    let real_link = under_root(root, link);
    let meta = std::fs::symlink_metadata(&real_link).map_err(|_| Unproved::LinkMissing)?;
    if !meta.file_type().is_symlink() {
        return Err(Unproved::NotASymlink);
    }
    let target =
        std::fs::read_link(&real_link).map_err(|e| Unproved::LinkUnreadable(e.to_string()))?;
    let parent = link.parent().unwrap_or(Path::new("/"));
    let resolved = normalize(&parent.join(target));
    let real = under_root(root, &resolved);
    if !real.is_dir() {
        return Err(Unproved::TargetMissing(resolved));
    }
    if resolved == store {
        return Ok(None);
    }
    let name = resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if resolved.parent() != Some(store) || name.starts_with('.') || name.is_empty() {
        return Err(Unproved::OutsideStore(resolved));
    }
    // The kernel must resolve the link where the lexical reading does: a release that is
    // itself a link, or a `..` after a link on the way, leads out of the store.
    let release_is_dir = std::fs::symlink_metadata(&real).is_ok_and(|m| m.is_dir());
    let kernel = std::fs::canonicalize(&real_link).ok();
    if !release_is_dir || kernel.is_none() || kernel != std::fs::canonicalize(&real).ok() {
        return Err(Unproved::OutsideStore(resolved));
    }
    let empty = std::fs::read_dir(&real)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    if empty {
        return Err(Unproved::EmptyRelease(name));
    }
    Ok(Some(name))
}

/// Lexical normalization (`.` dropped, `..` pops); the link's own path is trusted.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn served_links_are_proved_or_named() {
        let decl = crate::test_support::declaration(&["blog", "shop", "wiki", "news", "docs"]);
        let layout = Layout::new(&decl);
        let tmp = tempfile::tempdir().unwrap();
        let ws = |slug: &str| tmp.path().join(format!("srv/www/{slug}.example.org"));
        for slug in ["blog", "shop", "wiki", "news", "docs"] {
            std::fs::create_dir_all(ws(slug).join(".releases/pre")).unwrap();
            std::fs::create_dir_all(ws(slug).join(".releases/web/r1")).unwrap();
        }
        // blog: preprod unpublished, prod serving r1 with bytes.
        std::fs::write(ws("blog").join(".releases/web/r1/index.html"), b"hi").unwrap();
        symlink(".releases/pre", ws("blog").join("pre")).unwrap();
        symlink(".releases/web/r1", ws("blog").join("web")).unwrap();
        // shop: prod serving an empty release; preprod missing.
        symlink(".releases/web/r1", ws("shop").join("web")).unwrap();
        // wiki: prod escaping its store; preprod a plain directory.
        symlink("..", ws("wiki").join("web")).unwrap();
        std::fs::create_dir(ws("wiki").join("pre")).unwrap();
        // Escapes that read as inside the store: a release that is a link out of it, and a
        // `..` after a link on the way.
        let elsewhere = tmp.path().join("etc");
        std::fs::create_dir_all(elsewhere.join("r2")).unwrap();
        std::fs::write(elsewhere.join("r2/passwd"), b"x").unwrap();
        for slug in ["news", "docs"] {
            std::fs::create_dir_all(ws(slug).join(".releases/web")).unwrap();
            symlink(".releases/pre", ws(slug).join("pre")).unwrap();
            std::fs::create_dir_all(ws(slug).join(".releases/pre")).unwrap();
        }
        symlink(elsewhere.join("r2"), ws("news").join(".releases/web/r2")).unwrap();
        symlink(".releases/web/r2", ws("news").join("web")).unwrap();
        symlink(elsewhere.join("sub"), ws("docs").join(".releases/web/x")).unwrap();
        std::fs::create_dir_all(elsewhere.join("sub")).unwrap();
        std::fs::create_dir_all(ws("docs").join(".releases/web/r2")).unwrap();
        std::fs::write(ws("docs").join(".releases/web/r2/index.html"), b"hi").unwrap();
        symlink(".releases/web/x/../r2", ws("docs").join("web")).unwrap();

        let proofs = verify(&layout, tmp.path());
        let summary: Vec<(String, &str, Option<&str>, Option<&str>)> = proofs
            .iter()
            .map(|p| {
                (
                    p.slug.clone(),
                    p.surface.dir_name(),
                    p.release.as_deref(),
                    p.problem.as_ref().map(Unproved::reason),
                )
            })
            .collect();
        assert_eq!(summary[0], ("blog".into(), "pre", None, None));
        assert_eq!(summary[1], ("blog".into(), "web", Some("r1"), None));
        assert_eq!(summary[2].3, Some("link_missing"));
        assert_eq!(summary[3].3, Some("empty_release"));
        assert_eq!(summary[4].3, Some("not_a_symlink"));
        assert_eq!(summary[5].3, Some("outside_store"), "{summary:?}");
        assert_eq!(
            summary[7].3,
            Some("outside_store"),
            "a release that is a link"
        );
        assert_eq!(summary[9].3, Some("outside_store"), "a `..` after a link");
        let shown: Vec<String> = proofs
            .iter()
            .filter_map(|p| p.problem.as_ref().map(ToString::to_string))
            .collect();
        assert_eq!(shown[0], "the served link is missing");
        assert_eq!(shown[1], "release r1 holds no bytes");
        assert_eq!(shown[2], "the served path is not a symlink");
        assert!(
            shown[3].starts_with("it points outside its store"),
            "{shown:?}"
        );
        assert_eq!(
            serde_json::to_value(&proofs[2].problem).unwrap(),
            serde_json::json!({"reason": "link_missing", "message": "the served link is missing"})
        );
    }
}
