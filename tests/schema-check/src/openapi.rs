//! What the daemons' conformance tests read out of an OpenAPI document the same way: its
//! operations and the refusal reasons each response lists.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// The methods an OpenAPI path item can hold, lower-case as the document spells them.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// `(path, method)` of every operation `document` describes, the method lower-case.
pub fn operations(document: &Value) -> BTreeSet<(String, String)> {
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            if item.get(method).is_some() {
                operations.insert((path.clone(), method.to_owned()));
            }
        }
    }
    operations
}

/// Checks that `served` (path, lower-case method) names exactly `document`'s operations: a
/// route added without its documentation, or documentation of a route that is gone, fails.
pub fn check_operations(
    document: &Value,
    served: &BTreeSet<(String, String)>,
) -> Result<(), String> {
    let documented = operations(document);
    let undocumented: Vec<_> = served.difference(&documented).collect();
    if !undocumented.is_empty() {
        return Err(format!("routes without documentation: {undocumented:?}"));
    }
    let unserved: Vec<_> = documented.difference(served).collect();
    if !unserved.is_empty() {
        return Err(format!(
            "documented routes the router does not serve: {unserved:?}"
        ));
    }
    Ok(())
}

/// Checks that a live test `probed` every operation of `document`.
pub fn check_probed(document: &Value, probed: &BTreeSet<(String, String)>) -> Result<(), String> {
    let unprobed: Vec<_> = operations(document)
        .into_iter()
        .filter(|o| !probed.contains(o))
        .collect();
    if unprobed.is_empty() {
        Ok(())
    } else {
        Err(format!("documented operations never probed: {unprobed:?}"))
    }
}

/// Every reason an operation's response lists in its `x-reasons`, with the status the
/// response is filed under.
pub fn filed_reasons(document: &Value) -> Vec<(String, String)> {
    let mut filed = Vec::new();
    for item in document["paths"]
        .as_object()
        .into_iter()
        .flat_map(|paths| paths.values())
    {
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            for (status, response) in operation["responses"].as_object().into_iter().flatten() {
                let reasons = response.get("x-reasons").and_then(Value::as_array);
                for reason in reasons.into_iter().flatten().filter_map(Value::as_str) {
                    filed.push((status.clone(), reason.to_owned()));
                }
            }
        }
    }
    filed
}

/// Checks the reasons `filed` by the responses against `details` (the document's
/// `components.x-reasons`: each reason's own `status`): every filed reason is detailed and filed
/// under its status, and every detailed reason is filed by some response. The first fault.
pub fn check_filed_reasons(
    filed: &[(String, String)],
    details: &Map<String, Value>,
) -> Result<(), String> {
    for (status, reason) in filed {
        let Some(detail) = details.get(reason) else {
            return Err(format!("{reason} is not a documented reason"));
        };
        if detail["status"].as_u64().map(|n| n.to_string()).as_ref() != Some(status) {
            return Err(format!("{reason} is filed under {status}, not its status"));
        }
    }
    let used: BTreeSet<&String> = filed.iter().map(|(_, reason)| reason).collect();
    let unused: Vec<&String> = details.keys().filter(|r| !used.contains(r)).collect();
    if unused.is_empty() {
        Ok(())
    } else {
        Err(format!("reasons no response lists: {unused:?}"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::collections::BTreeSet;

    use super::{check_filed_reasons, check_operations, check_probed, filed_reasons, operations};

    #[test]
    fn operations_and_their_reasons_are_read_from_the_paths() {
        let document = json!({"paths": {
            "/a": {"get": {"responses": {"200": {}, "409": {"x-reasons": ["busy", "gone"]}}},
                   "summary": "not an operation"},
            "/b/{id}": {"post": {"responses": {"429": {"x-reasons": ["full"]}}},
                        "delete": {"responses": {}}},
        }});
        let names: Vec<_> = operations(&document)
            .into_iter()
            .map(|(path, method)| format!("{method} {path}"))
            .collect();
        assert_eq!(names, ["get /a", "delete /b/{id}", "post /b/{id}"]);
        let all = operations(&document);
        assert_eq!(check_operations(&document, &all), Ok(()));
        assert_eq!(check_probed(&document, &all), Ok(()));
        let mut fewer = all.clone();
        fewer.pop_first();
        assert!(check_operations(&document, &fewer).is_err());
        assert!(check_probed(&document, &fewer).is_err());
        let mut more = all;
        more.insert(("/c".to_owned(), "get".to_owned()));
        assert!(check_operations(&document, &more).is_err());
        assert!(check_probed(&document, &BTreeSet::new()).is_err());
        let filed = filed_reasons(&document);
        let expected = [("409", "busy"), ("409", "gone"), ("429", "full")]
            .map(|(status, reason)| (status.to_owned(), reason.to_owned()));
        assert_eq!(filed, expected);

        let details = json!({"busy": {"status": 409}, "gone": {"status": 409},
                             "full": {"status": 429}});
        let details = details.as_object().unwrap();
        assert_eq!(check_filed_reasons(&filed, details), Ok(()));
        let misfiled = [("409".to_owned(), "full".to_owned())];
        assert!(check_filed_reasons(&misfiled, details).is_err());
        let undetailed = [("409".to_owned(), "lost".to_owned())];
        assert!(check_filed_reasons(&undetailed, details).is_err());
        // `busy` and `gone` detailed but filed by no response.
        let partial = [("429".to_owned(), "full".to_owned())];
        assert!(check_filed_reasons(&partial, details).is_err());
    }
}
