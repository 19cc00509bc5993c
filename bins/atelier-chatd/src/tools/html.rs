//! HTML payload checks before the bridge, for `site_insert_html` and
//! `site_replace_node_html`: `<script>` elements, inline `on*` handlers and `javascript:` URLs
//! are removed with a streaming HTML rewriter (the editor strips them too; this is defence in
//! depth), every `<style>` block must parse as CSS, and loop tokens must use the importer's
//! single-brace grammar.

use std::cell::RefCell;

use lol_html::html_content::{Element, TextChunk};
use lol_html::{element, rewrite_str, text, RewriteStrSettings};

use super::css::{check_css, CssReport};

/// The loop token grammar the importer understands.
pub const LOOP_TOKEN_GRAMMAR: &str = "{currentEntry.field}";

/// What a checked payload became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedHtml {
    /// The HTML to send to the browser.
    pub html: String,
    /// How many `<script>` elements were removed.
    pub scripts_removed: usize,
    /// How many handler attributes and `javascript:` URLs were removed.
    pub attributes_removed: usize,
    /// Each `<style>` block's classification, in order.
    pub styles: Vec<CssReport>,
}

const URL_ATTRIBUTES: [&str; 5] = ["href", "src", "action", "formaction", "xlink:href"];

fn is_script_url(value: &str) -> bool {
    let squeezed: String = value
        .chars()
        .filter(|c| !c.is_ascii_whitespace() && !c.is_ascii_control())
        .collect();
    squeezed.to_ascii_lowercase().starts_with("javascript:")
}

/// Checks and cleans an HTML payload; `Err` is the tool error the model reads.
pub fn check_html(html: &str) -> Result<CheckedHtml, String> {
    if let Some(start) = html.find("{{") {
        let end = html[start..]
            .find("}}")
            .map_or(html.len(), |e| start + e + 2);
        let token: String = html[start..end].chars().take(60).collect();
        return Err(format!(
            "Loop tokens use single braces: write {LOOP_TOKEN_GRAMMAR} (field ids from site_list_loop_sources), not {token}"
        ));
    }
    let scripts = RefCell::new(0_usize);
    let attributes = RefCell::new(0_usize);
    let styles: RefCell<Vec<String>> = RefCell::new(Vec::new());
    let open_style = RefCell::new(String::new());
    let rewritten = rewrite_str(
        html,
        RewriteStrSettings {
            element_content_handlers: vec![
                element!("script", |el: &mut Element<'_, '_>| {
                    el.remove();
                    *scripts.borrow_mut() += 1;
                    Ok(())
                }),
                element!("*", |el: &mut Element<'_, '_>| {
                    let doomed: Vec<String> = el
                        .attributes()
                        .iter()
                        .filter(|a| {
                            let name = a.name();
                            name.starts_with("on")
                                || (URL_ATTRIBUTES.contains(&name.as_str())
                                    && is_script_url(&a.value()))
                        })
                        .map(|a| a.name())
                        .collect();
                    for name in doomed {
                        el.remove_attribute(&name);
                        *attributes.borrow_mut() += 1;
                    }
                    Ok(())
                }),
                text!("style", |chunk: &mut TextChunk<'_>| {
                    open_style.borrow_mut().push_str(chunk.as_str());
                    if chunk.last_in_text_node() {
                        let css = std::mem::take(&mut *open_style.borrow_mut());
                        styles.borrow_mut().push(css);
                    }
                    Ok(())
                }),
            ],
            ..RewriteStrSettings::new()
        },
    )
    .map_err(|error| format!("The HTML could not be read: {error}"))?;
    let mut reports = Vec::new();
    for (index, css) in styles.into_inner().iter().enumerate() {
        if css.trim().is_empty() {
            continue;
        }
        reports
            .push(check_css(css).map_err(|error| format!("<style> block {}: {error}", index + 1))?);
    }
    Ok(CheckedHtml {
        html: rewritten,
        scripts_removed: scripts.into_inner(),
        attributes_removed: attributes.into_inner(),
        styles: reports,
    })
}
