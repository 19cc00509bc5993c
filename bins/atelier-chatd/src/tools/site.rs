//! The site editor's 35 tools: six catalogue reads answered by
//! chatd, twenty-nine run by the editor in the browser. Names, shapes and capability groups are
//! the editor's contract; every description is Atelier's own.

use serde_json::{json, Value};

use super::schema::{
    any_of, array_min, boolean, closed_object, describe, int_min, int_range, literal, number,
    object, one_of_strings, record, s1, string, unknown,
};
use super::{Execution, ToolSpec};
use crate::store::Scope;

const READ: &[&str] = &["site.read"];
const STRUCT: &[&str] = &["site.structure.edit"];
const CONTENT: &[&str] = &["site.content.edit", "site.structure.edit"];
const STYLE: &[&str] = &["site.style.edit"];
const NONE: &[&str] = &[];

/// A document reference: a page, a template or a visual component, by id.
pub fn document_ref() -> Value {
    any_of(
        ["page", "template", "visualComponent"]
            .into_iter()
            .map(|kind| object(vec![("type", literal(kind)), ("id", s1())], vec![]))
            .collect(),
    )
}

fn scale_bound(size_key: &str) -> Value {
    object(
        vec![],
        vec![
            (size_key, number()),
            ("scaleRatio", any_of(vec![number(), string()])),
        ],
    )
}

fn scale(size_key: &str) -> Value {
    object(
        vec![],
        vec![
            ("groupId", s1()),
            ("namingConvention", s1()),
            ("steps", s1()),
            ("baseScaleIndex", int_min(0)),
            ("min", scale_bound(size_key)),
            ("max", scale_bound(size_key)),
        ],
    )
}

/// The flat schema `site_apply_css` advertises (providers refuse a root-level union); the
/// per-operation rules are checked by [`super::css::check_apply_css`] before the bridge.
pub fn apply_css_schema() -> Value {
    closed_object(
        vec![(
            "operation",
            describe(
                one_of_strings(&["merge", "replace", "delete", "remove-properties"]),
                "merge adds or patches declarations; replace makes the given CSS the whole rule; \
                 delete removes whole rules by exact selector; remove-properties drops named \
                 properties from rules.",
            ),
        )],
        vec![
            (
                "css",
                describe(s1(), "The stylesheet text for merge and replace."),
            ),
            (
                "selectors",
                describe(
                    json!({"type": "array", "items": s1(), "minItems": 1, "maxItems": 100, "uniqueItems": true}),
                    "Exact selector texts, for delete and remove-properties.",
                ),
            ),
            (
                "properties",
                describe(
                    json!({"type": "array",
                           "items": {"type": "string", "pattern": "^-{0,2}[a-zA-Z][a-zA-Z0-9-]*$"},
                           "minItems": 1, "maxItems": 100, "uniqueItems": true}),
                    "CSS property names to remove (vendor and custom properties allowed), for \
                     remove-properties.",
                ),
            ),
        ],
    )
}

fn spec(
    name: &'static str,
    execution: Execution,
    mutates: bool,
    capabilities: &'static [&'static str],
    description: &'static str,
    input_schema: Value,
) -> ToolSpec {
    ToolSpec {
        name,
        scope: Scope::Site,
        execution,
        mutates,
        capabilities,
        description,
        input_schema,
    }
}

/// The site tools in the order they are offered: the six reads, then the browser tools.
pub fn tools() -> Vec<ToolSpec> {
    use Execution::{Browser, Server};
    let node = || object(vec![("nodeId", s1())], vec![]);
    let page = || object(vec![("pageId", s1())], vec![]);
    vec![
        spec("site_list_documents", Server, false, READ,
            "List every editable document — pages, templates and visual components — with its reference, title, root node, whether it is the one open now, and a one-line summary. Use these references with site_read_document and site_open_document.",
            object(vec![], vec![])),
        spec("site_list_modules", Server, false, READ,
            "List the element modules the editor can insert, with their property schemas and defaults; optionally only one category (matched case-insensitively).",
            object(vec![], vec![("category", string())])),
        spec("site_list_tokens", Server, false, READ,
            "Show the design system in full: colour tokens, typography and spacing scales, and font tokens, each with its CSS variable. Pass family to get only colors, typography, spacing or fonts.",
            object(vec![], vec![("family", one_of_strings(&["colors", "typography", "spacing", "fonts"]))])),
        spec("site_list_post_types", Server, false, READ,
            "List the routable collections a template can target with kind postTypes: slug, label, route base and kind.",
            object(vec![], vec![])),
        spec("site_list_loop_sources", Server, false, READ,
            "Describe what a repeated list can be bound to: loop source ids, their fields and order options, and every data table with the {currentEntry.field} tokens to use inside an <instatic-loop> body.",
            object(vec![], vec![])),
        spec("site_list_breakpoints", Server, false, READ,
            "List the configured breakpoints with their widths and media queries, and which one is active.",
            object(vec![], vec![])),
        spec("site_insert_html", Browser, true, STRUCT,
            "Insert semantic HTML as editable nodes under parentId (optionally at index). A <style> block in the payload becomes styles: a bare .class rule becomes a reusable class, other selectors become page rules. Scripts and on* handlers are removed. Returns the new nodeIds.",
            object(vec![("parentId", s1()), ("html", s1())], vec![("index", int_min(0))])),
        spec("site_get_node_html", Browser, false, NONE,
            "Read one node's subtree back as HTML, each element carrying its uid.",
            node()),
        spec("site_read_document", Browser, false, READ,
            "Read a document as HTML annotated with uid=\"<nodeId>\" plus the CSS that applies to it, without switching the canvas. Without document, reads the open one. Long documents come in parts: call again with part set to pageInfo.nextPart until it is null.",
            object(vec![], vec![("document", document_ref()), ("part", int_min(1))])),
        spec("site_open_document", Browser, false, READ,
            "Switch the editor's canvas to a page, template or visual component.",
            object(vec![("document", document_ref())], vec![])),
        spec("site_replace_node_html", Browser, true, STRUCT,
            "Replace a node's children with the given HTML (same rules as site_insert_html). A payload that is only a <style> block updates styles and keeps the children.",
            object(vec![("nodeId", s1()), ("html", s1())], vec![])),
        spec("site_delete_node", Browser, true, STRUCT,
            "Delete a node and everything inside it.",
            node()),
        spec("site_update_node_props", Browser, true, CONTENT,
            "Shallow-merge patch into a node's properties; with breakpointId, only for that breakpoint (where the property allows it).",
            object(vec![("nodeId", s1()), ("patch", record(unknown()))], vec![("breakpointId", s1())])),
        spec("site_move_node", Browser, true, STRUCT,
            "Move a node under newParentId at the zero-based newIndex.",
            object(vec![("nodeId", s1()), ("newParentId", s1()), ("newIndex", int_min(0))], vec![])),
        spec("site_rename_node", Browser, true, CONTENT,
            "Change the label a node shows in the editor's layer panel; the page does not change.",
            object(vec![("nodeId", s1()), ("label", s1())], vec![])),
        spec("site_duplicate_node", Browser, true, STRUCT,
            "Copy a node's subtree count times (1–50) right after it. Returns nodeId and nodeIds.",
            object(vec![("nodeId", s1())], vec![("count", int_range(1, 50))])),
        spec("site_apply_css", Browser, true, STYLE,
            "Author CSS on its own. operation merge adds or patches (needs css); replace makes the given CSS each selector's whole rule (needs css); delete removes rules by exact selector text (needs selectors); remove-properties removes properties from rules (needs selectors and properties). Selectors match by exact text; !important is kept. Returns cssRulesCreated, cssRulesUpdated, cssRulesDeleted or cssPropertiesRemoved.",
            apply_css_schema()),
        spec("site_assign_class", Browser, true, STYLE,
            "Attach an existing class (by id or name) to a node.",
            object(vec![("nodeId", s1()), ("classId", s1())], vec![])),
        spec("site_remove_class", Browser, true, STYLE,
            "Detach a class from a node; the class itself stays.",
            object(vec![("nodeId", s1()), ("classId", s1())], vec![])),
        spec("site_list_code_assets", Browser, false, READ,
            "List the site's runtime scripts and stylesheets with ids, paths, hashes, sizes and runtime settings.",
            object(vec![], vec![("type", one_of_strings(&["script", "style"]))])),
        spec("site_read_code_asset", Browser, false, READ,
            "Read a script or stylesheet by fileId or path, in parts (part, maxChars up to 100000). The hash returned is the whole file's, for site_patch_code_asset.",
            object(vec![], vec![("fileId", s1()), ("path", s1()), ("part", int_min(1)), ("maxChars", int_range(1, 100_000))])),
        spec("site_write_code_asset", Browser, true, STRUCT,
            "Create or overwrite a runtime script or stylesheet at path. Behaviour belongs here, not in HTML. For module scripts, list npm packages they import in dependencies.",
            object(
                vec![("path", s1()), ("type", one_of_strings(&["script", "style"])), ("content", string())],
                vec![
                    ("runtime", record(unknown())),
                    ("dependencies", describe(record(s1()), "Package name to version or range, added to the site's dependencies.")),
                ],
            )),
        spec("site_patch_code_asset", Browser, true, STRUCT,
            "Apply exact text replacements to a script or stylesheet, only if expectedHash is still its hash. An oldText that matches more than once needs more context or replaceAll.",
            object(
                vec![
                    ("expectedHash", s1()),
                    ("replacements", array_min(
                        object(vec![("oldText", s1()), ("newText", string())], vec![("replaceAll", boolean())]),
                        1,
                    )),
                ],
                vec![("fileId", s1()), ("path", s1())],
            )),
        spec("site_inspect_code_runtime", Browser, false, READ,
            "Report which runtime scripts and stylesheets load on the open page or template, or on the given document.",
            object(vec![], vec![("document", document_ref())])),
        spec("site_add_page", Browser, true, STRUCT,
            "Create an empty page (the slug is made unique) and open it. Returns pageId and rootNodeId; build into the root with site_insert_html.",
            object(vec![("title", s1())], vec![("slug", string())])),
        spec("site_delete_page", Browser, true, STRUCT,
            "Delete a page; the last page cannot be deleted.",
            page()),
        spec("site_rename_page", Browser, true, STRUCT,
            "Change a page's title and optionally its slug; the slug index makes it the homepage.",
            object(vec![("pageId", s1()), ("title", s1())], vec![("slug", string())])),
        spec("site_duplicate_page", Browser, true, STRUCT,
            "Copy a page with all its nodes under a new title. Returns pageId.",
            object(vec![("pageId", s1()), ("title", s1())], vec![("slug", string())])),
        spec("site_set_page_template", Browser, true, STRUCT,
            "Make a page a template for everywhere, for the 404 page, or for posts of the given collections (slugs from site_list_post_types), with an optional priority (default 100). Content flows into its <instatic-outlet>.",
            object(
                vec![
                    ("pageId", s1()),
                    ("target", any_of(vec![
                        object(vec![("kind", literal("everywhere"))], vec![]),
                        object(vec![("kind", literal("postTypes")), ("tableSlugs", array_min(s1(), 1))], vec![]),
                        object(vec![("kind", literal("notFound"))], vec![]),
                    ])),
                ],
                vec![("priority", number())],
            )),
        spec("site_clear_page_template", Browser, true, STRUCT,
            "Turn a template back into an ordinary page.",
            page()),
        spec("site_set_color_tokens", Browser, true, STYLE,
            "Create or update colour tokens by slug; each becomes var(--<slug>) with utility classes.",
            object(vec![("tokens", array_min(object(
                vec![("slug", s1()), ("lightValue", s1())],
                vec![("category", string()), ("darkValue", string()), ("darkModeEnabled", boolean())],
            ), 1))], vec![])),
        spec("site_set_font_tokens", Browser, true, STYLE,
            "Create or update font tokens. googleFamily installs a web font; familyId reuses an installed one; neither keeps only the fallback stack.",
            object(vec![("tokens", array_min(object(
                vec![("name", s1())],
                vec![
                    ("variable", string()), ("fallback", string()), ("googleFamily", string()),
                    ("variants", json!({"type": "array", "items": s1()})),
                    ("subsets", json!({"type": "array", "items": s1()})),
                    ("familyId", s1()),
                ],
            ), 1))], vec![])),
        spec("site_set_type_scale", Browser, true, STYLE,
            "Configure the typography scale that generates the --text-* variables; creates it when there is none.",
            scale("fontSize")),
        spec("site_set_spacing_scale", Browser, true, STYLE,
            "Configure the spacing scale that generates the --space-* variables; creates it when there is none.",
            scale("size")),
        spec("site_render_snapshot", Browser, false, NONE,
            "Render the page (or one node) at a breakpoint and report geometry, warnings and computed styles; models that can see images in tool results also get a screenshot.",
            object(vec![], vec![("breakpointId", s1()), ("nodeId", s1())])),
    ]
}
