//! Declarations for unit tests: the committed example with its sites replaced.

use atelier_layout::Declaration;

/// The example declaration (`deploy/examples/instance.json`) declaring exactly `slugs`, each
/// at `<slug>.example.org` in the default webspace base.
pub fn declaration(slugs: &[&str]) -> Declaration {
    Declaration::parse(&declaration_json(slugs)).unwrap()
}

/// The text [`declaration`] parses.
pub fn declaration_json(slugs: &[&str]) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/instance.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["sites"] = slugs
        .iter()
        .map(|s| serde_json::json!({ "slug": s, "domain": format!("{s}.example.org") }))
        .collect();
    json["serving"]["aliases"] = serde_json::json!({});
    json.to_string()
}
