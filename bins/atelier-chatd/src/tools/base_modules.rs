//! The CMS's base modules — the element types every site has — as `site_list_modules`
//! describes them. The CMS defines these in its own code (one module definition per element,
//! registered when the editor and the server start) and never sends them to chatd, so this
//! table restates them: for each module its id, name, description, picker category, whether
//! it takes children, its default props, and its property controls (key, control type,
//! label, description, default value and select options). Keep it equal to the CMS's base
//! modules when they change. Plugin module packs are not included.

use serde_json::{json, Map, Value};

/// A property control of a module.
struct Control {
    key: &'static str,
    kind: &'static str,
    label: &'static str,
    description: Option<&'static str>,
    options: Vec<(&'static str, &'static str)>,
}

fn control(key: &'static str, kind: &'static str, label: &'static str) -> Control {
    Control {
        key,
        kind,
        label,
        description: None,
        options: Vec::new(),
    }
}

fn described(mut control: Control, description: &'static str) -> Control {
    control.description = Some(description);
    control
}

fn select(
    key: &'static str,
    label: &'static str,
    options: &[(&'static str, &'static str)],
) -> Control {
    Control {
        options: options.to_vec(),
        ..control(key, "select", label)
    }
}

/// A base module definition.
struct Module {
    id: &'static str,
    name: &'static str,
    description: Option<&'static str>,
    category: &'static str,
    can_have_children: bool,
    defaults: Value,
    controls: Vec<Control>,
}

/// The semantic tags a container, loop or outlet can render as, plus a custom one.
const HTML_TAGS: [(&str, &str); 11] = [
    ("div", "div"),
    ("section", "section"),
    ("article", "article"),
    ("main", "main"),
    ("header", "header"),
    ("footer", "footer"),
    ("nav", "nav"),
    ("aside", "aside"),
    ("ul", "ul"),
    ("ol", "ol"),
    ("Custom…", "custom"),
];

const ANCHOR_TARGETS: [(&str, &str); 3] = [
    ("Same tab", "_self"),
    ("New tab", "_blank"),
    ("Parent", "_parent"),
];

const INPUT_TYPES: [(&str, &str); 12] = [
    ("text", "text"),
    ("email", "email"),
    ("password", "password"),
    ("search", "search"),
    ("tel", "tel"),
    ("url", "url"),
    ("number", "number"),
    ("date", "date"),
    ("time", "time"),
    ("datetime-local", "datetime-local"),
    ("file", "file"),
    ("hidden", "hidden"),
];

fn tag_controls() -> Vec<Control> {
    vec![
        select("tag", "HTML tag", &HTML_TAGS),
        control("customTag", "text", "Custom tag"),
    ]
}

fn choice(id: &'static str, name: &'static str, description: &'static str) -> Module {
    Module {
        id,
        name,
        description: Some(description),
        category: "Forms",
        can_have_children: false,
        defaults: json!({"fieldId": "", "name": "", "id": "", "value": "on", "checked": false,
                         "required": false, "disabled": false}),
        controls: vec![
            control("fieldId", "text", "Field ID"),
            control("name", "text", "Name"),
            control("id", "text", "ID"),
            control("value", "text", "Value"),
            control("checked", "toggle", "Checked"),
            control("required", "toggle", "Required"),
            control("disabled", "toggle", "Disabled"),
        ],
    }
}

fn slot(
    id: &'static str,
    description: &'static str,
    can_have_children: bool,
    hint: &'static str,
) -> Module {
    Module {
        id,
        name: "Slot",
        description: Some(description),
        category: "Components",
        can_have_children,
        defaults: json!({"slotName": "children"}),
        controls: vec![described(control("slotName", "text", "Slot name"), hint)],
    }
}

/// Every base module, `base.body` included, in the CMS's registration order.
fn modules() -> Vec<Module> {
    vec![
        Module {
            id: "base.body",
            name: "Body",
            description: None,
            category: "Layout",
            can_have_children: true,
            defaults: json!({}),
            controls: Vec::new(),
        },
        Module {
            id: "base.container",
            name: "Container",
            description: Some("A semantic container."),
            category: "Layout",
            can_have_children: true,
            defaults: json!({"tag": "div", "customTag": "", "htmlAttributes": {}}),
            controls: tag_controls(),
        },
        Module {
            id: "base.loop",
            name: "Loop",
            description: Some("Iterate a data source and repeat the child template per item."),
            category: "Layout",
            can_have_children: true,
            defaults: json!({"sourceId": "", "filters": {}, "orderBy": "", "direction": "desc",
                             "limit": 10, "offset": 0, "pagination": "none", "pageSize": 10,
                             "tag": "div", "customTag": ""}),
            // Its settings depend on the source, so the editor gives it no generic controls.
            controls: Vec::new(),
        },
        Module {
            id: "base.text",
            name: "Text",
            description: Some("A semantic text element."),
            category: "Typography",
            can_have_children: false,
            defaults: json!({"text": "Add your text here.", "tag": "p", "htmlAttributes": {}}),
            controls: vec![
                control("text", "textarea", "Text"),
                select(
                    "tag",
                    "Tag",
                    &[
                        ("Paragraph", "p"),
                        ("None", "none"),
                        ("Heading 1", "h1"),
                        ("Heading 2", "h2"),
                        ("Heading 3", "h3"),
                        ("Heading 4", "h4"),
                        ("Heading 5", "h5"),
                        ("Heading 6", "h6"),
                        ("Span", "span"),
                        ("Div", "div"),
                        ("Small", "small"),
                        ("Strong", "strong"),
                        ("Emphasis", "em"),
                    ],
                ),
            ],
        },
        Module {
            id: "base.list",
            name: "List",
            description: Some("An ordered or unordered list."),
            category: "Typography",
            can_have_children: false,
            defaults: json!({"items": "", "listType": "unordered"}),
            controls: vec![
                control("items", "textarea", "Items"),
                select(
                    "listType",
                    "List type",
                    &[("Bullet", "unordered"), ("Numbered", "ordered")],
                ),
            ],
        },
        Module {
            id: "base.outlet",
            name: "Content Outlet",
            description: Some(
                "Where matched content (a page or the current entry body) flows in.",
            ),
            category: "CMS",
            can_have_children: false,
            defaults: json!({"tag": "main", "customTag": "", "html": ""}),
            controls: {
                let mut controls = tag_controls();
                controls.push(control("html", "richtext", "Content"));
                controls
            },
        },
        Module {
            id: "base.image",
            name: "Image",
            description: Some("A responsive image."),
            category: "Media",
            can_have_children: false,
            defaults: json!({"src": "", "loading": "lazy", "fetchPriority": "auto",
                             "decoding": "async", "htmlAttributes": {}}),
            controls: vec![
                control("src", "image", "Image"),
                select("loading", "Loading", &[("Lazy", "lazy"), ("Eager", "eager")]),
                select(
                    "fetchPriority",
                    "Fetch priority",
                    &[
                        ("Auto", "auto"),
                        ("High (above the fold)", "high"),
                        ("Low (offscreen)", "low"),
                    ],
                ),
                select(
                    "decoding",
                    "Decoding",
                    &[("Async", "async"), ("Sync", "sync"), ("Auto", "auto")],
                ),
            ],
        },
        Module {
            id: "base.svg",
            name: "SVG",
            description: Some("Inline vector graphic (logo or icon)."),
            category: "Media",
            can_have_children: false,
            defaults: json!({"svg": "", "title": ""}),
            controls: vec![
                control("svg", "svg", "SVG"),
                control("title", "text", "Accessible label"),
            ],
        },
        Module {
            id: "base.button",
            name: "Button",
            description: Some("A button or call-to-action link."),
            category: "Interactive",
            can_have_children: false,
            defaults: json!({"label": "Get Started", "href": "", "target": "_self",
                             "disabled": false, "htmlAttributes": {}}),
            controls: vec![
                control("label", "text", "Label"),
                control("href", "url", "Link URL"),
                select("target", "Link target", &ANCHOR_TARGETS),
                control("disabled", "toggle", "Disabled"),
            ],
        },
        Module {
            id: "base.link",
            name: "Link",
            description: Some("An anchor element."),
            category: "Interactive",
            can_have_children: true,
            defaults: json!({"href": "#", "text": "Click here", "target": "_self",
                             "htmlAttributes": {}}),
            controls: vec![
                control("href", "url", "URL"),
                control("text", "text", "Link text"),
                select("target", "Target", &ANCHOR_TARGETS),
            ],
        },
        Module {
            id: "base.form",
            name: "Form",
            description: Some("A CMS-native or custom HTML form."),
            category: "Forms",
            can_have_children: true,
            defaults: json!({"mode": "cms", "formId": "form", "targetTableId": "", "action": "",
                             "method": "post", "successBehavior": "message",
                             "successMessage": "Thanks. Your submission was received.",
                             "redirectUrl": "", "honeypotName": "company",
                             "minSubmitSeconds": 2}),
            controls: vec![
                select(
                    "mode",
                    "Mode",
                    &[("CMS-native", "cms"), ("Custom action", "custom")],
                ),
                control("formId", "text", "Form ID"),
                control("targetTableId", "dataTable", "Target data table"),
                control("action", "url", "Action URL"),
                select(
                    "method",
                    "Method",
                    &[("GET", "get"), ("POST", "post"), ("Dialog", "dialog")],
                ),
                select(
                    "successBehavior",
                    "Success behavior",
                    &[("Show message", "message"), ("Redirect", "redirect")],
                ),
                control("successMessage", "text", "Success message"),
                control("redirectUrl", "url", "Redirect URL"),
                control("honeypotName", "text", "Honeypot field"),
                control("minSubmitSeconds", "number", "Minimum fill seconds"),
            ],
        },
        Module {
            id: "base.label",
            name: "Label",
            description: Some("A label for a form control."),
            category: "Forms",
            can_have_children: false,
            defaults: json!({"text": "Label", "targetMode": "auto", "targetId": ""}),
            controls: vec![
                control("text", "text", "Text"),
                select(
                    "targetMode",
                    "Target",
                    &[("Auto", "auto"), ("Explicit", "explicit")],
                ),
                control("targetId", "text", "Target ID"),
            ],
        },
        Module {
            id: "base.input",
            name: "Input",
            description: Some("A single-line form input."),
            category: "Forms",
            can_have_children: false,
            defaults: json!({"inputType": "text", "fieldId": "", "name": "", "id": "",
                             "placeholder": "", "value": "", "required": false,
                             "disabled": false, "readOnly": false, "autocomplete": "",
                             "min": "", "max": "", "minLength": 0, "maxLength": 0,
                             "pattern": ""}),
            controls: vec![
                select("inputType", "Input type", &INPUT_TYPES),
                control("fieldId", "text", "Field ID"),
                control("name", "text", "Name"),
                control("id", "text", "ID"),
                control("placeholder", "text", "Placeholder"),
                control("value", "text", "Default value"),
                control("required", "toggle", "Required"),
                control("disabled", "toggle", "Disabled"),
                control("readOnly", "toggle", "Read-only"),
                control("autocomplete", "text", "Autocomplete"),
                control("min", "text", "Min"),
                control("max", "text", "Max"),
                control("minLength", "number", "Minimum length"),
                control("maxLength", "number", "Maximum length"),
                control("pattern", "text", "Pattern"),
            ],
        },
        Module {
            id: "base.textarea",
            name: "Textarea",
            description: Some("A multi-line form input."),
            category: "Forms",
            can_have_children: false,
            defaults: json!({"fieldId": "", "name": "", "id": "", "placeholder": "", "value": "",
                             "required": false, "disabled": false, "readOnly": false,
                             "rows": 4, "minLength": 0, "maxLength": 0}),
            controls: vec![
                control("fieldId", "text", "Field ID"),
                control("name", "text", "Name"),
                control("id", "text", "ID"),
                control("placeholder", "text", "Placeholder"),
                control("value", "textarea", "Default value"),
                control("required", "toggle", "Required"),
                control("disabled", "toggle", "Disabled"),
                control("readOnly", "toggle", "Read-only"),
                control("rows", "number", "Rows"),
                control("minLength", "number", "Minimum length"),
                control("maxLength", "number", "Maximum length"),
            ],
        },
        Module {
            id: "base.select",
            name: "Select",
            description: Some("A select menu."),
            category: "Forms",
            can_have_children: true,
            defaults: json!({"fieldId": "", "name": "", "id": "", "required": false,
                             "disabled": false, "multiple": false}),
            controls: vec![
                control("fieldId", "text", "Field ID"),
                control("name", "text", "Name"),
                control("id", "text", "ID"),
                control("required", "toggle", "Required"),
                control("disabled", "toggle", "Disabled"),
                control("multiple", "toggle", "Multiple"),
            ],
        },
        Module {
            id: "base.option",
            name: "Option",
            description: Some("An option inside a select."),
            category: "Forms",
            can_have_children: false,
            defaults: json!({"value": "", "label": "Option", "selected": false, "disabled": false}),
            controls: vec![
                control("value", "text", "Value"),
                control("label", "text", "Label"),
                control("selected", "toggle", "Selected"),
                control("disabled", "toggle", "Disabled"),
            ],
        },
        Module {
            id: "base.option-group",
            name: "Option group",
            description: Some("A group of select options."),
            category: "Forms",
            can_have_children: true,
            defaults: json!({"label": "Group", "disabled": false}),
            controls: vec![
                control("label", "text", "Label"),
                control("disabled", "toggle", "Disabled"),
            ],
        },
        choice("base.checkbox", "Checkbox", "A checkbox form control."),
        choice("base.radio", "Radio", "A radio form control."),
        Module {
            id: "base.submit",
            name: "Submit",
            description: Some("A submit button."),
            category: "Forms",
            can_have_children: false,
            defaults: json!({"label": "Submit", "disabled": false, "formId": ""}),
            controls: vec![
                control("label", "text", "Label"),
                control("disabled", "toggle", "Disabled"),
                control("formId", "text", "Form ID override"),
            ],
        },
        Module {
            id: "base.form-message",
            name: "Form message",
            description: Some("A status, success, or error message for a form."),
            category: "Forms",
            can_have_children: false,
            defaults: json!({"formId": "", "kind": "status", "text": ""}),
            controls: vec![
                control("formId", "text", "Form ID"),
                select(
                    "kind",
                    "Kind",
                    &[("Status", "status"), ("Success", "success"), ("Error", "error")],
                ),
                control("text", "text", "Text"),
            ],
        },
        Module {
            id: "base.video",
            name: "Video",
            description: Some(
                "Embed an uploaded video, an external video URL, or a YouTube link.",
            ),
            category: "Media",
            can_have_children: false,
            defaults: json!({"videoUrl": "", "poster": "", "autoplay": false, "loop": false,
                             "muted": false, "controls": true, "playsinline": true,
                             "preload": "metadata", "title": "YouTube video",
                             "noRelatedVideos": false}),
            controls: vec![
                described(
                    control("videoUrl", "media", "Video"),
                    "Pick a file from the media library, paste an external URL, or paste a YouTube link.",
                ),
                described(
                    control("poster", "image", "Poster image"),
                    "Shown before the video starts. For YouTube, also shown while the player lazy-loads.",
                ),
                control("autoplay", "toggle", "Autoplay"),
                control("loop", "toggle", "Loop"),
                control("muted", "toggle", "Muted"),
                control("controls", "toggle", "Show controls"),
                control("playsinline", "toggle", "Play inline (mobile)"),
                select(
                    "preload",
                    "Preload",
                    &[("None", "none"), ("Metadata", "metadata"), ("Auto", "auto")],
                ),
                described(
                    control("title", "text", "Video title"),
                    "Accessibility label for the embedded YouTube player iframe.",
                ),
                described(
                    control("noRelatedVideos", "toggle", "Hide related videos"),
                    "Adds rel=0 to suppress YouTube recommended videos after playback.",
                ),
            ],
        },
        slot(
            "base.slot-instance",
            "A materialized slot for component content",
            true,
            "Identifies which slot outlet this content fills",
        ),
        slot(
            "base.slot-outlet",
            "A slot placeholder for component content",
            false,
            "camelCase identifier (e.g. children, header, footer)",
        ),
        Module {
            id: "base.visual-component-ref",
            name: "Component",
            description: Some("A reference to a Visual Component"),
            category: "Components",
            can_have_children: true,
            defaults: json!({"componentId": "", "propOverrides": {}}),
            // Edited through the component's own parameters, not generic controls.
            controls: Vec::new(),
        },
    ]
}

/// The style hints offered for text modules: the typography properties the model may set.
fn typography_styles() -> Value {
    let hint = |key: &str, kind: &str, label: &str, default: &str| {
        json!({"key": key, "type": kind, "label": label, "defaultValue": default,
               "cssProperties": [key]})
    };
    let options = |pairs: &[(&str, &str)]| -> Value {
        pairs
            .iter()
            .map(|(label, value)| json!({"label": label, "value": value}))
            .collect()
    };
    let mut weight = hint("fontWeight", "select", "Font weight", "400");
    weight["options"] = options(&[
        ("Regular", "400"),
        ("Medium", "500"),
        ("Semi bold", "600"),
        ("Bold", "700"),
        ("Black", "900"),
    ]);
    let mut align = hint("textAlign", "select", "Text align", "left");
    align["options"] = options(&[
        ("Left", "left"),
        ("Center", "center"),
        ("Right", "right"),
        ("Justify", "justify"),
    ]);
    json!([
        hint("fontFamily", "text", "Font family", "inherit"),
        hint("fontSize", "text", "Font size", "16px"),
        weight,
        hint("lineHeight", "text", "Line height", "1.4"),
        hint("letterSpacing", "text", "Letter spacing", "0px"),
        hint("color", "color", "Text color", "inherit"),
        align,
        hint("marginBottom", "text", "Bottom margin", "0px"),
    ])
}

fn describe(module: Module) -> Value {
    let props: Vec<Value> = module
        .controls
        .iter()
        .map(|c| {
            let mut prop = Map::new();
            prop.insert("key".into(), json!(c.key));
            prop.insert("type".into(), json!(c.kind));
            prop.insert("label".into(), json!(c.label));
            if let Some(description) = c.description {
                prop.insert("description".into(), json!(description));
            }
            prop.insert(
                "defaultValue".into(),
                module.defaults.get(c.key).cloned().unwrap_or(Value::Null),
            );
            if !c.options.is_empty() {
                let options: Vec<Value> = c
                    .options
                    .iter()
                    .map(|(label, value)| json!({"label": label, "value": value}))
                    .collect();
                prop.insert("options".into(), Value::Array(options));
            }
            Value::Object(prop)
        })
        .collect();
    let styles = if module.id == "base.text" || module.category.eq_ignore_ascii_case("typography") {
        typography_styles()
    } else {
        json!([])
    };
    let mut info = json!({
        "id": module.id,
        "name": module.name,
        "category": module.category,
        "canHaveChildren": module.can_have_children,
        "defaults": module.defaults,
        "props": props,
        "styles": styles,
    });
    if let Some(description) = module.description {
        info["description"] = json!(description);
    }
    info
}

/// Every base module id, `base.body` included, in registration order.
pub fn ids() -> Vec<&'static str> {
    modules().iter().map(|m| m.id).collect()
}

/// The insertable base modules (all but `base.body`) sorted by id, each as the module
/// catalogue entry `site_list_modules` returns.
pub fn catalogue() -> Vec<Value> {
    let mut modules: Vec<Module> = modules()
        .into_iter()
        .filter(|m| m.id != "base.body")
        .collect();
    modules.sort_by(|a, b| super::tokens::locale_cmp(a.id, b.id));
    modules.into_iter().map(describe).collect()
}
