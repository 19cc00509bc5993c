//! Font tokens: the variable `--font-<name>` of each token and the `font-family` value it
//! holds — the installed family in quotes followed by the fallback stack, or the fallback
//! stack alone when the token uses no installed family.

use super::{locale_cmp, FontDescriptor, FontSettings, FontToken};

/// The variable slug of an authored one: no leading dashes, lower case, runs of anything but
/// `a-z0-9` as one `-`, `font-` in front unless already there; empty when nothing is left.
pub fn normalize_variable(raw: &str) -> String {
    let lower = raw.trim().trim_start_matches('-').to_lowercase();
    let mut out = String::with_capacity(lower.len());
    let mut in_run = false;
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let out = out.trim_matches('-');
    if out.is_empty() {
        String::new()
    } else if out.starts_with("font-") {
        out.to_owned()
    } else {
        format!("font-{out}")
    }
}

/// The fallback stack: each comma-separated part trimmed and stripped of characters that
/// could break out of the CSS value; `sans-serif` when nothing is left.
pub fn sanitize_fallback(raw: Option<&str>) -> String {
    let parts: Vec<String> = raw
        .unwrap_or_default()
        .split(',')
        .map(|part| {
            part.trim()
                .chars()
                .filter(|c| !matches!(c, '"' | '\\' | '\n' | '\r' | '<' | '>' | ';' | '{' | '}'))
                .collect::<String>()
        })
        .filter(|part| !part.is_empty())
        .collect();
    if parts.is_empty() {
        "sans-serif".to_owned()
    } else {
        parts.join(", ")
    }
}

/// The font descriptors of `fonts`, by `order` then name.
pub fn describe(fonts: &FontSettings) -> Vec<FontDescriptor> {
    let mut tokens: Vec<&FontToken> = fonts.tokens.iter().collect();
    tokens.sort_by(|a, b| {
        a.order
            .partial_cmp(&b.order)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| locale_cmp(&a.name, &b.name))
    });
    tokens
        .into_iter()
        .map(|token| {
            let variable = normalize_variable(&token.variable);
            let (css_var, reference) = if variable.is_empty() {
                (String::new(), String::new())
            } else {
                (format!("--{variable}"), format!("var(--{variable})"))
            };
            let entry = token
                .family_id
                .as_deref()
                .and_then(|id| fonts.items.iter().find(|item| item.id == id));
            let fallback = sanitize_fallback(token.fallback.as_deref());
            let stack = match entry {
                Some(entry) => {
                    let family: String = entry
                        .family
                        .chars()
                        .filter(|c| !matches!(c, '"' | '\\' | '\n' | '\r' | '<' | '>'))
                        .collect();
                    format!("\"{family}\", {fallback}")
                }
                None => fallback,
            };
            FontDescriptor {
                name: token.name.clone(),
                css_var,
                reference,
                family: entry.map(|e| e.family.clone()).unwrap_or_default(),
                stack,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_stacks() {
        assert_eq!(normalize_variable("font-body"), "font-body");
        assert_eq!(normalize_variable("--Heading Serif"), "font-heading-serif");
        assert_eq!(normalize_variable("--"), "");
        assert_eq!(
            sanitize_fallback(Some(" \"Georgia\" , ;serif,")),
            "Georgia, serif"
        );
        assert_eq!(sanitize_fallback(None), "sans-serif");
    }
}
