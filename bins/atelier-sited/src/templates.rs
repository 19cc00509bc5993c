//! Site starter templates: `templates/<id>/template.json` plus the files to scaffold. Adding a
//! template is adding a directory; it appears in `/v1/capabilities` with no code change.

use std::path::{Path, PathBuf};

use atelier_fs::{FileKind, FsError, Root};
use serde::Deserialize;

use crate::manifest::{BuildSpec, WORKSPACE_FILE_MODE};
use atelier_fs::tree;
use atelier_site_api::Slug;

/// The file that makes a directory a template; never copied.
pub const TEMPLATE_FILE: &str = "template.json";

/// The placeholder replaced by the Publication API's URL when scaffolding.
pub const API_URL_PLACEHOLDER: &str = "__PUBLICATION_API_URL__";

/// Names never copied from a template, at any depth.
const SKIPPED: [&str; 3] = [TEMPLATE_FILE, "node_modules", ".git"];

/// Extensions whose files get the placeholder replaced.
const TEXT_EXTENSIONS: [&str; 16] = [
    "html", "htm", "js", "ts", "jsx", "tsx", "mjs", "cjs", "css", "less", "scss", "json", "md",
    "txt", "svg", "xml",
];

/// Files larger than this are copied verbatim, never searched for the placeholder.
const MAX_SUBSTITUTED_BYTES: u64 = 1_000_000;

pub(crate) use atelier_layout::workspace::WORKSPACE_DIR_MODE;

pub use atelier_site_api::TemplateInfo;

/// `template.json`. `build` is Atelier's addition: the manifest's build steps for sites made
/// from it (absent: the contract's defaults).
#[derive(Debug, Clone, Default, Deserialize)]
struct TemplateFile {
    label: Option<String>,
    description: Option<String>,
    build: Option<BuildSpec>,
}

/// One template found on disk.
#[derive(Debug, Clone)]
pub struct Template {
    /// What capabilities shows.
    pub info: TemplateInfo,
    /// The build steps a site made from it starts with.
    pub build: BuildSpec,
}

/// Why scaffolding failed.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// Reading the template or writing the workspace failed.
    #[error("scaffolding template: {0}")]
    Fs(#[from] FsError),
    /// A name in the template is not valid UTF-8 or not a plain name.
    #[error("template '{0}' holds a path that cannot be copied")]
    BadPath(String),
}

/// The templates directory.
#[derive(Debug, Clone)]
pub struct Templates {
    dir: PathBuf,
}

impl Templates {
    /// Templates found in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Every template with a parseable `template.json`, sorted by id. A missing directory
    /// lists none.
    pub fn list(&self) -> Vec<TemplateInfo> {
        let Ok(root) = Root::open(&self.dir) else {
            return Vec::new();
        };
        let Ok(entries) = tree::list_dir(&root, None) else {
            return Vec::new();
        };
        entries
            .into_iter()
            .filter(|(_, kind)| *kind == FileKind::Dir)
            .filter_map(|(name, _)| name.into_string().ok())
            .filter_map(|id| load(&root, &id).map(|t| t.info))
            .collect()
    }

    /// The template `id`, if it exists and parses.
    pub fn get(&self, id: &str) -> Option<Template> {
        Slug::parse(id).ok()?;
        let root = Root::open(&self.dir).ok()?;
        load(&root, id)
    }

    /// Copies template `id` into `workspace` (which must exist), replacing the API URL
    /// placeholder in text files.
    pub fn scaffold(&self, id: &str, workspace: &Root, api_url: &str) -> Result<(), TemplateError> {
        let source = Root::open(&self.dir)?.open_dir(id)?;
        let (dirs, files) = tree::files_under(&source, &SKIPPED)?;
        for dir in &dirs {
            workspace.create_dir_all(dir, WORKSPACE_DIR_MODE)?;
        }
        for file in files {
            let bytes = source.read_limited(&file.rel, atelier_fs::DEFAULT_READ_LIMIT_BYTES)?;
            let bytes = if substitutes(&file.rel) && file.size <= MAX_SUBSTITUTED_BYTES {
                match String::from_utf8(bytes) {
                    Ok(text) => text.replace(API_URL_PLACEHOLDER, api_url).into_bytes(),
                    Err(e) => e.into_bytes(),
                }
            } else {
                bytes
            };
            workspace.write_atomic(&file.rel, &bytes, WORKSPACE_FILE_MODE)?;
        }
        Ok(())
    }
}

fn substitutes(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| TEXT_EXTENSIONS.contains(&e))
}

fn load(root: &Root, id: &str) -> Option<Template> {
    Slug::parse(id).ok()?;
    let bytes = root
        .read_limited(Path::new(id).join(TEMPLATE_FILE), 64 * 1024)
        .ok()?;
    let file: TemplateFile = serde_json::from_slice(&bytes).ok()?;
    Some(Template {
        info: TemplateInfo {
            id: id.to_owned(),
            label: file.label.unwrap_or_else(|| id.to_owned()),
            description: file.description.unwrap_or_default(),
        },
        build: file.build.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::DEFAULT_TEMPLATE;

    fn shipped() -> Templates {
        Templates::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates"))
    }

    #[test]
    fn the_shipped_basic_template_is_listed_and_builds_without_a_package_manager() {
        let list = shipped().list();
        assert!(list.iter().any(|t| t.id == DEFAULT_TEMPLATE), "{list:?}");
        let basic = shipped().get(DEFAULT_TEMPLATE).unwrap();
        assert_eq!(basic.build.install, "");
        assert_eq!(basic.build.output, "dist");
        assert!(!basic.build.build.contains("bun") && !basic.build.build.contains("npm"));
    }

    #[test]
    fn scaffold_copies_substitutes_and_skips() {
        let tmp = tempfile::tempdir().unwrap();
        let templates = tmp.path().join("templates");
        std::fs::create_dir_all(templates.join("demo/src/node_modules")).unwrap();
        std::fs::create_dir_all(templates.join("demo/.git")).unwrap();
        std::fs::create_dir_all(templates.join("no-manifest")).unwrap();
        std::fs::write(templates.join("demo/template.json"), r#"{"label":"Demo"}"#).unwrap();
        std::fs::write(
            templates.join("demo/src/a.js"),
            "x('__PUBLICATION_API_URL__')",
        )
        .unwrap();
        std::fs::write(templates.join("demo/src/b.bin"), "__PUBLICATION_API_URL__").unwrap();
        std::fs::write(templates.join("demo/src/node_modules/m.js"), "m").unwrap();
        std::fs::write(templates.join("demo/.git/HEAD"), "h").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", templates.join("demo/src/leak")).unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir(&ws).unwrap();

        let t = Templates::new(&templates);
        assert_eq!(
            t.list(),
            [TemplateInfo {
                id: "demo".into(),
                label: "Demo".into(),
                description: String::new()
            }]
        );
        assert!(t.get("no-manifest").is_none());
        assert!(t.get("../templates").is_none());
        t.scaffold("demo", &Root::open(&ws).unwrap(), "https://api.example.org")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("src/a.js")).unwrap(),
            "x('https://api.example.org')"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("src/b.bin")).unwrap(),
            "__PUBLICATION_API_URL__"
        );
        for absent in ["template.json", "src/node_modules", ".git", "src/leak"] {
            assert!(
                std::fs::symlink_metadata(ws.join(absent)).is_err(),
                "{absent}"
            );
        }
    }
}
