//! CSS checks before the bridge, as a table of named stylesheets: each either classifies into
//! the rules the editor's importer will create (bare class, ambient, media-conditioned,
//! keyframes, other at-rule; `!important` counted) or is refused with its line and column.

use atelier_chatd::tools::css::{check_apply_css, check_css, RuleKind};
use serde_json::json;

use RuleKind::{Ambient, AtRule, Class, Keyframes, MediaConditioned};

/// A named stylesheet, its rules as (kind, selector), and how many `!important`s it has.
type Accepted = (
    &'static str,
    &'static str,
    Vec<(RuleKind, &'static str)>,
    usize,
);

#[test]
fn stylesheets_classify_or_are_refused_with_their_position() {
    // (name, css, rules as (kind, selector), !important count)
    let accepted: Vec<Accepted> = vec![
        (
            "valid bare class",
            ".hero { color: red }",
            vec![(Class, ".hero")],
            0,
        ),
        (
            "class with dashes and digits",
            ".card-2 { padding: 1rem }",
            vec![(Class, ".card-2")],
            0,
        ),
        (
            "underscore class",
            "._x { margin: 0 }",
            vec![(Class, "._x")],
            0,
        ),
        (
            "grouped selector is ambient",
            ".a, .b { color: red }",
            vec![(Ambient, ".a, .b")],
            0,
        ),
        (
            "descendant selector",
            ".hero a { color: red }",
            vec![(Ambient, ".hero a")],
            0,
        ),
        (
            "child combinator",
            "nav > li { display: inline }",
            vec![(Ambient, "nav > li")],
            0,
        ),
        (
            "pseudo-class",
            "a:hover { color: blue }",
            vec![(Ambient, "a:hover")],
            0,
        ),
        (
            "class with pseudo-class",
            ".btn:hover { opacity: .8 }",
            vec![(Ambient, ".btn:hover")],
            0,
        ),
        (
            "compound classes",
            ".btn.primary { color: white }",
            vec![(Ambient, ".btn.primary")],
            0,
        ),
        (
            "element selector",
            "h1 { font-size: 2rem }",
            vec![(Ambient, "h1")],
            0,
        ),
        (
            "id selector",
            "#top { margin: 0 }",
            vec![(Ambient, "#top")],
            0,
        ),
        (
            "attribute selector",
            "[data-x] { color: red }",
            vec![(Ambient, "[data-x]")],
            0,
        ),
        (
            "pseudo-element",
            ".q::before { content: \"“\" }",
            vec![(Ambient, ".q::before")],
            0,
        ),
        (
            "universal selector",
            "* { box-sizing: border-box }",
            vec![(Ambient, "*")],
            0,
        ),
        (
            "@media block",
            "@media (min-width: 768px) { .hero { padding: 2rem } }",
            vec![(MediaConditioned, ".hero")],
            0,
        ),
        (
            "@media with two rules",
            "@media (max-width: 600px) { .a { x: 1 } nav a { y: 2 } }",
            vec![(MediaConditioned, ".a"), (MediaConditioned, "nav a")],
            0,
        ),
        (
            "@keyframes",
            "@keyframes pulse { from { opacity: 0 } to { opacity: 1 } }",
            vec![(Keyframes, "@keyframes pulse")],
            0,
        ),
        (
            "!important kept",
            ".x { color: red !important; margin: 0 }",
            vec![(Class, ".x")],
            1,
        ),
        (
            "two !important",
            "a { color: red !important } b { top: 0 !important }",
            vec![(Ambient, "a"), (Ambient, "b")],
            2,
        ),
        (
            "vendor property",
            ".x { -webkit-text-stroke: 1px black }",
            vec![(Class, ".x")],
            0,
        ),
        (
            "custom property",
            ":root { --brand: #0af }",
            vec![(Ambient, ":root")],
            0,
        ),
        (
            "var() reference",
            ".x { color: var(--brand) }",
            vec![(Class, ".x")],
            0,
        ),
        (
            "unknown property is kept",
            ".x { made-up-thing: 3 }",
            vec![(Class, ".x")],
            0,
        ),
        (
            "comment",
            "/* hero */ .hero { color: red }",
            vec![(Class, ".hero")],
            0,
        ),
        (
            "@font-face is another at-rule",
            "@font-face { font-family: X; src: url(x.woff2) }",
            vec![(AtRule, "@font-face")],
            0,
        ),
        (
            "@supports is another at-rule",
            "@supports (display: grid) { .g { display: grid } }",
            vec![(AtRule, "@supports")],
            0,
        ),
        ("empty rule", ".empty {}", vec![(Class, ".empty")], 0),
        ("empty stylesheet", "", vec![], 0),
        (
            "string with a brace",
            ".q::after { content: \"}\" }",
            vec![(Ambient, ".q::after")],
            0,
        ),
    ];
    for (name, css, rules, important) in &accepted {
        let report = check_css(css).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<(RuleKind, &str)> = report
            .rules
            .iter()
            .map(|r| (r.kind, r.selector.as_str()))
            .collect();
        assert_eq!(&got, rules, "{name}");
        assert_eq!(report.important_declarations, *important, "{name}");
    }
    let media = check_css("@media (min-width: 768px) { .hero { padding: 2rem } }").unwrap();
    assert_eq!(
        media.rules[0].condition.as_deref(),
        Some("(min-width: 768px)")
    );

    // (name, css, line, column)
    let refused: Vec<(&str, &str, u32, u32)> = vec![
        ("unterminated block", ".hero { color: red", 1, 7),
        (
            "unterminated block on a later line",
            "a { b: c }\n.x {\n  color: red;",
            2,
            4,
        ),
        ("stray closing brace", ".a { } }", 1, 8),
        ("unterminated comment", ".a { } /* open", 1, 8),
        ("unterminated string", ".a::after { content: \"x }", 1, 22),
        ("bad selector", ".a..b { color: red }", 1, 4),
        (
            "selector starting with a combinator",
            "> .a { color: red }",
            1,
            1,
        ),
        ("empty class name", ". { color: red }", 1, 2),
    ];
    for (name, css, line, column) in &refused {
        let error = check_css(css).expect_err(name);
        assert_eq!(
            (error.line, error.column),
            (*line, *column),
            "{name}: {error}"
        );
        assert!(
            error.to_string().starts_with(&format!(
                "CSS does not parse at line {line}, column {column}: "
            )),
            "{name}: {error}"
        );
    }
    assert!(accepted.len() + refused.len() >= 30);
}

#[test]
fn apply_css_operations_need_their_own_fields() {
    let cases = [
        (json!({"operation": "merge", "css": ".a { color: red }"}), Ok(())),
        (json!({"operation": "replace", "css": ".a {}"}), Ok(())),
        (json!({"operation": "delete", "selectors": [".a"]}), Ok(())),
        (json!({"operation": "remove-properties", "selectors": [".a"], "properties": ["color"]}), Ok(())),
        (json!({"operation": "merge"}), Err("site_apply_css merge needs css")),
        (json!({"operation": "merge", "css": ".a {"}), Err("CSS does not parse at line 1, column 4: unterminated block: a { is never closed")),
        (json!({"operation": "merge", "css": ".a {}", "selectors": [".a"]}), Err("site_apply_css merge takes css only; selectors and properties belong to delete and remove-properties")),
        (json!({"operation": "delete"}), Err("site_apply_css delete needs selectors")),
        (json!({"operation": "delete", "selectors": [".a"], "css": ".a{}"}), Err("site_apply_css delete takes selectors only")),
        (json!({"operation": "remove-properties", "selectors": [".a"]}), Err("site_apply_css remove-properties needs selectors and properties")),
    ];
    for (input, expected) in cases {
        assert_eq!(
            check_apply_css(&input),
            expected.map_err(str::to_owned),
            "{input}"
        );
    }
}
