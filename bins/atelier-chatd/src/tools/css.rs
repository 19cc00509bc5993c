//! CSS checks before the bridge: a stylesheet is parsed with lightningcss, and a parse error is
//! an ordinary tool error the model can correct, with its line and column. Each rule is
//! classified the way the editor's importer will treat it — a bare `.class` rule becomes a
//! reusable class, any other selector an ambient rule, rules inside `@media` are conditioned on
//! it, `@keyframes` stay raw — and `!important` is counted, never dropped: the payload goes to
//! the browser exactly as written.

use lightningcss::rules::CssRule;
use lightningcss::stylesheet::{ParserOptions, PrinterOptions, StyleSheet};
use lightningcss::traits::ToCss;
use serde::Serialize;
use serde_json::Value;

/// How the editor will treat a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleKind {
    /// `.name {}` alone: a reusable class bound to `class="name"`.
    Class,
    /// Any other selector (descendants, pseudo-classes, elements, groups).
    Ambient,
    /// A style rule inside `@media`.
    MediaConditioned,
    /// `@keyframes`.
    Keyframes,
    /// Another at-rule (`@font-face`, `@supports`, …), kept as raw CSS.
    AtRule,
}

/// One rule as the importer will see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassifiedRule {
    /// The selector text (or the at-rule's name).
    pub selector: String,
    /// How it is treated.
    pub kind: RuleKind,
    /// The media query, for media-conditioned rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// What a stylesheet holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CssReport {
    /// Its rules in order.
    pub rules: Vec<ClassifiedRule>,
    /// How many declarations are `!important`.
    pub important_declarations: usize,
}

/// A stylesheet that does not parse; `Display` is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CSS does not parse at line {line}, column {column}: {message}")]
pub struct CssError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

/// Finds what CSS error recovery would paper over: an unterminated comment, string or block,
/// and a `}` that closes nothing.
fn check_balance(css: &str) -> Result<(), CssError> {
    let (mut line, mut column) = (1_u32, 0_u32);
    let mut open: Vec<(u32, u32)> = Vec::new();
    let mut chars = css.chars().peekable();
    let error = |line, column, message: &str| CssError {
        line,
        column,
        message: message.to_owned(),
    };
    while let Some(c) = chars.next() {
        column += 1;
        match c {
            '\n' => {
                line += 1;
                column = 0;
            }
            '/' if chars.peek() == Some(&'*') => {
                let (start_line, start_column) = (line, column);
                chars.next();
                column += 1;
                let mut closed = false;
                while let Some(c) = chars.next() {
                    column += 1;
                    if c == '\n' {
                        line += 1;
                        column = 0;
                    } else if c == '*' && chars.peek() == Some(&'/') {
                        chars.next();
                        column += 1;
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    return Err(error(start_line, start_column, "unterminated comment"));
                }
            }
            '"' | '\'' => {
                let (start_line, start_column) = (line, column);
                let mut closed = false;
                while let Some(inner) = chars.next() {
                    column += 1;
                    match inner {
                        '\\' => {
                            chars.next();
                            column += 1;
                        }
                        '\n' => break,
                        q if q == c => {
                            closed = true;
                            break;
                        }
                        _ => {}
                    }
                }
                if !closed {
                    return Err(error(start_line, start_column, "unterminated string"));
                }
            }
            '{' => open.push((line, column)),
            '}' if open.pop().is_none() => {
                return Err(error(
                    line,
                    column,
                    "a closing brace without an opening one",
                ));
            }
            _ => {}
        }
    }
    match open.last() {
        Some((line, column)) => Err(error(
            *line,
            *column,
            "unterminated block: a { is never closed",
        )),
        None => Ok(()),
    }
}

fn text<T: ToCss>(value: &T) -> String {
    value
        .to_css_string(PrinterOptions::default())
        .unwrap_or_default()
}

fn is_bare_class(selector: &str) -> bool {
    let Some(name) = selector.strip_prefix('.') else {
        return false;
    };
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The selector exactly as written: from the rule's start to its `{` (lightningcss would
/// print `::before` as `:before`, and the editor matches selectors by their exact text).
fn written_selector(css: &str, line: u32, column: u32) -> Option<String> {
    let start_of_line = if line == 0 {
        0
    } else {
        css.match_indices('\n').nth(line as usize - 1)?.0 + 1
    };
    let rest = &css[start_of_line..];
    let offset = rest
        .char_indices()
        .nth(column.saturating_sub(1) as usize)
        .map(|(i, _)| i)?;
    let rule = &rest[offset..];
    let end = rule.find('{')?;
    Some(rule[..end].split_whitespace().collect::<Vec<_>>().join(" "))
}

fn classify(
    css: &str,
    rules: &[CssRule<'_>],
    condition: Option<&str>,
    out: &mut Vec<ClassifiedRule>,
    important: &mut usize,
) {
    for rule in rules {
        match rule {
            CssRule::Style(style) => {
                *important += style.declarations.important_declarations.len();
                let selector = written_selector(css, style.loc.line, style.loc.column)
                    .unwrap_or_else(|| text(&style.selectors));
                let kind = match condition {
                    Some(_) => RuleKind::MediaConditioned,
                    None if style.selectors.0.len() == 1 && is_bare_class(&selector) => {
                        RuleKind::Class
                    }
                    None => RuleKind::Ambient,
                };
                out.push(ClassifiedRule {
                    selector,
                    kind,
                    condition: condition.map(str::to_owned),
                });
            }
            CssRule::Media(media) => {
                let query = written_selector(css, media.loc.line, media.loc.column)
                    .and_then(|at| at.strip_prefix("@media").map(|q| q.trim().to_owned()))
                    .unwrap_or_else(|| text(&media.query));
                classify(css, &media.rules.0, Some(&query), out, important);
            }
            CssRule::Keyframes(keyframes) => out.push(ClassifiedRule {
                selector: format!("@keyframes {}", text(&keyframes.name)),
                kind: RuleKind::Keyframes,
                condition: None,
            }),
            other => {
                let printed = text(other);
                let name = printed
                    .split(|c: char| c.is_whitespace() || c == '{')
                    .next()
                    .unwrap_or("@rule")
                    .to_owned();
                out.push(ClassifiedRule {
                    selector: name,
                    kind: RuleKind::AtRule,
                    condition: None,
                });
            }
        }
    }
}

/// Parses `css` and classifies its rules; a stylesheet that does not parse is a [`CssError`].
pub fn check_css(css: &str) -> Result<CssReport, CssError> {
    check_balance(css)?;
    let sheet = StyleSheet::parse(css, ParserOptions::default()).map_err(|error| {
        let (line, column) = error
            .loc
            .as_ref()
            .map(|loc| (loc.line + 1, loc.column))
            .unwrap_or((1, 1));
        CssError {
            line,
            column,
            message: error.kind.to_string(),
        }
    })?;
    let mut rules = Vec::new();
    let mut important = 0;
    classify(css, &sheet.rules.0, None, &mut rules, &mut important);
    Ok(CssReport {
        rules,
        important_declarations: important,
    })
}

/// The exact per-operation rules of `site_apply_css` (its advertised schema is flat): merge
/// and replace need `css`, which must parse; delete needs `selectors`; remove-properties needs
/// `selectors` and `properties`.
pub fn check_apply_css(input: &Value) -> Result<(), String> {
    let has = |key: &str| input.get(key).is_some_and(|v| !v.is_null());
    match input["operation"].as_str() {
        Some(operation @ ("merge" | "replace")) => {
            let css = input["css"]
                .as_str()
                .ok_or_else(|| format!("site_apply_css {operation} needs css"))?;
            if has("selectors") || has("properties") {
                return Err(format!(
                    "site_apply_css {operation} takes css only; selectors and properties belong to delete and remove-properties"
                ));
            }
            check_css(css)
                .map(|_| ())
                .map_err(|error| error.to_string())
        }
        Some("delete") => {
            if !has("selectors") {
                return Err("site_apply_css delete needs selectors".to_owned());
            }
            if has("css") || has("properties") {
                return Err("site_apply_css delete takes selectors only".to_owned());
            }
            Ok(())
        }
        Some("remove-properties") => {
            if !has("selectors") || !has("properties") {
                return Err(
                    "site_apply_css remove-properties needs selectors and properties".to_owned(),
                );
            }
            if has("css") {
                return Err("site_apply_css remove-properties takes no css".to_owned());
            }
            Ok(())
        }
        _ => Err(
            "site_apply_css needs operation merge, replace, delete or remove-properties".to_owned(),
        ),
    }
}
