//! The one parser of a model's tool-call argument JSON, shared by every driver.

use serde_json::Value;

/// Parses a tool call's raw argument JSON: blank or malformed input gives `{}` (never the raw
/// string), so the tool's schema validation later reports the missing properties to the model.
pub fn parse_tool_arguments(json: &str) -> Value {
    if json.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(json).unwrap_or_else(|_| Value::Object(serde_json::Map::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_valid_json_and_maps_blank_or_malformed_to_an_empty_object() {
        assert_eq!(parse_tool_arguments(r#"{"a":[1,2]}"#), json!({"a": [1, 2]}));
        assert_eq!(parse_tool_arguments(" \n\t"), json!({}));
        assert_eq!(parse_tool_arguments(""), json!({}));
        assert_eq!(parse_tool_arguments(r#"{"a":"#), json!({}));
        assert_eq!(parse_tool_arguments("not json"), json!({}));
        assert_eq!(parse_tool_arguments("3"), json!(3));
    }
}
