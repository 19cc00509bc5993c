//! Typed driver errors and the classification of non-OK provider answers.
//!
//! `Display` is the chat runtime's sentence: the tool loop sends it to the CMS editor as the
//! turn's `error` line, so the variants that send the reader somewhere (a refused credential, a
//! missing setting, a failed response) name the CMS's provider settings. They carry what
//! happened as data too, so a program with another reader (atelier-agent, whose lines an
//! operator reads) says it in its own words.

use std::time::Duration;

/// Why a provider round failed. `Display` is the user-facing message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// The provider refused the request as too large for its request or context limit (413,
    /// or 400 naming a context/token/image limit). The tool loop may retry once with a
    /// smaller history.
    #[error("{message}")]
    Overflow {
        /// The HTTP status (413 or 400).
        status: u16,
        /// The user-facing message.
        message: String,
    },
    /// Quota or rate limit (402/429).
    #[error("{message}")]
    RateLimited {
        /// The HTTP status.
        status: u16,
        /// The user-facing message.
        message: String,
    },
    /// The credentials were refused (401/403).
    #[error("{label} authentication failed. Check your API key in /admin/ai/providers.")]
    Auth {
        /// The provider label.
        label: &'static str,
        /// The HTTP status.
        status: u16,
    },
    /// Any other non-OK answer.
    #[error("{message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The user-facing message.
        message: String,
    },
    /// The request could not be sent or its answer not received.
    #[error("{label} request failed: {detail}")]
    Request {
        /// The provider label.
        label: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// Reading the event stream failed part-way.
    #[error("{label} stream error: {detail}")]
    Stream {
        /// The provider label.
        label: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// No bytes arrived on the stream for the idle limit.
    #[error("{label} stream error: no data for {idle:?}")]
    IdleTimeout {
        /// The provider label.
        label: &'static str,
        /// The idle limit that passed.
        idle: Duration,
    },
    /// The provider reported an error inside the event stream.
    #[error("{message}")]
    Provider {
        /// The user-facing message.
        message: String,
    },
    /// The provider said the response failed (a Responses `response.failed` event), giving
    /// no reason.
    #[error("Provider response failed. Check your credentials and model in /admin/ai/providers.")]
    ResponseFailed {
        /// The provider label.
        label: &'static str,
    },
    /// The driver lacks a setting it needs for any request.
    #[error(
        "{label} requires {}. {} one in /admin/ai/providers.",
        setting.needs(),
        setting.verb()
    )]
    MissingSetting {
        /// The provider label.
        label: &'static str,
        /// What is missing.
        setting: Setting,
    },
    /// The request asks what no provider can do (a forced tool that is not offered).
    #[error("{message}")]
    Config {
        /// The user-facing message.
        message: String,
    },
}

/// A driver setting whose absence stops every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// The API key.
    ApiKey,
    /// The endpoint's base URL.
    BaseUrl,
}

impl Setting {
    /// What the driver requires, as a phrase: `an API key`, `a base URL`.
    pub fn needs(self) -> &'static str {
        match self {
            Setting::ApiKey => "an API key",
            Setting::BaseUrl => "a base URL",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Setting::ApiKey => "Add",
            Setting::BaseUrl => "Set",
        }
    }
}

impl LlmError {
    /// Whether this is a request/context overflow the loop may retry once on.
    pub fn is_overflow(&self) -> bool {
        matches!(self, LlmError::Overflow { .. })
    }

    /// Whether asking again unchanged may succeed: a rate limit (not a spent quota, 402), a
    /// timeout or service fault (408, 5xx, Anthropic's 529 among them), a request that could
    /// not be sent or answered, or a stream that broke or went idle. A refusal of the request
    /// itself (a bad key, a bad field, an overflow) would be refused again.
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::RateLimited { status, .. } => *status == 429,
            LlmError::Http { status, .. } => *status == 408 || *status >= 500,
            LlmError::Request { .. } | LlmError::Stream { .. } | LlmError::IdleTimeout { .. } => {
                true
            }
            LlmError::Overflow { .. }
            | LlmError::Auth { .. }
            | LlmError::Provider { .. }
            | LlmError::ResponseFailed { .. }
            | LlmError::MissingSetting { .. }
            | LlmError::Config { .. } => false,
        }
    }
}

/// The error text inside a provider's error body: `error` when it is a string, else
/// `error.message`, else the trimmed body cut to 200 characters; `None` for a blank body.
pub fn extract_error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(body) {
        match value.get("error") {
            Some(serde_json::Value::String(message)) => return Some(message.clone()),
            Some(error) => {
                if let Some(message) = error.get("message").and_then(|m| m.as_str()) {
                    return Some(message.to_owned());
                }
            }
            None => {}
        }
    }
    Some(body.chars().take(200).collect())
}

/// Classifies a non-OK answer of provider `label` into a typed error with its message.
pub fn classify_http_failure(label: &'static str, status: u16, body: &str) -> LlmError {
    let detail = extract_error_message(body);
    let suffix = detail
        .as_deref()
        .map(|detail| format!(": {detail}"))
        .unwrap_or_default();
    match status {
        401 | 403 => LlmError::Auth { label, status },
        402 | 429 => LlmError::RateLimited {
            status,
            message: format!(
                "{label} quota or rate limit reached{suffix}. Check your account balance."
            ),
        },
        413 => overflow(label, status, &suffix),
        400 if is_overflow_text(&format!("{} {body}", detail.as_deref().unwrap_or(""))) => {
            overflow(label, status, &suffix)
        }
        500.. => LlmError::Http {
            status,
            message: format!("{label} service error ({status}){suffix}. Please try again."),
        },
        _ => LlmError::Http {
            status,
            message: format!("{label} error ({status}){suffix}."),
        },
    }
}

fn overflow(label: &str, status: u16, suffix: &str) -> LlmError {
    LlmError::Overflow {
        status,
        message: format!(
            "{label} could not accept this conversation because it exceeds the provider's \
             request or context limit{suffix}. Your history is still saved; start a new \
             conversation or choose a model with a larger context window."
        ),
    }
}

/// A piece of an overflow pattern. In literals a space stands for `[_ ]`.
enum Piece {
    Lit(&'static str),
    /// Up to this many characters other than line terminators.
    Gap(usize),
    Alt(&'static [&'static str]),
}

use Piece::{Alt, Gap, Lit};

/// The reference's overflow regex, case-insensitive:
/// `context.{0,24}(length|limit|window|exceed) | maximum.{0,16}tokens | too[_ ]many[_ ]tokens |
/// request[_ ].{0,16}(too[_ ]large|exceed) | input[_ ]too[_ ]long | too[_ ]many[_ ]images |
/// image.{0,16}(count|limit|maximum)`, hand-compiled to avoid a regex engine for one test.
const OVERFLOW_PATTERNS: &[&[Piece]] = &[
    &[
        Lit("context"),
        Gap(24),
        Alt(&["length", "limit", "window", "exceed"]),
    ],
    &[Lit("maximum"), Gap(16), Lit("tokens")],
    &[Lit("too many tokens")],
    &[Lit("request "), Gap(16), Alt(&["too large", "exceed"])],
    &[Lit("input too long")],
    &[Lit("too many images")],
    &[Lit("image"), Gap(16), Alt(&["count", "limit", "maximum"])],
];

/// Whether `text` names a context, token, request-size or image limit.
pub fn is_overflow_text(text: &str) -> bool {
    let chars: Vec<char> = text.chars().flat_map(char::to_lowercase).collect();
    OVERFLOW_PATTERNS
        .iter()
        .any(|pattern| (0..chars.len()).any(|start| matches_at(pattern, &chars[start..])))
}

fn matches_at(pattern: &[Piece], text: &[char]) -> bool {
    let Some((piece, rest)) = pattern.split_first() else {
        return true;
    };
    match piece {
        Lit(lit) => lit_len(lit, text).is_some_and(|n| matches_at(rest, &text[n..])),
        Alt(options) => options
            .iter()
            .any(|lit| lit_len(lit, text).is_some_and(|n| matches_at(rest, &text[n..]))),
        Gap(max) => (0..=*max).any(|n| {
            n <= text.len()
                && !text[..n].iter().any(|c| is_line_terminator(*c))
                && matches_at(rest, &text[n..])
        }),
    }
}

fn lit_len(lit: &str, text: &[char]) -> Option<usize> {
    let mut len = 0;
    for expected in lit.chars() {
        let actual = *text.get(len)?;
        let ok = if expected == ' ' {
            actual == ' ' || actual == '_'
        } else {
            actual == expected
        };
        if !ok {
            return None;
        }
        len += 1;
    }
    Some(len)
}

fn is_line_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_text_matches_the_reference_alternatives() {
        for text in [
            "This model's maximum context length is 128000 tokens",
            "prompt is too long: context window exceeded",
            "CONTEXT_LENGTH_EXCEEDED",
            "maximum of 4096 tokens",
            "too_many_tokens",
            "Request payload too large",
            "request_body exceeds limit",
            "input too long",
            "too many images",
            "image count over limit",
        ] {
            assert!(is_overflow_text(text), "{text}");
        }
        for text in [
            "invalid model",
            "context\nlength",
            "the context of this very long sentence keeps going length",
            "tokens maximum",
            "",
        ] {
            assert!(!is_overflow_text(text), "{text}");
        }
    }

    #[test]
    fn classifies_by_status_then_overflow_markers() {
        let overflow = classify_http_failure(
            "OpenAI",
            400,
            r#"{"error":{"message":"maximum context length exceeded"}}"#,
        );
        assert!(overflow.is_overflow());
        assert!(overflow.to_string().starts_with(
            "OpenAI could not accept this conversation because it exceeds the provider's request or context limit: maximum context length exceeded. Your history"
        ));
        assert!(classify_http_failure("X", 413, "").is_overflow());
        assert!(matches!(
            classify_http_failure("X", 400, "bad field"),
            LlmError::Http { status: 400, .. }
        ));
        assert_eq!(
            classify_http_failure("Anthropic", 401, "{}").to_string(),
            "Anthropic authentication failed. Check your API key in /admin/ai/providers."
        );
        assert_eq!(
            classify_http_failure("Ollama", 429, r#"{"error":"slow down"}"#).to_string(),
            "Ollama quota or rate limit reached: slow down. Check your account balance."
        );
        assert_eq!(
            classify_http_failure("Custom Provider", 503, "").to_string(),
            "Custom Provider service error (503). Please try again."
        );
        assert_eq!(
            classify_http_failure("OpenRouter", 404, "nope").to_string(),
            "OpenRouter error (404): nope."
        );
    }

    #[test]
    fn transient_table() {
        let http = |status| LlmError::Http {
            status,
            message: String::new(),
        };
        let limited = |status| LlmError::RateLimited {
            status,
            message: String::new(),
        };
        let cases = [
            ("rate limit", limited(429), true),
            ("spent quota", limited(402), false),
            ("request timeout", http(408), true),
            ("server error", http(500), true),
            ("bad gateway", http(502), true),
            ("unavailable", http(503), true),
            ("anthropic overloaded", http(529), true),
            ("not found", http(404), false),
            ("bad request", http(400), false),
            (
                "unsent",
                LlmError::Request {
                    label: "X",
                    detail: String::new(),
                },
                true,
            ),
            (
                "broken stream",
                LlmError::Stream {
                    label: "X",
                    detail: String::new(),
                },
                true,
            ),
            (
                "idle stream",
                LlmError::IdleTimeout {
                    label: "X",
                    idle: Duration::from_secs(1),
                },
                true,
            ),
            (
                "refused key",
                LlmError::Auth {
                    label: "X",
                    status: 401,
                },
                false,
            ),
            ("overflow", classify_http_failure("X", 413, ""), false),
            (
                "in-stream error",
                LlmError::Provider {
                    message: String::new(),
                },
                false,
            ),
            (
                "failed response",
                LlmError::ResponseFailed { label: "X" },
                false,
            ),
            (
                "missing key",
                LlmError::MissingSetting {
                    label: "X",
                    setting: Setting::ApiKey,
                },
                false,
            ),
            (
                "config",
                LlmError::Config {
                    message: String::new(),
                },
                false,
            ),
        ];
        for (name, error, transient) in cases {
            assert_eq!(error.is_transient(), transient, "{name}");
        }
    }

    #[test]
    fn extracts_error_messages() {
        assert_eq!(extract_error_message("  "), None);
        assert_eq!(
            extract_error_message(r#"{"error":"e"}"#).as_deref(),
            Some("e")
        );
        assert_eq!(
            extract_error_message(r#"{"error":{"message":"m"}}"#).as_deref(),
            Some("m")
        );
        assert_eq!(
            extract_error_message(&"x".repeat(300)).map(|s| s.len()),
            Some(200)
        );
    }
}
