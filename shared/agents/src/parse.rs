//! From a run's stdout to agent events: [`LineSplitter`] cuts arbitrary chunks into lines
//! (bounded), and each driver's [`LineParser`] maps its lines to [`AgentEvent`]s. Blank lines,
//! lines that are not JSON and frames of no interest map to nothing; no input panics.

use serde_json::Value;

use crate::{AgentEvent, DriverId};

/// The longest tool target quoted in a tool summary, in characters.
const SUMMARY_TARGET_CHARS: usize = 120;

/// Cuts a byte stream into lines, whatever the chunking (a UTF-8 sequence or a `\r\n` split
/// across chunks included). A line longer than the bound is dropped whole and counted, never
/// buffered without limit.
#[derive(Debug)]
pub struct LineSplitter {
    max_line: usize,
    partial: Vec<u8>,
    /// Inside an over-long line: skip to its end.
    discarding: bool,
    dropped: u64,
}

impl LineSplitter {
    /// A splitter keeping lines of at most `max_line` bytes.
    pub fn new(max_line: usize) -> LineSplitter {
        LineSplitter {
            max_line,
            partial: Vec::new(),
            discarding: false,
            dropped: 0,
        }
    }

    /// The complete lines `chunk` ends (without `\n` or `\r\n`; UTF-8 decoded lossily).
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some(at) = chunk.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&chunk[..at], &chunk[at + 1..]);
            if self.discarding {
                self.discarding = false;
            } else if self.partial.len() + head.len() > self.max_line {
                self.dropped += 1;
            } else {
                self.partial.extend_from_slice(head);
                lines.push(self.take());
            }
            self.partial.clear();
            chunk = rest;
        }
        if !self.discarding {
            if self.partial.len() + chunk.len() > self.max_line {
                self.partial.clear();
                self.discarding = true;
                self.dropped += 1;
            } else {
                self.partial.extend_from_slice(chunk);
            }
        }
        lines
    }

    /// The last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<String> {
        if self.discarding || self.partial.is_empty() {
            self.partial.clear();
            self.discarding = false;
            return None;
        }
        Some(self.take())
    }

    /// Over-long lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn take(&mut self) -> String {
        if self.partial.last() == Some(&b'\r') {
            self.partial.pop();
        }
        let line = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        line
    }
}

/// One driver's mapping from its output lines to events.
pub trait LineParser: Send {
    /// The events one line of output means.
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent>;
}

/// The parser of `driver`'s output.
pub fn line_parser(driver: DriverId) -> Box<dyn LineParser> {
    match driver {
        DriverId::ClaudeCode => Box::new(ClaudeStreamJson),
        DriverId::Opencode | DriverId::Pi => Box::new(OpencodeJson),
    }
}

/// Claude Code's `--output-format stream-json` (§10.4).
#[derive(Debug, Default)]
pub struct ClaudeStreamJson;

impl LineParser for ClaudeStreamJson {
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let Some(frame) = json_object(line) else {
            return Vec::new();
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("assistant") => frame
                .get("message")
                .and_then(|m| m.get("content"))
                .and_then(Value::as_array)
                .map(|blocks| blocks.iter().filter_map(content_block).collect())
                .unwrap_or_default(),
            Some("result") => vec![AgentEvent::Result {
                resume_token: frame
                    .get("session_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                cost_usd: frame.get("total_cost_usd").and_then(Value::as_f64),
                duration_ms: frame
                    .get("duration_ms")
                    .and_then(Value::as_f64)
                    .filter(|d| d.is_finite() && *d >= 0.0)
                    .map_or(0, |d| d as u64),
            }],
            _ => Vec::new(),
        }
    }
}

fn content_block(block: &Value) -> Option<AgentEvent> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(AgentEvent::Text {
            text: block.get("text")?.as_str()?.to_owned(),
        }),
        "tool_use" => {
            let name = block.get("name")?.as_str()?.to_owned();
            let input = block.get("input");
            let target = ["file_path", "path", "command", "query"]
                .iter()
                .find_map(|key| input?.get(key)?.as_str());
            let summary = match target {
                Some(target) => format!(
                    "{name}: {}",
                    target
                        .chars()
                        .take(SUMMARY_TARGET_CHARS)
                        .collect::<String>()
                ),
                None => name.clone(),
            };
            Some(AgentEvent::Tool { name, summary })
        }
        _ => None,
    }
}

/// opencode's `--format json` (§10.5).
#[derive(Debug, Default)]
pub struct OpencodeJson;

impl LineParser for OpencodeJson {
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let Some(frame) = json_object(line) else {
            return Vec::new();
        };
        if frame.get("type").and_then(Value::as_str) == Some("session") {
            if let Some(id) = frame.get("id").and_then(Value::as_str) {
                return vec![AgentEvent::Result {
                    resume_token: Some(id.to_owned()),
                    cost_usd: None,
                    duration_ms: 0,
                }];
            }
        }
        let mut events = Vec::new();
        if let Some(text) = frame.get("text").and_then(Value::as_str) {
            events.push(AgentEvent::Text {
                text: text.to_owned(),
            });
        }
        if let Some(tool) = frame.get("tool").and_then(Value::as_str) {
            events.push(AgentEvent::Tool {
                name: tool.to_owned(),
                summary: tool.to_owned(),
            });
        }
        events
    }
}

fn json_object(line: &str) -> Option<Value> {
    let line = line.trim();
    if !line.starts_with('{') {
        return None;
    }
    serde_json::from_str::<Value>(line)
        .ok()
        .filter(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitter_table() {
        type Case = (
            &'static str,
            Vec<&'static [u8]>,
            Vec<&'static str>,
            Option<&'static str>,
            u64,
        );
        let cases: Vec<Case> = vec![
            ("one line", vec![b"a\n"], vec!["a"], None, 0),
            (
                "split across chunks",
                vec![b"ab", b"c\nd"],
                vec!["abc"],
                Some("d"),
                0,
            ),
            (
                "crlf split between chunks",
                vec![b"a\r", b"\nb\r\n"],
                vec!["a", "b"],
                None,
                0,
            ),
            (
                "utf-8 split inside a sequence",
                vec![b"\xc3", b"\xa9\n"],
                vec!["é"],
                None,
                0,
            ),
            (
                "invalid utf-8 is lossy",
                vec![b"\xff\n"],
                vec!["\u{fffd}"],
                None,
                0,
            ),
            ("blank lines kept", vec![b"\n\n"], vec!["", ""], None, 0),
            (
                "over-long line dropped",
                vec![b"0123456789ab\nok\n"],
                vec!["ok"],
                None,
                1,
            ),
            (
                "over-long across chunks dropped",
                vec![b"0123456", b"789abc", b"def\nok\n"],
                vec!["ok"],
                None,
                1,
            ),
            (
                "over-long last line",
                vec![b"ok\n0123456789abcdef"],
                vec!["ok"],
                None,
                1,
            ),
            (
                "exactly the bound",
                vec![b"0123456789\n"],
                vec!["0123456789"],
                None,
                0,
            ),
        ];
        for (name, chunks, want, last, dropped) in cases {
            let mut splitter = LineSplitter::new(10);
            let mut got = Vec::new();
            for chunk in chunks {
                got.extend(splitter.push(chunk));
            }
            assert_eq!(got, want, "{name}");
            assert_eq!(splitter.finish().as_deref(), last, "{name}");
            assert_eq!(splitter.dropped(), dropped, "{name}");
        }
    }

    #[test]
    fn claude_blocks_and_result() {
        let mut parser = ClaudeStreamJson;
        let long = "x".repeat(200);
        let line = serde_json::json!({"type": "assistant", "message": {"content": [
            {"type": "text", "text": "Hello"},
            {"type": "tool_use", "name": "Write", "input": {"file_path": "/w/index.html", "content": "x"}},
            {"type": "tool_use", "name": "Grep", "input": {"pattern": "a"}},
            {"type": "tool_use", "name": "Bash", "input": {"command": long}},
            {"type": "thinking", "thinking": "hm"},
            {"type": "tool_use", "input": {}},
        ]}})
        .to_string();
        let events = parser.parse_line(&line);
        assert_eq!(events.len(), 4);
        assert_eq!(
            events[0],
            AgentEvent::Text {
                text: "Hello".into()
            }
        );
        assert_eq!(
            events[1],
            AgentEvent::Tool {
                name: "Write".into(),
                summary: "Write: /w/index.html".into()
            }
        );
        assert_eq!(
            events[2],
            AgentEvent::Tool {
                name: "Grep".into(),
                summary: "Grep".into()
            }
        );
        let AgentEvent::Tool { summary, .. } = &events[3] else {
            panic!()
        };
        assert_eq!(summary.chars().count(), "Bash: ".len() + 120);
        let result = parser.parse_line(
            r#"{"type":"result","subtype":"success","is_error":true,"duration_ms":1234,"session_id":"s-1","total_cost_usd":0.02}"#,
        );
        assert_eq!(
            result,
            [AgentEvent::Result {
                resume_token: Some("s-1".into()),
                cost_usd: Some(0.02),
                duration_ms: 1234
            }]
        );
        let bare = parser.parse_line(r#"{"type":"result"}"#);
        assert_eq!(
            bare,
            [AgentEvent::Result {
                resume_token: None,
                cost_usd: None,
                duration_ms: 0
            }]
        );
        let negative = parser.parse_line(r#"{"type":"result","duration_ms":-5}"#);
        assert_eq!(
            negative,
            [AgentEvent::Result {
                resume_token: None,
                cost_usd: None,
                duration_ms: 0
            }]
        );
        for junk in [
            "",
            "not json",
            "[1,2]",
            r#"{"type":"system","subtype":"init"}"#,
            r#"{"type":"user"}"#,
            r#"{"type":"assistant"}"#,
        ] {
            assert!(parser.parse_line(junk).is_empty(), "{junk}");
        }
    }

    #[test]
    fn opencode_lines() {
        let mut parser = OpencodeJson;
        assert_eq!(
            parser.parse_line(r#"{"text":"hi"}"#),
            [AgentEvent::Text { text: "hi".into() }]
        );
        assert_eq!(
            parser.parse_line(r#"{"tool":"edit"}"#),
            [AgentEvent::Tool {
                name: "edit".into(),
                summary: "edit".into()
            }]
        );
        assert_eq!(
            parser.parse_line(r#"{"type":"session","id":"ses_9"}"#),
            [AgentEvent::Result {
                resume_token: Some("ses_9".into()),
                cost_usd: None,
                duration_ms: 0
            }]
        );
        assert!(parser.parse_line(r#"{"type":"session"}"#).is_empty());
        assert!(parser.parse_line("garbage").is_empty());
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics(chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..16)) {
            let mut splitter = LineSplitter::new(32);
            let mut claude = ClaudeStreamJson;
            let mut opencode = OpencodeJson;
            for chunk in &chunks {
                for line in splitter.push(chunk) {
                    proptest::prop_assert!(line.len() <= 32 * 3);
                    claude.parse_line(&line);
                    opencode.parse_line(&line);
                }
            }
            if let Some(line) = splitter.finish() {
                claude.parse_line(&line);
            }
        }
    }
}
