//! The system-prompt boundary marker and the one way drivers flatten system parts.

/// Separates the cacheable static prefix of a system prompt from its per-turn suffix:
/// `system = [prefix, SYSTEM_PROMPT_DYNAMIC_BOUNDARY, suffix]`. Declared once; every driver
/// uses this constant.
pub const SYSTEM_PROMPT_DYNAMIC_BOUNDARY: &str = "__SYSTEM_PROMPT_DYNAMIC_BOUNDARY__";

/// The system parts without the boundary marker, joined with a blank line.
pub fn join_system_parts(parts: &[String]) -> String {
    parts
        .iter()
        .filter(|part| part.as_str() != SYSTEM_PROMPT_DYNAMIC_BOUNDARY)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_drops_the_marker() {
        let parts = [
            "a".to_owned(),
            SYSTEM_PROMPT_DYNAMIC_BOUNDARY.to_owned(),
            "b".to_owned(),
        ];
        assert_eq!(join_system_parts(&parts), "a\n\nb");
        assert_eq!(join_system_parts(&[]), "");
    }
}
