//! JSON Schemas written once, as data, and the one validator every tool input goes through.
//!
//! The builders emit the JSON Schema shapes TypeBox emitted for the original editor, so what
//! providers are offered is what the browser validates. [`validate`] does what
//! TypeBox's `Value.Parse` did — defaults applied, undeclared keys dropped, primitives coerced,
//! then checked — and names the first thing that is wrong, for the model to correct.

use serde_json::{json, Map, Value};

/// `{"type":"string","minLength":1}`.
pub fn s1() -> Value {
    json!({"type": "string", "minLength": 1})
}

/// Any string.
pub fn string() -> Value {
    json!({"type": "string"})
}

/// An integer of at least `min`.
pub fn int_min(min: i64) -> Value {
    json!({"type": "integer", "minimum": min})
}

/// An integer in `min..=max`.
pub fn int_range(min: i64, max: i64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

/// Any number.
pub fn number() -> Value {
    json!({"type": "number"})
}

/// A boolean.
pub fn boolean() -> Value {
    json!({"type": "boolean"})
}

/// Anything at all.
pub fn unknown() -> Value {
    json!({})
}

/// Exactly the string `value`.
pub fn literal(value: &str) -> Value {
    json!({"const": value, "type": "string"})
}

/// One of the strings `values`.
pub fn one_of_strings(values: &[&str]) -> Value {
    json!({"anyOf": values.iter().map(|v| literal(v)).collect::<Vec<_>>()})
}

/// Any of `schemas`.
pub fn any_of(schemas: Vec<Value>) -> Value {
    json!({"anyOf": schemas})
}

/// An array of `items`.
pub fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

/// An array of `items` with at least `min` entries.
pub fn array_min(items: Value, min: u64) -> Value {
    json!({"type": "array", "items": items, "minItems": min})
}

/// A string-keyed map of `values`.
pub fn record(values: Value) -> Value {
    json!({"type": "object", "patternProperties": {"^(.*)$": values}})
}

/// `schema` with a model-facing `description`.
pub fn describe(mut schema: Value, description: &str) -> Value {
    schema["description"] = json!(description);
    schema
}

/// An object with `required` and `optional` properties, in that order.
pub fn object(required: Vec<(&str, Value)>, optional: Vec<(&str, Value)>) -> Value {
    let names: Vec<&str> = required.iter().map(|(name, _)| *name).collect();
    let mut properties = Map::new();
    for (name, schema) in required.into_iter().chain(optional) {
        properties.insert(name.to_owned(), schema);
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !names.is_empty() {
        schema["required"] = json!(names);
    }
    schema
}

/// `object` that refuses undeclared properties.
pub fn closed_object(required: Vec<(&str, Value)>, optional: Vec<(&str, Value)>) -> Value {
    let mut schema = object(required, optional);
    schema["additionalProperties"] = json!(false);
    schema
}

/// Validates `value` against `schema`, returning the cleaned, coerced value, or the first
/// problem, phrased with its path (`input.parentId must be a string`).
pub fn validate(schema: &Value, value: Value) -> Result<Value, String> {
    check(schema, value, "input")
}

/// Whether `value` carries one of the constant-valued properties of the object schema
/// `branch`.
fn tagged(branch: &Value, value: &Value) -> bool {
    branch["properties"].as_object().is_some_and(|properties| {
        properties.iter().any(|(name, property)| {
            property
                .get("const")
                .is_some_and(|tag| value.get(name) == Some(tag))
        })
    })
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn check(schema: &Value, value: Value, path: &str) -> Result<Value, String> {
    if let Some(branches) = schema["anyOf"].as_array() {
        let mut errors = Vec::with_capacity(branches.len());
        for branch in branches {
            match check(branch, value.clone(), path) {
                Ok(accepted) => return Ok(accepted),
                Err(error) => errors.push(error),
            }
        }
        let consts: Vec<&str> = branches
            .iter()
            .filter_map(|b| b["const"].as_str())
            .collect();
        if consts.len() == branches.len() && !consts.is_empty() {
            return Err(format!("{path} must be one of: {}", consts.join(", ")));
        }
        // The shape the value names by its tag (a `kind` or `type` equal to the branch's
        // constant) is the one it meant: its problem is the one to fix, where the last
        // branch's would only say the tag is wrong.
        let meant = branches.iter().position(|branch| tagged(branch, &value));
        let chosen = match meant {
            Some(index) => errors.swap_remove(index),
            None => errors
                .pop()
                .unwrap_or_else(|| format!("{path} matches none of its allowed shapes")),
        };
        return Err(chosen);
    }
    if let Some(expected) = schema.get("const") {
        return if *expected == value {
            Ok(value)
        } else {
            Err(format!("{path} must be {expected}"))
        };
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(&value) {
            return Err(format!(
                "{path} must be one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    match schema["type"].as_str() {
        None => Ok(value),
        Some("object") => check_object(schema, value, path),
        Some("array") => check_array(schema, value, path),
        Some("string") => check_string(schema, value, path),
        Some("integer") => check_number(schema, value, path, true),
        Some("number") => check_number(schema, value, path, false),
        Some("boolean") => match value {
            Value::Bool(_) => Ok(value),
            Value::String(text) if text == "true" || text == "false" => Ok(json!(text == "true")),
            other => Err(format!(
                "{path} must be a boolean, not {}",
                type_name(&other)
            )),
        },
        Some(other) => Err(format!("{path}: unsupported schema type {other}")),
    }
}

fn check_object(schema: &Value, value: Value, path: &str) -> Result<Value, String> {
    let Value::Object(mut given) = value else {
        return Err(format!(
            "{path} must be an object, not {}",
            type_name(&value)
        ));
    };
    let mut out = Map::new();
    if let Some(values) = schema["patternProperties"]["^(.*)$"].as_object() {
        let values = Value::Object(values.clone());
        for (key, item) in given {
            out.insert(key.clone(), check(&values, item, &format!("{path}.{key}"))?);
        }
        return Ok(Value::Object(out));
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let child = format!("{path}.{name}");
            match given.remove(name) {
                // An explicit null for an optional property means "not given".
                Some(Value::Null) if !required.contains(&name.as_str()) => {}
                Some(item) => {
                    out.insert(name.clone(), check(property, item, &child)?);
                }
                None => {
                    if let Some(default) = property.get("default") {
                        out.insert(name.clone(), default.clone());
                    } else if required.contains(&name.as_str()) {
                        return Err(format!("{child} is required"));
                    }
                }
            }
        }
    }
    // Whatever was not declared is dropped, as the original's Clean step did.
    Ok(Value::Object(out))
}

fn check_array(schema: &Value, value: Value, path: &str) -> Result<Value, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "{path} must be an array, not {}",
            type_name(&value)
        ));
    };
    if let Some(min) = schema["minItems"].as_u64() {
        if (items.len() as u64) < min {
            return Err(format!("{path} must have at least {min} item(s)"));
        }
    }
    if let Some(max) = schema["maxItems"].as_u64() {
        if items.len() as u64 > max {
            return Err(format!("{path} must have at most {max} items"));
        }
    }
    let item_schema = &schema["items"];
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        out.push(check(item_schema, item, &format!("{path}[{index}]"))?);
    }
    if schema["uniqueItems"] == json!(true) {
        for (index, item) in out.iter().enumerate() {
            if out[..index].contains(item) {
                return Err(format!("{path} must not repeat {item}"));
            }
        }
    }
    Ok(Value::Array(out))
}

fn check_string(schema: &Value, value: Value, path: &str) -> Result<Value, String> {
    let text = match value {
        Value::String(text) => text,
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        other => {
            return Err(format!(
                "{path} must be a string, not {}",
                type_name(&other)
            ))
        }
    };
    let length = text.chars().count() as u64;
    if let Some(min) = schema["minLength"].as_u64() {
        if length < min {
            return Err(if min == 1 {
                format!("{path} must not be empty")
            } else {
                format!("{path} must be at least {min} characters")
            });
        }
    }
    if let Some(max) = schema["maxLength"].as_u64() {
        if length > max {
            return Err(format!("{path} must be at most {max} characters"));
        }
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        let matches = regex::Regex::new(pattern)
            .map(|re| re.is_match(&text))
            .unwrap_or(false);
        if !matches {
            return Err(format!("{path} must match {pattern}"));
        }
    }
    Ok(Value::String(text))
}

fn check_number(schema: &Value, value: Value, path: &str, integer: bool) -> Result<Value, String> {
    let kind = if integer { "an integer" } else { "a number" };
    let number = match &value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|n| n.is_finite())
    .ok_or_else(|| format!("{path} must be {kind}, not {}", type_name(&value)))?;
    if integer && number.fract() != 0.0 {
        return Err(format!("{path} must be an integer"));
    }
    if let Some(min) = schema["minimum"].as_f64() {
        if number < min {
            return Err(format!("{path} must be at least {min}"));
        }
    }
    if let Some(max) = schema["maximum"].as_f64() {
        if number > max {
            return Err(format!("{path} must be at most {max}"));
        }
    }
    Ok(if integer {
        json!(number as i64)
    } else {
        json!(number)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_cleans_coerces_defaults_and_names_the_problem() {
        let schema = object(
            vec![("parentId", s1()), ("count", int_range(1, 50))],
            vec![
                ("index", int_min(0)),
                ("flag", boolean()),
                ("mode", json!({"type": "string", "default": "merge"})),
                ("kind", one_of_strings(&["a", "b"])),
            ],
        );
        assert_eq!(
            validate(
                &schema,
                json!({"parentId": "n1", "count": "3", "flag": "true", "extra": 1})
            ),
            Ok(json!({"parentId": "n1", "count": 3, "flag": true, "mode": "merge"}))
        );
        let cases = [
            (json!({"count": 1}), "input.parentId is required"),
            (
                json!({"parentId": "", "count": 1}),
                "input.parentId must not be empty",
            ),
            (
                json!({"parentId": "n", "count": 51}),
                "input.count must be at most 50",
            ),
            (
                json!({"parentId": "n", "count": 1.5}),
                "input.count must be an integer",
            ),
            (
                json!({"parentId": "n", "count": 1, "kind": "c"}),
                "input.kind must be one of: a, b",
            ),
            (
                json!({"parentId": ["n"], "count": 1}),
                "input.parentId must be a string, not an array",
            ),
            (json!("text"), "input must be an object, not a string"),
        ];
        for (value, error) in cases {
            assert_eq!(validate(&schema, value).unwrap_err(), error);
        }
    }

    /// A value tagged for one shape of an `anyOf` is told that shape's problem, not the last
    /// shape's complaint about its tag.
    #[test]
    fn a_tagged_value_is_told_the_problem_of_the_shape_it_names() {
        let schema = object(
            vec![(
                "target",
                any_of(vec![
                    object(
                        vec![("kind", literal("postTypes")), ("tableSlugs", s1())],
                        vec![],
                    ),
                    object(vec![("kind", literal("page")), ("pageId", s1())], vec![]),
                    object(vec![("kind", literal("notFound"))], vec![]),
                ]),
            )],
            vec![],
        );
        let cases = [
            (
                json!({"target": {"kind": "postTypes"}}),
                "input.target.tableSlugs is required",
            ),
            (
                json!({"target": {"kind": "page", "pageId": ""}}),
                "input.target.pageId must not be empty",
            ),
            // No shape named: the last shape's problem, as before.
            (
                json!({"target": {"kind": "other"}}),
                "input.target.kind must be \"notFound\"",
            ),
        ];
        for (value, error) in cases {
            assert_eq!(validate(&schema, value).unwrap_err(), error);
        }
    }

    #[test]
    fn records_arrays_and_patterns() {
        let schema = object(
            vec![
                ("patch", record(unknown())),
                (
                    "names",
                    json!({"type": "array", "items": {"type": "string", "pattern": "^-{0,2}[a-zA-Z][a-zA-Z0-9-]*$"},
                           "minItems": 1, "uniqueItems": true}),
                ),
            ],
            vec![],
        );
        assert_eq!(
            validate(
                &schema,
                json!({"patch": {"a": 1, "b": [2]}, "names": ["--x", "color"]})
            ),
            Ok(json!({"patch": {"a": 1, "b": [2]}, "names": ["--x", "color"]}))
        );
        assert!(validate(&schema, json!({"patch": {}, "names": []})).is_err());
        assert!(validate(&schema, json!({"patch": {}, "names": ["a", "a"]})).is_err());
        assert!(validate(&schema, json!({"patch": {}, "names": ["1x"]})).is_err());
        assert!(validate(&schema, json!({"patch": 3, "names": ["a"]})).is_err());
    }
}
