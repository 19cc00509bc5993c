//! The system prompts: for the site and content scopes
//! `[static prefix, boundary, dynamic suffix]`, so a provider's prompt cache keeps the prefix
//! (it never changes for a scope); the suffix is built from the posted snapshot each turn.
//! Every word of the prefixes is Atelier's own. A caller offered fewer tools than the prefix
//! names is told which it has after the suffix ([`withheld_tools`]).

use atelier_llm::SYSTEM_PROMPT_DYNAMIC_BOUNDARY;
use serde_json::Value;

use crate::store::Scope;
use crate::tools::site_reads::documents;
use crate::tools::snapshot::SiteSnapshot;
use crate::tools::ToolSpec;

/// The site scope's static prefix.
pub const SITE_PREFIX: &str = "\
You edit a website inside a visual site editor, and you work only through the tools you are \
given: there is no file system, terminal or shell. Prefer doing over asking — when a request is \
clear enough, make the change, then say briefly what you did.

Building
- Work in small, recoverable steps: one site_insert_html call per section of a page (navigation, \
hero, features, footer), not one call for a whole page.
- Read before you change what exists: site_read_document returns the document as HTML whose \
elements carry uid=\"<nodeId>\"; pass those ids unchanged to the editing tools.
- Tool results name what they created (nodeIds, pageId, rootNodeId, cssRulesCreated, …); use \
those values instead of guessing.

Design system first
- Colours, type sizes, spacing and fonts come from design tokens. Create or reuse them with \
site_set_color_tokens, site_set_type_scale, site_set_spacing_scale and site_set_font_tokens, \
then refer to them in CSS as var(--<slug>), var(--text-<step>), var(--space-<step>) and the \
font variables, rather than raw hex values, pixel sizes or family names.
- The Tokens line after this prompt shows what exists; when it says none, set up a small \
design system before styling anything.

Structure as HTML, styling as CSS
- Write structure as semantic HTML with site_insert_html or site_replace_node_html; every \
element becomes an editable node.
- Style with CSS in the same payload — a <style> block and class attributes. A rule that is \
only a class selector (.card { … }) becomes a reusable class bound to class=\"card\"; any other \
selector (.card a, a:hover, nav > li, @media blocks) becomes a page-level rule; style \
attributes become the node's own styles.
- For CSS on its own use site_apply_css with an explicit operation: merge to add or patch \
declarations, replace only with a selector's complete intended CSS, remove-properties to drop \
stale declarations, delete to remove whole rules. Selectors match by their exact text, so \
\".a, .b\" and \".a\" are different rules; read the document before destructive operations.

Behavior and runtime code
- HTML payloads lose <script> elements and on* attributes. Interactivity (menus, tabs, theme \
switches) is a runtime script written with site_write_code_asset and checked with \
site_inspect_code_runtime; a module script lists the npm packages it imports in \
dependencies instead of loading them from a CDN.

Responsive
- Vary layouts per breakpoint with @media queries whose widths match the breakpoints listed \
below. Use the breakpoint ids exactly as listed and never invent names for them.

Documents
- Pages, templates and visual components are documents; their references come from the list \
below or from site_list_documents — never make one up. Chrome shared by every page (header, \
footer, navigation, theme) usually lives in a template: look there first.

Pages
- Page ids come from the list below. site_add_page creates and opens an empty page; build \
into its rootNodeId.

Loops (repeated CMS/data lists)
- Lists of posts or rows use an <instatic-loop> element bound with data-source-id and \
data-table-id; call site_list_loop_sources first for the ids, order options and field tokens. \
Inside the loop, values are written {currentEntry.field} with single braces.

Templates (CMS layouts)
- A template is a page with a target (everywhere, the 404 page, or posts of some collections) \
and one <instatic-outlet> where the matched content goes. Collection slugs for postTypes \
targets come from site_list_post_types.

Notes
- Heavy results (documents, node HTML, snapshots) are replaced by a short note once newer \
ones exist; call the tool again when you need the current state.
- site_render_snapshot shows the rendered result; use it to check layout after larger changes.

Reply
- End with one or two sentences saying what changed. No raw HTML/CSS/JSON in the reply.";

/// The content scope's static prefix.
pub const CONTENT_PREFIX: &str = "\
You help write and organise content in a CMS's content workspace, using only the tools you are \
given. Make clear changes directly and report them briefly.

Scope
- You work on collections (post types and pages) and their documents: reading them, creating \
drafts, writing fields, setting status and author. Uploading media is left to the user.

Read first when needed
- Before writing fields you have not seen, read the collection's schema with \
content_get_collection_schema; find documents with content_list_documents or \
content_search_documents, and read one in full with content_get_document.

Writing
- Body, rich text and long text fields take standard markdown.
- Text, slug and select fields take plain strings (a select takes one of its option values; a \
multi-select a list of them); number fields numbers; boolean fields true or false; date \
fields ISO 8601 strings.
- Media fields take media ids from content_list_media; relation fields take document ids of \
the target collection.
- Writing a whole post is one content_set_document_fields call, not a field at a time.

Active context
- The document open in the editor is shown below. Open another with \
content_set_active_document before writing to it, or create one with content_create_document.

Media + users
- content_list_media finds existing media; content_list_users lists possible authors.

Other
- Scheduling needs a scheduledAt time; deleting moves a document to the trash.

Reply
- End with one or two sentences on what changed. Do not paste raw HTML or whole markdown \
bodies into the reply.";

/// The prompt of a scope without tools.
fn plain(scope: Scope) -> Vec<String> {
    vec![format!(
        "You are the AI assistant embedded in the \"{}\" workspace of the CMS editor. This \
         workspace has no tools yet, so answer from what the user tells you.",
        scope.as_str()
    )]
}

/// The system prompt parts of a turn in `scope` with the posted `snapshot`.
pub fn system_prompt(scope: Scope, snapshot: Option<&Value>) -> Vec<String> {
    match scope {
        Scope::Site => vec![
            SITE_PREFIX.to_owned(),
            SYSTEM_PROMPT_DYNAMIC_BOUNDARY.to_owned(),
            site_suffix(&SiteSnapshot::read(snapshot)),
        ],
        Scope::Content => vec![
            CONTENT_PREFIX.to_owned(),
            SYSTEM_PROMPT_DYNAMIC_BOUNDARY.to_owned(),
            content_suffix(snapshot.unwrap_or(&Value::Null)),
        ],
        Scope::Data | Scope::Plugin => plain(scope),
    }
}

/// What a turn is told after its prompt when its caller is offered fewer of the scope's tools
/// than the prompt names (a role without `ai.tools.write` gets no browser tool, one without
/// `site.read` no site read): the tools it has, so that the model neither calls the others
/// nor promises what only they do. `None` when every tool of the scope is offered.
pub fn withheld_tools(
    scope: Scope,
    offered: &[ToolSpec],
    catalogue: &[ToolSpec],
) -> Option<String> {
    let in_scope = catalogue.iter().filter(|tool| tool.scope == scope).count();
    if offered.len() >= in_scope {
        return None;
    }
    Some(if offered.is_empty() {
        "The editor's role gives you no tools in this conversation: answer from what the user \
         tells you, and say which permission a read or a change would need."
            .to_owned()
    } else {
        let names: Vec<&str> = offered.iter().map(|tool| tool.name).collect();
        format!(
            "The editor's role gives you only these tools in this conversation: {}. The other \
             tools named above are not available: do not call them, and say so when the user \
             asks for what only they do.",
            names.join(", ")
        )
    })
}

/// `items` as `[a, b, …]`, at most `max` of them then `, +N more`; `(none)` when empty.
fn capped(items: Vec<String>, max: usize) -> String {
    if items.is_empty() {
        return "(none)".to_owned();
    }
    let more = items.len().saturating_sub(max);
    let mut shown: Vec<String> = items.into_iter().take(max).collect();
    if more > 0 {
        shown.push(format!("+{more} more"));
    }
    format!("[{}]", shown.join(", "))
}

/// The compact token digest always inlined in the site prompt: colour slugs with their
/// values, the steps of each scale, and each font variable with its family (or stack).
pub fn token_digest(snapshot: &SiteSnapshot) -> String {
    let tokens = snapshot.tokens();
    if tokens.is_empty() {
        return "Tokens: (none — no design system yet; establish one first with \
                site_set_color_tokens, site_set_type_scale, site_set_spacing_scale and \
                site_set_font_tokens)"
            .to_owned();
    }
    let mut parts = Vec::new();
    if !tokens.colors.is_empty() {
        let colors = tokens
            .colors
            .iter()
            .map(|c| format!("{}={}", c.slug, c.value))
            .collect();
        parts.push(format!("colors: {}", capped(colors, 30)));
    }
    let steps = |steps: &[crate::tools::tokens::ScaleStepDescriptor]| -> Vec<String> {
        steps.iter().map(|s| s.step.clone()).collect()
    };
    for group in &tokens.typography {
        parts.push(format!(
            "type --{}-*: {}",
            group.naming_convention,
            capped(steps(&group.steps), 16)
        ));
    }
    for group in &tokens.spacing {
        parts.push(format!(
            "spacing --{}-*: {}",
            group.naming_convention,
            capped(steps(&group.steps), 16)
        ));
    }
    if !tokens.fonts.is_empty() {
        let fonts = tokens
            .fonts
            .iter()
            .map(|f| {
                let family = if f.family.is_empty() {
                    &f.stack
                } else {
                    &f.family
                };
                format!("{}→{family}", f.css_var)
            })
            .collect();
        parts.push(format!("fonts: {}", capped(fonts, 20)));
    }
    format!("Tokens — {}", parts.join("; "))
}

/// The site prompt's per-turn suffix.
pub fn site_suffix(snapshot: &SiteSnapshot) -> String {
    let current = snapshot
        .current_document
        .as_ref()
        .map(|d| format!("{}:{}", d.kind, d.id))
        .unwrap_or_else(|| "(none)".to_owned());
    let breakpoints = snapshot
        .site
        .breakpoints
        .iter()
        .map(|b| {
            let mut text = format!("{}@{}px", b.id, b.width);
            if let Some(query) = &b.media_query {
                text.push(':');
                text.push_str(query);
            }
            text
        })
        .collect();
    let docs = documents(snapshot)
        .into_iter()
        .map(|d| {
            let mut flags = Vec::new();
            if d["current"] == Value::Bool(true) {
                flags.push("current".to_owned());
            }
            if d["active"] == Value::Bool(true) {
                flags.push("active-page".to_owned());
            }
            flags.push(format!(
                "root={}",
                d["rootNodeId"].as_str().unwrap_or("(empty)")
            ));
            format!(
                "{}:{}=\"{}\" ({}; {})",
                d["document"]["type"].as_str().unwrap_or_default(),
                d["document"]["id"].as_str().unwrap_or_default(),
                d["title"].as_str().unwrap_or_default(),
                flags.join(", "),
                d["summary"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let pages = snapshot
        .site
        .pages
        .iter()
        .map(|p| {
            let slug = if p.slug.is_empty() {
                "(no-slug)"
            } else {
                &p.slug
            };
            let mut text = format!("{}={slug}", p.id);
            if p.id == snapshot.page.id {
                text.push_str(" (active)");
            }
            if let Some(template) = p.template.as_ref().filter(|t| t.enabled) {
                let target = if template.target.kind == "postTypes" {
                    template.target.table_slugs.join(",")
                } else {
                    template.target.kind.clone()
                };
                text.push_str(&format!(" [template:{target}]"));
            }
            text
        })
        .collect();
    [
        format!("Page: \"{}\"", snapshot.page.title),
        format!("current document: {current}"),
        format!(
            "root: {}",
            snapshot.page.root_node_id.as_deref().unwrap_or("(empty)")
        ),
        format!(
            "selected: {}",
            snapshot.selected_node_id.as_deref().unwrap_or("none")
        ),
        format!(
            "active breakpoint: {}",
            snapshot.active_breakpoint_id.as_deref().unwrap_or("(none)")
        ),
        format!("all breakpoints: {}", capped(breakpoints, usize::MAX)),
        format!("Documents: {}", capped(docs, 24)),
        format!("Pages: {}", capped(pages, usize::MAX)),
        token_digest(snapshot),
    ]
    .join(" · ")
}

fn render_value(kind: &str, value: &Value) -> String {
    match value {
        Value::Null => "(empty)".to_owned(),
        Value::String(text) if matches!(kind, "body" | "richText" | "longText") => {
            let count = text.chars().count();
            if count > 200 {
                let head: String = text.chars().take(200).collect();
                format!("{head}… ({count} chars)")
            } else {
                text.clone()
            }
        }
        Value::String(text) => {
            if text.chars().count() > 120 {
                let head: String = text.chars().take(120).collect();
                format!("{head}…")
            } else {
                text.clone()
            }
        }
        Value::Number(_) | Value::Bool(_) => value.to_string(),
        other => other.to_string(),
    }
}

/// The content prompt's per-turn suffix, from a content snapshot (read without validation:
/// anything missing is simply left out).
pub fn content_suffix(snapshot: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut lines = vec![format!(
        "You are {} ({}).",
        text(&snapshot["currentUser"]["displayName"]),
        text(&snapshot["currentUser"]["email"])
    )];
    let collections: Vec<String> = snapshot["collections"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} ({}, {} docs)",
                text(&c["slug"]),
                text(&c["kind"]),
                c["docCount"].as_u64().unwrap_or(0)
            )
        })
        .collect();
    lines.push(if collections.is_empty() {
        "Collections: (none).".to_owned()
    } else {
        format!("Collections: {}.", collections.join(", "))
    });
    if let Some(active) = snapshot["activeTableId"]
        .as_str()
        .filter(|id| !id.is_empty())
    {
        lines.push(format!("Active collection: {active}."));
    }
    let document = &snapshot["activeDocument"];
    if document.is_object() {
        lines.push(format!(
            "Active document: {} (\"{}\") in collection {}, status={}.",
            text(&document["id"]),
            text(&document["title"]),
            text(&document["tableId"]),
            text(&document["status"])
        ));
        lines.push("Fields:".to_owned());
        // The schema orders the lines; each value is the document's under the field's id.
        for field in document["schema"].as_array().into_iter().flatten() {
            let kind = text(&field["type"]);
            let id = text(&field["id"]);
            let value = &document["fields"][id.as_str()];
            let mut line = format!("  - {id}");
            if field["required"] == Value::Bool(true) {
                line.push_str(" *");
            }
            if field["builtIn"] == Value::Bool(true) {
                line.push_str(" (builtin)");
            }
            line.push_str(&format!(" [{kind}]: {}", render_value(&kind, value)));
            lines.push(line);
        }
    } else {
        lines.push(
            "No document is open. Use content_list_documents + content_set_active_document, or content_create_document."
                .to_owned(),
        );
    }
    lines.join("\n")
}
