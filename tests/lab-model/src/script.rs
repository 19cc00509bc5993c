//! The script, stateless: each answer is decided from its request alone, so a retried or
//! replayed request gets the same answer and the lab model keeps no conversation.

/// Where the conversation stands, as the request shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// No tool result yet: the model calls its write tool.
    Write,
    /// The last message carries a tool result: the model says its final text and stops.
    Finish,
}

/// The scripted tool call and the closing words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The absolute path the write tool is asked to write.
    pub write_path: String,
    /// What it is asked to write there.
    pub write_content: String,
    /// What the model says once the tool result is back.
    pub final_text: String,
    /// The opt-in exact replace after the write (OpenAI wire only).
    pub replace: Option<Replace>,
}

/// An exact replace the OpenAI script asks for once its write's result is back, of an
/// agent offering a tool named `edit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replace {
    /// The absolute path of the file to change.
    pub path: String,
    /// The span to find, exactly once.
    pub old: String,
    /// What it becomes.
    pub new: String,
}

/// Splits `text` into `count` pieces of about equal length on character boundaries; fewer when
/// `text` has fewer characters, never an empty piece (one empty piece for empty `text`).
pub fn pieces(text: &str, count: usize) -> Vec<&str> {
    let chars = text.chars().count();
    let count = count.clamp(1, chars.max(1));
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(at, _)| at)
        .chain([text.len()])
        .collect();
    // Piece i runs from character chars*i/count to chars*(i+1)/count; both at most chars.
    (0..count)
        .map(|i| &text[boundaries[chars * i / count]..boundaries[chars * (i + 1) / count]])
        .collect()
}

/// A rough token count for usage figures: a token per four bytes, at least one.
pub fn tokens(text: &str) -> u64 {
    (text.len() as u64 / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_text_in_order() {
        for (text, count) in [
            ("{\"file_path\":\"/a\",\"content\":\"hé\"}", 3),
            ("Done: the home page is written.", 2),
            ("ab", 5),
            ("ééé", 2),
            ("x", 1),
        ] {
            let split = pieces(text, count);
            assert_eq!(split.concat(), text, "{text}");
            assert_eq!(split.len(), count.min(text.chars().count()), "{text}");
            assert!(split.iter().all(|piece| !piece.is_empty()), "{split:?}");
        }
    }

    #[test]
    fn an_empty_text_is_one_empty_piece() {
        assert_eq!(pieces("", 3), vec![""]);
    }

    #[test]
    fn tokens_are_at_least_one() {
        assert_eq!(tokens(""), 1);
        assert_eq!(tokens("abcdefgh"), 2);
    }
}
