//! The site editor's posted state (`SiteAgentSnapshot`), read softly: a snapshot that does not
//! have the expected shape becomes the empty placeholder (page `Untitled`, nothing else), and
//! the turn goes on. Only what the server-side tools and the prompt read is modelled — pages,
//! visual components (their root is `tree.rootNodeId`), breakpoints and the settings the
//! design tokens come from; anything else the browser sends is ignored here and stays in the
//! raw snapshot.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tokens::{self, SiteSettings, TokenDigest};

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
    /// Only an enabled template makes the page one; the editor never posts `false`.
    #[serde(default)]
    pub enabled: bool,
    /// What it applies to.
    pub target: TemplateTarget,
    /// Its priority (0 unless set, as the editor reads a missing one).
    #[serde(default)]
    pub priority: f64,
}

// === impl Template ===

impl Template {
    /// The priority as the editor writes it: a whole number without a fraction (`10`).
    pub fn priority_value(&self) -> Value {
        // The bound keeps the conversion exact.
        if self.priority.fract() == 0.0 && self.priority.abs() < 9.0e15 {
            Value::from(self.priority as i64)
        } else {
            Value::from(self.priority)
        }
    }
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
    /// Its slug (`index` for the homepage); every page has one.
    pub slug: String,
    /// Its root node.
    #[serde(default)]
    pub root_node_id: Option<String>,
    /// Set when the page is a template.
    #[serde(default)]
    pub template: Option<Template>,
}

// === impl Page ===

impl Page {
    /// Returns true if and only if the page is an enabled template.
    pub fn is_template(&self) -> bool {
        self.template.as_ref().is_some_and(|t| t.enabled)
    }
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
    /// Its node tree.
    pub tree: ComponentTree,
}

/// The node tree of a visual component; only its root is read here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentTree {
    /// Its root node.
    pub root_node_id: String,
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
    /// The editor's icon for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// The preview frame the editor shows it in, passed on as posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_frame: Option<Value>,
}

/// The site around the open page.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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
    /// The settings the design tokens are derived from.
    #[serde(default)]
    pub settings: SiteSettings,
}

/// The editor's state as the server reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
                slug: String::new(),
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

    /// The design tokens of the site, derived from its settings.
    pub fn tokens(&self) -> TokenDigest {
        tokens::describe(&self.site.settings)
    }

    /// A page's reference: `template` when it is one.
    pub fn page_ref(page: &Page) -> DocumentRef {
        DocumentRef {
            kind: if page.is_template() {
                "template"
            } else {
                "page"
            }
            .to_owned(),
            id: page.id.clone(),
        }
    }
}
