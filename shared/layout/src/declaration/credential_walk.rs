//! The walk over the RAW document that refuses an inlined credential anywhere in it, before
//! (and whatever) the schema says: a value under a credential-looking key must be a file path.

use serde_json::Value;

use super::{Issue, JsonPath, Reason};

/// The words that make a key credential-looking, matched case-insensitively anywhere in it.
const CREDENTIAL_WORDS: [&str; 4] = ["KEY", "TOKEN", "SECRET", "PASSWORD"];

/// Returns true if and only if `name` contains KEY, TOKEN, SECRET or PASSWORD in any case.
pub(crate) fn is_credential_looking(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS.iter().any(|word| upper.contains(word))
}

/// Collects one `inline_credential` issue per credential-looking key whose value is not an
/// absolute path. Objects and arrays under such a key are walked (that is how `secrets` is).
pub(crate) fn refuse_inline_credentials(document: &Value, issues: &mut Vec<Issue>) {
    walk(document, &JsonPath::default(), false, issues);
}

fn walk(value: &Value, path: &JsonPath, under_credential: bool, issues: &mut Vec<Issue>) {
    match value {
        Value::Object(map) => {
            // The keys of `serving.aliases` are hostnames, not setting names: `keys.example.org`
            // is a domain, and its value is a slug.
            let keys_are_data = path.is(&["serving", "aliases"]);
            for (key, child) in map {
                let child_path = path.key(key);
                let credential = !keys_are_data && is_credential_looking(key);
                match child {
                    Value::Object(_) | Value::Array(_) => {
                        walk(child, &child_path, credential, issues)
                    }
                    scalar if credential => check_scalar(scalar, &child_path, issues),
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let item_path = path.index(index);
                match item {
                    Value::Object(_) | Value::Array(_) => {
                        walk(item, &item_path, under_credential, issues)
                    }
                    scalar if under_credential => check_scalar(scalar, &item_path, issues),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

fn check_scalar(value: &Value, path: &JsonPath, issues: &mut Vec<Issue>) {
    let names_a_file = value.as_str().is_some_and(|s| s.trim().starts_with('/'));
    if !names_a_file {
        // The value is never echoed: it may be the credential itself.
        issues.push(Issue::new(
            path,
            Reason::InlineCredential,
            "looks like a credential but is not an absolute file path: put the value in a \
             root-only file under the instance's credentials directory, declare that file's \
             path here, and rotate the credential, since it has been written in a declaration",
        ));
    }
}
