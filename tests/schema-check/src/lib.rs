//! A checker for the part of JSON Schema the API documents under `docs/openapi/` use: `type`
//! (one or a list), `enum`, `required`, `properties`, `additionalProperties`, `propertyNames`,
//! `items`, `minItems`/`maxItems`, `minLength`/`maxLength`, `minimum`/`maximum`, `pattern`,
//! `oneOf` and `$ref` into the document's components. Any other keyword is prose and checks
//! nothing, so a schema is never stricter here than it reads. The daemons' conformance tests
//! share it, and [`openapi`]'s readers of a document's operations and reasons, so both
//! documents are read by the same rules.

pub mod openapi;

use serde_json::{Map, Value};

/// Checks `value` against `schema`, resolving `$ref`s in `document`; the first mismatch,
/// named by its JSON path.
pub fn check(document: &Value, schema: &Value, value: &Value) -> Result<(), String> {
    Checker { document }.check(schema, value, "$")
}

struct Checker<'a> {
    document: &'a Value,
}

impl Checker<'_> {
    fn check(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        let Some(schema) = schema.as_object() else {
            return Err(format!("{at}: the schema is not an object: {schema}"));
        };
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            return self.check(&self.resolve(reference)?, value, at);
        }
        if let Some(types) = schema.get("type") {
            let allowed: Vec<&str> = match types {
                Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                other => other.as_str().into_iter().collect(),
            };
            if !allowed.iter().any(|t| is_type(value, t)) {
                return Err(format!("{at}: {value} is not of type {types}"));
            }
        }
        if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
            if !choices.contains(value) {
                return Err(format!("{at}: {value} is not one of {choices:?}"));
            }
        }
        if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
            let passing = variants
                .iter()
                .filter(|variant| self.check(variant, value, at).is_ok())
                .count();
            if passing != 1 {
                return Err(format!(
                    "{at}: {value} matches {passing} of the oneOf variants, not exactly one"
                ));
            }
        }
        match value {
            Value::Object(fields) => self.check_object(schema, fields, at)?,
            Value::Array(items) => self.check_array(schema, items, at)?,
            Value::String(text) => check_string(schema, text, at)?,
            Value::Number(number) => check_number(schema, number.as_f64().unwrap_or(0.0), at)?,
            _ => {}
        }
        Ok(())
    }

    fn check_object(
        &self,
        schema: &Map<String, Value>,
        fields: &Map<String, Value>,
        at: &str,
    ) -> Result<(), String> {
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !fields.contains_key(name) {
                return Err(format!("{at}: `{name}` is required"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (name, field) in fields {
            let here = format!("{at}.{name}");
            if let Some(names) = schema.get("propertyNames") {
                self.check(names, &Value::String(name.clone()), &here)?;
            }
            match properties.and_then(|p| p.get(name)) {
                Some(property) => self.check(property, field, &here)?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        return Err(format!("{at}: `{name}` is not allowed"));
                    }
                    Some(extra @ Value::Object(_)) => self.check(extra, field, &here)?,
                    _ => {}
                },
            }
        }
        Ok(())
    }

    fn check_array(
        &self,
        schema: &Map<String, Value>,
        items: &[Value],
        at: &str,
    ) -> Result<(), String> {
        if outside(schema, "minItems", "maxItems", items.len() as f64) {
            return Err(format!("{at}: {} items is outside the bounds", items.len()));
        }
        if let Some(item) = schema.get("items") {
            for (index, value) in items.iter().enumerate() {
                self.check(item, value, &format!("{at}[{index}]"))?;
            }
        }
        Ok(())
    }

    fn resolve(&self, reference: &str) -> Result<Value, String> {
        let pointer = reference
            .strip_prefix('#')
            .ok_or_else(|| format!("only local references are followed: {reference}"))?;
        self.document
            .pointer(pointer)
            .cloned()
            .ok_or_else(|| format!("{reference} names nothing in the document"))
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}

fn check_string(schema: &Map<String, Value>, text: &str, at: &str) -> Result<(), String> {
    if outside(
        schema,
        "minLength",
        "maxLength",
        text.chars().count() as f64,
    ) {
        return Err(format!("{at}: {text:?} has a length outside the bounds"));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        let pattern =
            regex::Regex::new(pattern).map_err(|error| format!("{at}: bad pattern: {error}"))?;
        if !pattern.is_match(text) {
            return Err(format!("{at}: {text:?} does not match {pattern}"));
        }
    }
    Ok(())
}

fn check_number(schema: &Map<String, Value>, number: f64, at: &str) -> Result<(), String> {
    if outside(schema, "minimum", "maximum", number) {
        return Err(format!("{at}: {number} is outside the bounds"));
    }
    Ok(())
}

/// Returns true if and only if `n` is below the schema's `min` keyword or above its `max` one.
fn outside(schema: &Map<String, Value>, min: &str, max: &str, n: f64) -> bool {
    let bound = |name: &str| schema.get(name).and_then(Value::as_f64);
    bound(min).is_some_and(|min| n < min) || bound(max).is_some_and(|max| n > max)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check;

    #[test]
    fn the_checker_refuses_what_the_schema_excludes() {
        let document = json!({"components": {"schemas": {
            "Kind": {"type": "string", "enum": ["a", "b"]},
            "Thing": {"type": "object", "required": ["kind"], "additionalProperties": false,
                "properties": {
                    "kind": {"$ref": "#/components/schemas/Kind"},
                    "n": {"type": "integer", "minimum": 1},
                    "tags": {"type": "array", "maxItems": 1,
                             "items": {"type": "string", "minLength": 1}}}},
            "Either": {"oneOf": [{"type": "string"}, {"type": ["integer", "null"]}]},
        }}});
        let thing = json!({"$ref": "#/components/schemas/Thing"});
        let either = json!({"$ref": "#/components/schemas/Either"});
        let accepted = [
            (&thing, json!({"kind": "a"})),
            (&thing, json!({"kind": "b", "n": 3, "tags": ["x"]})),
            (&either, json!("text")),
            (&either, json!(null)),
        ];
        for (schema, value) in &accepted {
            assert_eq!(check(&document, schema, value), Ok(()), "{value}");
        }
        let refused = [
            (&thing, json!({})),
            (&thing, json!({"kind": "c"})),
            (&thing, json!({"kind": "a", "n": 0})),
            (&thing, json!({"kind": "a", "n": 1.5})),
            (&thing, json!({"kind": "a", "extra": true})),
            (&thing, json!({"kind": "a", "tags": ["x", "y"]})),
            (&thing, json!({"kind": "a", "tags": [""]})),
            (&thing, json!([])),
            (&either, json!(true)),
        ];
        for (schema, value) in &refused {
            assert!(check(&document, schema, value).is_err(), "{value}");
        }
    }
}
