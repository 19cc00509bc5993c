//! The gate's decisions socket: how sited subscribes to one door's egress decisions, and the
//! decisions the gate streams back. Defined once, used by both ends.
//!
//! The conversation, one JSON object per `\n`-terminated line:
//! 1. sited connects to the gate's decisions socket (its file name is the layout's) and sends
//!    one [`Subscribe`] line (at most [`MAX_SUBSCRIBE_LINE`] bytes) naming a door, and nothing
//!    more; a bad line gets no answer, the connection is closed;
//! 2. the gate subscribes, then echoes the same line: from that echo on it records for the
//!    subscription, so sited starts the run only once it has read it;
//! 3. the gate writes a [`Decision`] line (at most [`MAX_DECISION_LINE`] bytes) for every
//!    decision of that door recorded since;
//! 4. sited half-closes its write side when the run's program has exited; the gate writes every
//!    decision already recorded for it and closes. A site runs one thing at a time, so the
//!    decisions between the subscription and its end are that run's decisions.
//!
//! The gate records a decision before it answers the client the decision is about, so a
//! decision whose reply the program saw is always in the stream.
//!
//! Parts: [`Subscribe`], [`Decision`] with its [`Verdict`] and its human [`Decision::line`],
//! [`printable`], and [`EgressError`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::message::{deserialize_present, parse_object};
use crate::Door;

/// The only version of [`Subscribe`] spoken.
pub const SUBSCRIBE_VERSION: u32 = 1;

/// The most bytes a [`Subscribe`] line may take, its `\n` included.
pub const MAX_SUBSCRIBE_LINE: usize = 1024; // 1 KiB

/// The most bytes a [`Decision`] line may take, its `\n` included: a host and a reason of at
/// most [`MAX_DECISION_TEXT`] printable characters each, doubled at worst by JSON escapes,
/// fit with room to spare.
pub const MAX_DECISION_LINE: usize = 2048; // 2 KiB

/// The most characters a decision's `host` or `reason` carries; either may hold text the
/// agent chose.
pub const MAX_DECISION_TEXT: usize = 200;

/// The `host` of the MCP relay's decisions (with no port). No parsed CONNECT target is it (a
/// plan host has at least two labels); a head that did not parse and named exactly `mcp` with
/// no port reads as the relay in [`Decision::line`], its verdict still `refused`.
pub const MCP_HOST: &str = "mcp";

/// The `host` of the model relay's decisions (with no port), beside [`MCP_HOST`] on the same
/// listener. As with it, no parsed CONNECT target is it, and a head that did not parse and
/// named exactly `model` with no port reads as the relay in [`Decision::line`], its verdict
/// still `refused`.
pub const MODEL_HOST: &str = "model";

/// sited's one line: which door's decisions to stream, e.g. `{"v":1,"door":"turn"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    /// Must be [`SUBSCRIBE_VERSION`].
    pub v: u32,
    /// The door: `turn` or `build` (the git door has no way out).
    pub door: Door,
}

/// What the gate decided about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A tunnel was opened: the reason is `via <address>`.
    Allowed,
    /// The gate refused: the reason names why (`not_in_plan`, `not_public: …`).
    Refused,
    /// The gate tried and could not: a lookup or every dial failed.
    Failed,
    /// The MCP or the model relay passed a request on: the reason is `<method> /mcp <status>`
    /// or `<method> /model/<api> <status>`.
    Relayed,
    /// A tunnel the gate had allowed was closed before its first flight went upstream: the
    /// flight was refused (`server_name_mismatch`, `timeout`, ...) or the client closed first
    /// (`client_closed`, an opened connection it never used). Nothing was sent upstream.
    Closed,
}

/// One decision as the gate streams it, e.g.
/// `{"door":"turn","host":"api.example.com","port":443,"verdict":"refused","reason":"not_public: 10.1.2.3 private"}`.
///
/// `host` and `port` are the CONNECT target when its head parsed. For a head that did not,
/// `host` is the target as the client wrote it and `port` is `null`; for the MCP relay, `host`
/// is [`MCP_HOST`] and `port` is `null`, for the model relay [`MODEL_HOST`] and `null`. `host`
/// and `reason` are [`printable`]: not empty, at most [`MAX_DECISION_TEXT`] characters of
/// printable ASCII.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The door the request came through.
    pub door: Door,
    /// The requested host, or what stood for it.
    pub host: String,
    /// The requested port, when the target parsed (the key is required, `null` allowed).
    #[serde(deserialize_with = "deserialize_present")]
    pub port: Option<u16>,
    /// What was decided.
    pub verdict: Verdict,
    /// Why, in the gate's words.
    pub reason: String,
}

/// Why a line of the decisions socket is refused.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The line is over its cap; checked before anything is parsed.
    #[error("the {message} line is {len} bytes, over its cap of {cap}")]
    TooLong {
        /// The message, `subscribe` or `decision`.
        message: &'static str,
        /// The line's length, its `\n` included.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// A `\n` other than the one ending the line.
    #[error("the {message} line holds more than one line")]
    NotOneLine {
        /// The message.
        message: &'static str,
    },
    /// Not a JSON object of the message's shape: bad syntax, an unknown, missing or duplicate
    /// key, or a value of the wrong type (an unknown door among them). The source says which.
    #[error("the {message} line is malformed: {source}")]
    Json {
        /// The message.
        message: &'static str,
        /// serde's description.
        #[source]
        source: serde_json::Error,
    },
    /// The subscription's `v` is not [`SUBSCRIBE_VERSION`].
    #[error("subscribe has version {found}, only version {SUBSCRIBE_VERSION} is spoken")]
    UnsupportedVersion {
        /// The version it carried.
        found: u32,
    },
    /// The git door: it has no way out, so it has no decisions.
    #[error("the git door has no way out, so it has no egress decisions")]
    GitDoor,
    /// `host` or `reason` is empty.
    #[error("{field} is empty")]
    Empty {
        /// `host` or `reason`.
        field: &'static str,
    },
    /// `host` or `reason` is over [`MAX_DECISION_TEXT`] characters.
    #[error("{field} is longer than {MAX_DECISION_TEXT} characters")]
    TextTooLong {
        /// `host` or `reason`.
        field: &'static str,
    },
    /// `host` or `reason` holds a character outside `\x20..=\x7e`.
    #[error("{field} holds a character that is not printable ASCII")]
    NotPrintable {
        /// `host` or `reason`.
        field: &'static str,
    },
}

// === impl EgressError ===

impl EgressError {
    /// The stable snake_case name used in logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            EgressError::TooLong { .. } => "too_long",
            EgressError::NotOneLine { .. } => "not_one_line",
            EgressError::Json { .. } => "malformed",
            EgressError::UnsupportedVersion { .. } => "unsupported_version",
            EgressError::GitDoor => "git_door",
            EgressError::Empty { .. } => "empty",
            EgressError::TextTooLong { .. } => "text_too_long",
            EgressError::NotPrintable { .. } => "not_printable",
        }
    }
}

// === impl Subscribe ===

impl Subscribe {
    /// A subscription to `door`'s decisions, at [`SUBSCRIBE_VERSION`].
    pub fn new(door: Door) -> Subscribe {
        Subscribe {
            v: SUBSCRIBE_VERSION,
            door,
        }
    }

    /// Checks the rules serde cannot: the version, and a door with a way out.
    pub fn validate(&self) -> Result<(), EgressError> {
        if self.v != SUBSCRIBE_VERSION {
            return Err(EgressError::UnsupportedVersion { found: self.v });
        }
        check_door(self.door)
    }

    /// Parses and validates one line (its `\n` optional), refusing it unread when it is over
    /// [`MAX_SUBSCRIBE_LINE`].
    pub fn parse_line(line: &[u8]) -> Result<Subscribe, EgressError> {
        let subscribe: Subscribe = parse_line("subscribe", line, MAX_SUBSCRIBE_LINE)?;
        subscribe.validate()?;
        Ok(subscribe)
    }

    /// Validates this subscription and writes it as one line, `\n` included.
    pub fn to_line(&self) -> Result<String, EgressError> {
        self.validate()?;
        to_line("subscribe", self, MAX_SUBSCRIBE_LINE)
    }
}

// === impl Verdict ===

impl Verdict {
    /// Every verdict.
    pub const ALL: [Verdict; 5] = [
        Verdict::Allowed,
        Verdict::Refused,
        Verdict::Failed,
        Verdict::Relayed,
        Verdict::Closed,
    ];

    /// The wire name: `allowed`, `refused`, `failed`, `relayed` or `closed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Refused => "refused",
            Verdict::Failed => "failed",
            Verdict::Relayed => "relayed",
            Verdict::Closed => "closed",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Decision ===

impl Decision {
    /// A decision with `host` and `reason` made [`printable`] and bounded, and `-` for either
    /// when it is empty, so that every decision the gate builds is valid on the wire.
    pub fn new(
        door: Door,
        host: &str,
        port: Option<u16>,
        verdict: Verdict,
        reason: &str,
    ) -> Decision {
        let text = |text: &str| {
            if text.is_empty() {
                "-".to_owned()
            } else {
                printable(text)
            }
        };
        Decision {
            door,
            host: text(host),
            port,
            verdict,
            reason: text(reason),
        }
    }

    /// Returns true if and only if this is a decision of the MCP relay: host [`MCP_HOST`], no
    /// port.
    pub fn is_mcp(&self) -> bool {
        self.host == MCP_HOST && self.port.is_none()
    }

    /// Returns true if and only if this is a decision of the model relay: host [`MODEL_HOST`],
    /// no port.
    pub fn is_model_relay(&self) -> bool {
        self.host == MODEL_HOST && self.port.is_none()
    }

    /// The line a session or a build log shows, in the original daemon's words:
    /// - allowed: `[egress] CONNECT api.example.com:443 → 198.18.0.10:443 (allowed)` (the
    ///   address is the reason without its `via `);
    /// - refused: `[egress] refused CONNECT api.example.com:443 — not_in_plan`;
    /// - failed: `[egress] CONNECT api.example.com:443 failed — lookup_failed: …`;
    /// - relayed: `[egress] MCP relay POST /mcp 200`, `[egress] model relay POST
    ///   /model/anthropic 200`;
    /// - closed: `[egress] closed the tunnel to api.example.com:443 — client_closed; nothing
    ///   was sent upstream` (a tunnel, so never the relay's).
    ///
    /// A decision of the MCP relay names `MCP relay` where a CONNECT names its target, one of
    /// the model relay `model relay` (`[egress] refused model relay — GET /model/openai
    /// bad_path`), and one made before any target was read (host `-`, no port: over the door's
    /// cap, a head that never came) names `a connection`:
    /// `[egress] refused a connection — over_cap: this door already holds 128`.
    pub fn line(&self) -> String {
        let target = match self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.clone(),
        };
        let subject = if self.is_mcp() {
            "MCP relay".to_owned()
        } else if self.is_model_relay() {
            "model relay".to_owned()
        } else if self.host == "-" && self.port.is_none() {
            "a connection".to_owned()
        } else {
            format!("CONNECT {target}")
        };
        let reason = &self.reason;
        match self.verdict {
            Verdict::Allowed => {
                let address = reason.strip_prefix("via ").unwrap_or(reason);
                format!("[egress] {subject} → {address} (allowed)")
            }
            Verdict::Refused => format!("[egress] refused {subject} — {reason}"),
            Verdict::Failed => format!("[egress] {subject} failed — {reason}"),
            Verdict::Relayed => format!("[egress] {subject} {reason}"),
            Verdict::Closed => format!("[egress] closed the tunnel to {target} — {reason}"),
        }
    }

    /// Checks the rules serde cannot: a door with a way out, and `host` and `reason` not
    /// empty, bounded and printable.
    pub fn validate(&self) -> Result<(), EgressError> {
        check_door(self.door)?;
        check_text("host", &self.host)?;
        check_text("reason", &self.reason)
    }

    /// Parses and validates one line (its `\n` optional), refusing it unread when it is over
    /// [`MAX_DECISION_LINE`].
    pub fn parse_line(line: &[u8]) -> Result<Decision, EgressError> {
        let decision: Decision = parse_line("decision", line, MAX_DECISION_LINE)?;
        decision.validate()?;
        Ok(decision)
    }

    /// Validates this decision and writes it as one line, `\n` included.
    pub fn to_line(&self) -> Result<String, EgressError> {
        self.validate()?;
        to_line("decision", self, MAX_DECISION_LINE)
    }
}

/// `text` with every character outside `\x20..=\x7e` replaced by `?`, cut to
/// [`MAX_DECISION_TEXT`] characters.
pub fn printable(text: &str) -> String {
    text.chars()
        .take(MAX_DECISION_TEXT)
        .map(|c| if is_printable(c) { c } else { '?' })
        .collect()
}

fn is_printable(c: char) -> bool {
    (' '..='~').contains(&c)
}

fn check_door(door: Door) -> Result<(), EgressError> {
    match door {
        Door::Turn | Door::Build => Ok(()),
        Door::Git => Err(EgressError::GitDoor),
    }
}

fn check_text(field: &'static str, text: &str) -> Result<(), EgressError> {
    if text.is_empty() {
        Err(EgressError::Empty { field })
    } else if !text.chars().all(is_printable) {
        Err(EgressError::NotPrintable { field })
    } else if text.len() > MAX_DECISION_TEXT {
        // Printable ASCII: bytes are characters.
        Err(EgressError::TextTooLong { field })
    } else {
        Ok(())
    }
}

fn parse_line<T: serde::de::DeserializeOwned>(
    message: &'static str,
    line: &[u8],
    cap: usize,
) -> Result<T, EgressError> {
    if line.len() > cap {
        return Err(EgressError::TooLong {
            message,
            len: line.len(),
            cap,
        });
    }
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    if body.contains(&b'\n') {
        return Err(EgressError::NotOneLine { message });
    }
    parse_object(body).map_err(|source| EgressError::Json { message, source })
}

fn to_line<T: Serialize>(
    message: &'static str,
    value: &T,
    cap: usize,
) -> Result<String, EgressError> {
    let mut line =
        serde_json::to_string(value).map_err(|source| EgressError::Json { message, source })?;
    line.push('\n');
    if line.len() > cap {
        return Err(EgressError::TooLong {
            message,
            len: line.len(),
            cap,
        });
    }
    Ok(line)
}

#[cfg(test)]
mod tests;
