//! The script, stateless: each answer is decided from its request alone, so a retried or
//! replayed request gets the same answer and the lab model keeps no conversation.

use serde_json::{json, Value};

/// Where the conversation stands, as the request shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// No tool result yet: the model calls its write tool.
    Write,
    /// The last message carries a tool result: the model says its final text and stops.
    Finish,
}

/// The next answer of the script, with its opt-in steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'r> {
    /// Call the offered tool of this name, before anything else.
    Search(&'r str),
    /// Load the deferred tool of this name with [`TOOL_SEARCH`], to call it next.
    Load(&'r str),
    /// Call the write tool.
    Write,
    /// Call the edit tool with the script's replace (OpenAI wire only).
    Replace,
    /// Say the final text and stop.
    Finish,
}

/// What the query of the opt-in search asks for.
pub const SEARCH_QUERY: &str = "amphora";

/// The opt-in search's input, on either wire.
pub fn search_input() -> Value {
    json!({ "query": SEARCH_QUERY })
}

/// Claude Code's tool that loads a deferred tool's schema: it names its MCP tools in a
/// message instead of offering them, and a model loads one before calling it.
pub const TOOL_SEARCH: &str = "ToolSearch";

/// What a request shows the script, on either wire: where the turn stands, the names of the
/// tools offered, the names of the tools the model's last answer called, and the texts of its
/// messages (where deferred tools are named).
#[derive(Debug)]
pub struct Seen<'r> {
    /// Where the conversation stands.
    pub turn: Turn,
    /// The tools offered, by name.
    pub offered: Vec<&'r str>,
    /// The tools the last assistant message called, by name.
    pub last_called: Vec<&'r str>,
    /// The text of every message, in order.
    pub texts: Vec<&'r str>,
}

impl<'r> Seen<'r> {
    /// The next step but the replace. Plainly: the write, then (after any tool result) the
    /// final text. With `search` (a tool name suffix), the offered tool so named is called
    /// first, and its result is followed by the write; where the tool is not offered but named
    /// in a message as deferred (with [`TOOL_SEARCH`] offered), it is loaded first, as a model
    /// does; a search neither offered nor named is skipped. A request that does not offer
    /// `write_tool` (a chat runtime's, not a coding agent's) is answered with the final text
    /// alone: the model calls no tool it was not given.
    pub fn step(&self, search: Option<&str>, write_tool: &str) -> Step<'r> {
        let searched = |name: &str| search.is_some_and(|suffix| name.ends_with(suffix));
        let writes = self.offered.contains(&write_tool);
        let offered_search = self.offered.iter().copied().find(|name| searched(name));
        match self.turn {
            Turn::Write => match (offered_search, self.deferred(searched)) {
                (Some(name), _) => Step::Search(name),
                (None, Some(name)) => Step::Load(name),
                (None, None) if writes => Step::Write,
                (None, None) => Step::Finish,
            },
            Turn::Finish if self.last_called.contains(&TOOL_SEARCH) => {
                offered_search.map_or(Step::Finish, Step::Search)
            }
            Turn::Finish if writes && self.last_called.iter().any(|name| searched(name)) => {
                Step::Write
            }
            Turn::Finish => Step::Finish,
        }
    }

    /// A tool named in the messages (a word of their text) whose name `matches`, when
    /// [`TOOL_SEARCH`] is offered to load it.
    fn deferred(&self, matches: impl Fn(&str) -> bool) -> Option<&'r str> {
        if !self.offered.contains(&TOOL_SEARCH) {
            return None;
        }
        self.texts
            .iter()
            .flat_map(|text| text.split(|c: char| c.is_whitespace() || c == ','))
            .find(|word| matches(word))
    }
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
