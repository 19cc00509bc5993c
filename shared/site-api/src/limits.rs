//! The limits the daemon enforces and a client checks before it sends, so both refuse the same
//! input.

/// The largest request body sited reads.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The longest prompt or message, in UTF-16 code units (how the engine counts a string).
pub const MAX_PROMPT_UNITS: usize = 32 * 1024;

/// Why a prompt or message is refused; each end words it its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadPrompt {
    /// Empty, or only white space.
    Blank,
    /// Over [`MAX_PROMPT_UNITS`]; this many UTF-16 units.
    TooLong(usize),
}

/// Checks a prompt or message the way the engine does: not blank, at most
/// [`MAX_PROMPT_UNITS`] UTF-16 units.
pub fn check_prompt(text: &str) -> Result<(), BadPrompt> {
    if text.trim().is_empty() {
        return Err(BadPrompt::Blank);
    }
    let units = text.encode_utf16().count();
    if units > MAX_PROMPT_UNITS {
        return Err(BadPrompt::TooLong(units));
    }
    Ok(())
}

/// The longest site name, in characters.
pub const MAX_NAME_CHARS: usize = 200;

/// The longest actor username, in characters.
pub const MAX_USERNAME_CHARS: usize = 200;

/// How much of a publish note is kept, in characters.
pub const MAX_NOTE_CHARS: usize = 500;

/// How many audit entries `GET /v1/audit` answers without a `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

/// The most audit entries one `GET /v1/audit` answers.
pub const MAX_AUDIT_LIMIT: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_counted_in_utf16_units() {
        assert_eq!(check_prompt(" \n\t"), Err(BadPrompt::Blank));
        assert_eq!(check_prompt(&"é".repeat(MAX_PROMPT_UNITS)), Ok(()));
        let over = "😀".repeat(MAX_PROMPT_UNITS / 2 + 1);
        assert_eq!(
            check_prompt(&over),
            Err(BadPrompt::TooLong(MAX_PROMPT_UNITS + 2))
        );
    }
}
