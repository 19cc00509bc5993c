//! The site editor's posted state (`SiteAgentSnapshot`), read softly: a snapshot that does not
//! have the expected shape becomes the empty placeholder (page `Untitled`, nothing else), and
//! the turn goes on. Only what the server-side tools and the prompt read is modelled; anything
//! else the browser sends is ignored here and stays in the raw snapshot.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A page, template or visual component reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentRef {
    /// `page`, `template` or `visualComponent`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its id.
    pub id: String,
}

/// What a template applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateTarget {
    /// `everywhere`, `postTypes` or `notFound`.
    pub kind: String,
    /// The collections of a `postTypes` template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub table_slugs: Vec<String>,
}

/// A page's template configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    /// What it applies to.
    pub target: TemplateTarget,
    /// Its priority (100 unless set).
    #[serde(default = "default_priority")]
    pub priority: f64,
}

fn default_priority() -> f64 {
    100.0
}

/// A page of the site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// Its id.
    pub id: String,
    /// Its title.
    #[serde(default)]
    pub title: String,
    /// Its slug (`index` for the homepage).
    #[serde(default)]
    pub slug: Option<String>,
    /// Its root node.
    #[serde(default)]
    pub root_node_id: Option<String>,
    /// Set when the page is a template.
    #[serde(default)]
    pub template: Option<Template>,
}

/// A visual component definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VisualComponent {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its root node.
    #[serde(default)]
    pub root_node_id: Option<String>,
}

/// A breakpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Breakpoint {
    /// Its id.
    pub id: String,
    /// Its label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Its width in px.
    pub width: f64,
    /// Its media query, when not derived from the width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_query: Option<String>,
}

/// A colour token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColorToken {
    /// Its slug (`var(--<slug>)`).
    pub slug: String,
    /// Its light value.
    pub value: String,
    /// Its dark value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dark_value: Option<String>,
}

/// A typography or spacing scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleGroup {
    /// Its id.
    pub id: String,
    /// The variable prefix (`text` gives `--text-*`).
    pub naming_convention: String,
    /// Its step names.
    #[serde(default)]
    pub steps: Vec<String>,
}

/// A font token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FontToken {
    /// Its name.
    pub name: String,
    /// Its CSS variable (`--font-heading`).
    pub css_var: String,
    /// The installed family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// The fallback stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
}

/// The design tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tokens {
    /// Colours.
    #[serde(default)]
    pub colors: Vec<ColorToken>,
    /// Typography scales.
    #[serde(default)]
    pub typography: Vec<ScaleGroup>,
    /// Spacing scales.
    #[serde(default)]
    pub spacing: Vec<ScaleGroup>,
    /// Fonts.
    #[serde(default)]
    pub fonts: Vec<FontToken>,
}

/// The site around the open page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Site {
    /// Every page (only the open one has nodes; they are not read here).
    #[serde(default)]
    pub pages: Vec<Page>,
    /// Visual components.
    #[serde(default)]
    pub visual_components: Vec<VisualComponent>,
    /// Breakpoints.
    #[serde(default)]
    pub breakpoints: Vec<Breakpoint>,
    /// Design tokens.
    #[serde(default)]
    pub tokens: Tokens,
}

/// The editor's state as the server reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteSnapshot {
    /// The open page.
    pub page: Page,
    /// The document open in the editor.
    pub current_document: Option<DocumentRef>,
    /// The site.
    #[serde(default)]
    pub site: Site,
    /// The selected node.
    #[serde(default)]
    pub selected_node_id: Option<String>,
    /// The active breakpoint.
    #[serde(default)]
    pub active_breakpoint_id: Option<String>,
}

impl SiteSnapshot {
    /// The placeholder used when no usable snapshot was posted.
    pub fn placeholder() -> Self {
        SiteSnapshot {
            page: Page {
                id: String::new(),
                title: "Untitled".to_owned(),
                slug: None,
                root_node_id: None,
                template: None,
            },
            current_document: None,
            site: Site::default(),
            selected_node_id: None,
            active_breakpoint_id: None,
        }
    }

    /// Reads `raw` softly: anything that is not a snapshot is the placeholder.
    pub fn read(raw: Option<&Value>) -> Self {
        raw.and_then(|raw| serde_json::from_value(raw.clone()).ok())
            .unwrap_or_else(Self::placeholder)
    }

    /// The open page's reference: `template` when it is one.
    pub fn page_ref(page: &Page) -> DocumentRef {
        DocumentRef {
            kind: if page.template.is_some() {
                "template"
            } else {
                "page"
            }
            .to_owned(),
            id: page.id.clone(),
        }
    }
}
