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
    pub problem: Option<String>,
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

fn prove(root: &Path, link: &Path, store: &Path) -> Result<Option<String>, String> {
    let real_link = under_root(root, link);
    let meta = std::fs::symlink_metadata(&real_link)
        .map_err(|_| "the served link is missing".to_owned())?;
    if !meta.file_type().is_symlink() {
        return Err("the served path is not a symlink".into());
    }
    let target = std::fs::read_link(&real_link).map_err(|e| format!("unreadable link: {e}"))?;
    let parent = link.parent().unwrap_or(Path::new("/"));
    let resolved = normalize(&parent.join(target));
    let real = under_root(root, &resolved);
    if !real.is_dir() {
        return Err(format!(
            "its target {} is missing or not a directory",
            resolved.display()
        ));
    }
    if resolved == store {
        return Ok(None);
    }
    let name = resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if resolved.parent() != Some(store) || name.starts_with('.') || name.is_empty() {
        return Err(format!(
            "it points outside its store: {}",
            resolved.display()
        ));
    }
    let empty = std::fs::read_dir(&real)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    if empty {
        return Err(format!("release {name} holds no bytes"));
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
        let decl = crate::test_support::declaration(&["blog", "shop", "wiki"]);
        let layout = Layout::new(&decl);
        let tmp = tempfile::tempdir().unwrap();
        let ws = |slug: &str| tmp.path().join(format!("srv/www/{slug}.example.org"));
        for slug in ["blog", "shop", "wiki"] {
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

        let proofs = verify(&layout, tmp.path());
        let summary: Vec<(String, &str, Option<&str>, Option<&str>)> = proofs
            .iter()
            .map(|p| {
                (
                    p.slug.clone(),
                    p.surface.dir_name(),
                    p.release.as_deref(),
                    p.problem.as_deref(),
                )
            })
            .collect();
        assert_eq!(summary[0], ("blog".into(), "pre", None, None));
        assert_eq!(summary[1], ("blog".into(), "web", Some("r1"), None));
        assert_eq!(summary[2].3, Some("the served link is missing"));
        assert_eq!(summary[3].3, Some("release r1 holds no bytes"));
        assert_eq!(summary[4].3, Some("the served path is not a symlink"));
        assert!(
            summary[5]
                .3
                .unwrap()
                .starts_with("it points outside its store"),
            "{summary:?}"
        );
    }
}
