//! Conversations kept between turns: the message list a turn sent (and the model's last
//! answer), saved under its resume token in the turn HOME's state directory, so that a later
//! turn given the token continues it.
//!
//! Each conversation is one file, `<state dir>/atelier-agent/<token>.json`, replaced
//! atomically (a temporary file, synced, renamed over the old one) through the filesystem
//! layer, so a turn killed mid-save leaves the previous version whole. A token becomes a file
//! name only after it is checked to be `[A-Za-z0-9_-]{1,64}`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use atelier_fs::{FsError, Root};
use atelier_llm::Message;
use serde::{Deserialize, Serialize};

/// The directory below the state directory that holds the conversations.
pub const CONVERSATIONS_DIR: &str = "atelier-agent";

/// The largest conversation file read back: a history this big is past any model's context.
pub const MAX_CONVERSATION_BYTES: u64 = 32 * 1024 * 1024; // 32 MiB

/// The longest resume token.
pub const MAX_TOKEN_LEN: usize = 64;

/// The conversation directory's mode: the agent's identity alone.
const DIR_MODE: u32 = 0o700;

/// A conversation file's mode.
const FILE_MODE: u32 = 0o600;

/// The version of the saved format.
const FORMAT_VERSION: u32 = 1;

/// A resume token: `[A-Za-z0-9_-]{1,64}`, so it is a safe file name and argv word.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResumeToken(String);

/// A string that cannot be a resume token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a resume token is 1 to 64 of A-Z, a-z, 0-9, `_` and `-`")]
pub struct BadToken;

// === impl ResumeToken ===

impl ResumeToken {
    /// Checks `text` is a token.
    pub fn parse(text: &str) -> Result<ResumeToken, BadToken> {
        let valid = !text.is_empty()
            && text.len() <= MAX_TOKEN_LEN
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid {
            Ok(ResumeToken(text.to_owned()))
        } else {
            Err(BadToken)
        }
    }

    /// A fresh token: 128 bits from the kernel's random source, as 32 hex digits.
    pub fn fresh() -> std::io::Result<ResumeToken> {
        let mut bytes = [0u8; 16];
        let mut filled = 0;
        while filled < bytes.len() {
            filled += rustix::rand::getrandom(
                &mut bytes[filled..],
                rustix::rand::GetRandomFlags::empty(),
            )?;
        }
        Ok(ResumeToken(
            bytes.iter().map(|b| format!("{b:02x}")).collect(),
        ))
    }

    /// The token.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn file_name(&self) -> PathBuf {
        Path::new(CONVERSATIONS_DIR).join(format!("{}.json", self.0))
    }
}

impl FromStr for ResumeToken {
    type Err = BadToken;

    fn from_str(text: &str) -> Result<ResumeToken, BadToken> {
        ResumeToken::parse(text)
    }
}

impl fmt::Display for ResumeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A saved conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The format's version.
    pub version: u32,
    /// The provider of the last turn (for a person reading the file).
    pub provider: String,
    /// The model of the last turn.
    pub model: String,
    /// The messages, oldest first: what the next turn sends before its own prompt.
    pub messages: Vec<Message>,
}

impl Conversation {
    /// A conversation of `messages` last held with `model` at `provider`.
    pub fn new(provider: &str, model: &str, messages: Vec<Message>) -> Conversation {
        Conversation {
            version: FORMAT_VERSION,
            provider: provider.to_owned(),
            model: model.to_owned(),
            messages,
        }
    }
}

/// Why a conversation could not be kept or found.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory, or the conversations directory in it, cannot be used.
    #[error("the state directory {path}: {source}")]
    Unavailable {
        /// The state directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: FsError,
    },
    /// No conversation is saved under the token.
    #[error("no conversation is saved under the resume token {0}")]
    NotFound(ResumeToken),
    /// The file is there but cannot be read back.
    #[error("the conversation {token} cannot be read back: {detail}")]
    Unreadable {
        /// Its token.
        token: ResumeToken,
        /// Why.
        detail: String,
    },
    /// The conversation cannot be written.
    #[error("the conversation {token} cannot be saved: {detail}")]
    Unwritable {
        /// Its token.
        token: ResumeToken,
        /// Why.
        detail: String,
    },
}

/// The conversations of one state directory.
#[derive(Debug)]
pub struct Conversations {
    root: Root,
}

// === impl Conversations ===

impl Conversations {
    /// Opens the state directory `state_dir` and makes its conversations directory if needed.
    pub fn open(state_dir: &Path) -> Result<Conversations, StoreError> {
        let unavailable = |source| StoreError::Unavailable {
            path: state_dir.to_path_buf(),
            source,
        };
        let root = Root::open(state_dir).map_err(unavailable)?;
        root.create_dir_all(CONVERSATIONS_DIR, DIR_MODE)
            .map_err(unavailable)?;
        Ok(Conversations { root })
    }

    /// The conversation saved under `token`.
    pub fn load(&self, token: &ResumeToken) -> Result<Conversation, StoreError> {
        let unreadable = |detail: String| StoreError::Unreadable {
            token: token.clone(),
            detail,
        };
        // Only the agent's own file: one planted by another identity is not its history.
        let bytes = self
            .root
            .read_own_limited(token.file_name(), MAX_CONVERSATION_BYTES)
            .map_err(|e| unreadable(e.to_string()))?
            .ok_or_else(|| StoreError::NotFound(token.clone()))?;
        let conversation: Conversation =
            serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
        if conversation.version != FORMAT_VERSION {
            return Err(unreadable(format!(
                "format version {} is not {FORMAT_VERSION}",
                conversation.version
            )));
        }
        Ok(conversation)
    }

    /// Saves `conversation` under `token`, replacing what was there.
    pub fn save(&self, token: &ResumeToken, conversation: &Conversation) -> Result<(), StoreError> {
        let unwritable = |detail: String| StoreError::Unwritable {
            token: token.clone(),
            detail,
        };
        let bytes = serde_json::to_vec(conversation).map_err(|e| unwritable(e.to_string()))?;
        if bytes.len() as u64 > MAX_CONVERSATION_BYTES {
            return Err(unwritable(format!(
                "it is over the limit of {MAX_CONVERSATION_BYTES} bytes"
            )));
        }
        self.root
            .write_atomic(token.file_name(), &bytes, FILE_MODE)
            .map_err(|e| unwritable(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_table() {
        let long = "a".repeat(MAX_TOKEN_LEN);
        let too_long = "a".repeat(MAX_TOKEN_LEN + 1);
        let cases: [(&str, &str, bool); 16] = [
            ("hex", "0123456789abcdef0123456789abcdef", true),
            ("one char", "a", true),
            ("underscore and dash", "ses_1-x", true),
            ("all classes", "AZaz09_-", true),
            ("exactly 64", &long, true),
            ("empty", "", false),
            ("65", &too_long, false),
            ("slash", "a/b", false),
            ("dot dot", "..", false),
            ("a dot", "a.json", false),
            ("space", "a b", false),
            ("nul", "a\0b", false),
            ("newline", "a\n", false),
            ("backslash", "a\\b", false),
            ("non-ascii letter", "é", false),
            ("percent", "%2e%2e", false),
        ];
        for (name, token, valid) in cases {
            assert_eq!(ResumeToken::parse(token).is_ok(), valid, "case {name}");
        }
    }

    #[test]
    fn fresh_tokens_are_tokens_and_differ() {
        let a = ResumeToken::fresh().unwrap();
        let b = ResumeToken::fresh().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(ResumeToken::parse(a.as_str()).is_ok());
        assert_ne!(a, b);
    }

    #[test]
    fn a_saved_conversation_loads_back_and_a_missing_one_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Conversations::open(tmp.path()).unwrap();
        let token = ResumeToken::parse("t1").unwrap();
        let conversation = Conversation::new("openai", "m", vec![Message::user_text("hello")]);
        store.save(&token, &conversation).unwrap();
        assert_eq!(store.load(&token).unwrap(), conversation);
        assert!(tmp.path().join("atelier-agent/t1.json").is_file());
        let missing = ResumeToken::parse("t2").unwrap();
        assert!(matches!(store.load(&missing), Err(StoreError::NotFound(_))));
        std::fs::write(tmp.path().join("atelier-agent/t3.json"), b"{").unwrap();
        let broken = ResumeToken::parse("t3").unwrap();
        assert!(matches!(
            store.load(&broken),
            Err(StoreError::Unreadable { .. })
        ));
    }

    #[test]
    fn a_linked_conversation_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join(CONVERSATIONS_DIR)).unwrap();
        assert!(matches!(
            Conversations::open(&state),
            Err(StoreError::Unavailable { .. })
        ));
    }
}
