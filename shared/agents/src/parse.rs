//! From a run's stdout to agent events: [`LineSplitter`] cuts arbitrary chunks into lines
//! (bounded), and each driver's [`LineParser`] maps its lines to [`SessionEvent`]s. Blank lines,
//! lines that are not JSON and frames of no interest map to nothing; no input panics.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::plan::is_resume_token;
use atelier_site_api::SessionEvent;

use crate::DriverId;

/// The longest tool target quoted in a tool summary, in characters.
const SUMMARY_TARGET_CHARS: usize = 120;

/// Cuts a byte stream into lines, whatever the chunking (a UTF-8 sequence or a `\r\n` split
/// across chunks included). A line longer than the bound is dropped whole and counted (unless
/// its start marks it as noise its parser skips anyway), never buffered without limit.
#[derive(Debug)]
pub struct LineSplitter {
    max_line: usize,
    partial: Vec<u8>,
    /// Inside an over-long line: skip to its end.
    discarding: bool,
    dropped: u64,
    /// Whether a line starting so is noise, its loss no loss (see [`LineParser::noise`]).
    noise: fn(&[u8]) -> bool,
}

/// How much of a dropped line's start [`LineParser::noise`] is shown.
const NOISE_HEAD: usize = 64;

/// No line is noise.
fn never_noise(_: &[u8]) -> bool {
    false
}

impl LineSplitter {
    /// A splitter keeping lines of at most `max_line` bytes.
    pub fn new(max_line: usize) -> LineSplitter {
        LineSplitter {
            max_line,
            partial: Vec::new(),
            discarding: false,
            dropped: 0,
            noise: never_noise,
        }
    }

    /// The splitter with `noise` telling which dropped lines are not worth counting.
    pub fn with_noise(self, noise: fn(&[u8]) -> bool) -> LineSplitter {
        LineSplitter { noise, ..self }
    }

    /// Counts an over-long line, whose start is what `partial` holds, then `rest`, unless that
    /// start marks it as noise.
    fn drop_line(&mut self, rest: &[u8]) {
        let mut head = self.partial[..self.partial.len().min(NOISE_HEAD)].to_vec();
        head.extend_from_slice(&rest[..rest.len().min(NOISE_HEAD - head.len())]);
        if !(self.noise)(&head) {
            self.dropped += 1;
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
                self.drop_line(head);
            } else {
                self.partial.extend_from_slice(head);
                lines.push(self.take());
            }
            self.partial.clear();
            chunk = rest;
        }
        if !self.discarding {
            if self.partial.len() + chunk.len() > self.max_line {
                self.drop_line(chunk);
                self.partial.clear();
                self.discarding = true;
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

    /// Over-long lines dropped so far, noise not counted.
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
    fn parse_line(&mut self, line: &str) -> Vec<SessionEvent>;

    /// The events the end of a run that exited 0 means, after its last line: opencode states
    /// its session only along the way, so its result is known once the output ended. The
    /// daemon synthesizes a bare result only when neither the lines nor this gave one.
    fn finish(&mut self) -> Vec<SessionEvent> {
        Vec::new()
    }

    /// Why the agent failed its turn although it exited 0, if its output said so (pi ends a
    /// turn whose model calls all failed with a clean exit and no result).
    fn failure(&self) -> Option<&str> {
        None
    }

    /// The resume token of the conversation the agent kept although the turn ended without a
    /// result (it failed, or was stopped), if its output named one (atelier-agent's `start`
    /// line does, and its `error` line when it saved the conversation), so the next message
    /// resumes it rather than starting afresh.
    fn kept_after_failure(&self) -> Option<&str> {
        None
    }

    /// Whether a line starting with `head` (its first bytes, up to 64) is one this parser skips
    /// whatever it holds, so dropping it for its length loses nothing worth saying.
    fn noise(&self) -> fn(&[u8]) -> bool {
        never_noise
    }
}

/// The parser of `driver`'s output.
pub fn line_parser(driver: DriverId) -> Box<dyn LineParser> {
    match driver {
        DriverId::ClaudeCode => Box::new(ClaudeStreamJson::default()),
        DriverId::Opencode => Box::new(OpencodeJson::default()),
        DriverId::Pi => Box::new(PiJson::default()),
        DriverId::Atelier => Box::new(AtelierJson::default()),
    }
}

/// Claude Code's `--output-format stream-json`: `assistant` frames' text and
/// tool_use blocks, and the `result` frame. A result with `is_error: true` still maps to
/// `ok: true` (the contract's quirk: the daemon's own faults are its errors).
///
/// Every frame names the session (the first, `system`/`init`, before any work), which a turn
/// stopped or failed before its result keeps.
#[derive(Debug, Default)]
pub struct ClaudeStreamJson {
    session: Option<String>,
}

impl LineParser for ClaudeStreamJson {
    fn parse_line(&mut self, line: &str) -> Vec<SessionEvent> {
        let Some(frame) = json_object(line) else {
            return Vec::new();
        };
        if let Some(session) = resume_token(frame.get("session_id")) {
            self.session = Some(session);
        }
        match frame.get("type").and_then(Value::as_str) {
            Some("assistant") => frame
                .get("message")
                .and_then(|m| m.get("content"))
                .and_then(Value::as_array)
                .map(|blocks| blocks.iter().filter_map(claude_block).collect())
                .unwrap_or_default(),
            Some("result") => {
                let result = finished(
                    resume_token(frame.get("session_id")),
                    frame.get("total_cost_usd").and_then(finite),
                    millis(frame.get("duration_ms")),
                );
                match frame.get("subtype").and_then(Value::as_str) {
                    Some("error_max_turns") => vec![SessionEvent::text(ROUND_LIMIT_NOTICE), result],
                    _ => vec![result],
                }
            }
            _ => Vec::new(),
        }
    }

    fn kept_after_failure(&self) -> Option<&str> {
        self.session.as_deref()
    }
}

fn claude_block(block: &Value) -> Option<SessionEvent> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(SessionEvent::text(block.get("text")?.as_str()?.to_owned())),
        "tool_use" => {
            let name = block.get("name")?.as_str()?;
            Some(tool_event(
                name,
                block.get("input"),
                &["file_path", "path", "command", "query"],
            ))
        }
        _ => None,
    }
}

/// Whether `event` is one a driver's output can mean: text, a tool use, changed files or its
/// result. The turn's start and end, faults, the output tail and a dropped resume token are the
/// daemon's to say, never a parser's.
pub fn is_driver_event(event: &SessionEvent) -> bool {
    matches!(
        event,
        SessionEvent::Text { .. }
            | SessionEvent::Tool { .. }
            | SessionEvent::FileChange { .. }
            | SessionEvent::Result { .. }
    )
}

/// A driver's finished turn: the agent says it is done, and how long it took by its count (0
/// where the driver does not say).
fn finished(resume_token: Option<String>, cost_usd: Option<f64>, duration_ms: u64) -> SessionEvent {
    SessionEvent::Result {
        ok: true,
        resume_token,
        cost_usd,
        duration_ms: Some(duration_ms),
    }
}

/// `<name>: <target, first 120 chars>`, the target being the first of `keys` the input has as
/// a string, or just the name.
fn tool_event(name: &str, input: Option<&Value>, keys: &[&str]) -> SessionEvent {
    let target = keys.iter().find_map(|key| input?.get(key)?.as_str());
    let summary = match target {
        Some(target) => format!(
            "{name}: {}",
            target
                .chars()
                .take(SUMMARY_TARGET_CHARS)
                .collect::<String>()
        ),
        None => name.to_owned(),
    };
    SessionEvent::Tool {
        name: name.to_owned(),
        summary,
    }
}

/// What a driver whose output has no result line knows of its run at the end: the session to
/// resume, the summed cost and the span of the timestamps; made into the one result.
#[derive(Debug, Default)]
struct RunTally {
    session: Option<String>,
    cost_usd: Option<f64>,
    first_ms: Option<u64>,
    last_ms: Option<u64>,
    finished: bool,
}

impl RunTally {
    fn saw_session(&mut self, value: Option<&Value>) {
        if let Some(session) = resume_token(value) {
            self.session = Some(session);
        }
    }

    fn saw_time(&mut self, value: Option<&Value>) {
        if let Some(at) = value.and_then(Value::as_u64) {
            self.first_ms.get_or_insert(at);
            self.last_ms = Some(at);
        }
    }

    fn add_cost(&mut self, value: Option<&Value>) {
        if let Some(cost) = value.and_then(finite) {
            *self.cost_usd.get_or_insert(0.0) += cost;
        }
    }

    /// The result, once.
    fn result(&mut self) -> Vec<SessionEvent> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        let duration_ms = match (self.first_ms, self.last_ms) {
            (Some(first), Some(last)) => last.saturating_sub(first),
            _ => 0,
        };
        vec![finished(self.session.clone(), self.cost_usd, duration_ms)]
    }
}

/// pi's `--mode json`. The first line, `{type: "session", id}`, names the session to resume;
/// each `message_end` of the assistant says its text blocks and tool calls (the streamed
/// `message_update` deltas repeat them piecemeal and are skipped) and adds its cost;
/// `agent_end` is the result, unless the last assistant message stopped on an error — pi
/// exits 0 then too — which is said as text and makes the turn a failure.
#[derive(Debug, Default)]
pub struct PiJson {
    tally: RunTally,
    /// The last assistant message's error, while it is the last.
    error: Option<String>,
}

impl PiJson {
    fn assistant(&mut self, message: &Value) -> Vec<SessionEvent> {
        self.tally.add_cost(
            message
                .get("usage")
                .and_then(|u| u.get("cost"))
                .and_then(|c| c.get("total")),
        );
        let mut events: Vec<SessionEvent> = message
            .get("content")
            .and_then(Value::as_array)
            .map(|blocks| blocks.iter().filter_map(pi_block).collect())
            .unwrap_or_default();
        self.error = match message.get("stopReason").and_then(Value::as_str) {
            Some("error" | "aborted") => Some(
                message
                    .get("errorMessage")
                    .and_then(Value::as_str)
                    .unwrap_or("the model call failed")
                    .to_owned(),
            ),
            _ => None,
        };
        if let Some(error) = &self.error {
            events.push(SessionEvent::text(format!("pi error: {error}")));
        }
        events
    }

    fn result(&mut self) -> Vec<SessionEvent> {
        if self.error.is_some() {
            return Vec::new();
        }
        self.tally.result()
    }
}

impl LineParser for PiJson {
    fn parse_line(&mut self, line: &str) -> Vec<SessionEvent> {
        // pi streams every delta as a `message_update` carrying the whole message so far (a
        // page being written is megabytes, many times over): only the types read here are
        // decoded into values, the others just scanned for their type.
        if !matches!(
            frame_type(line).as_deref(),
            Some("session" | "message_end" | "agent_end")
        ) {
            return Vec::new();
        }
        let Some(frame) = json_object(line) else {
            return Vec::new();
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("session") => {
                self.tally.saw_session(frame.get("id"));
                Vec::new()
            }
            Some("message_end") => {
                let Some(message) = frame.get("message").filter(|m| m.is_object()) else {
                    return Vec::new();
                };
                self.tally.saw_time(message.get("timestamp"));
                match message.get("role").and_then(Value::as_str) {
                    Some("assistant") => self.assistant(message),
                    _ => Vec::new(),
                }
            }
            Some("agent_end") => self.result(),
            _ => Vec::new(),
        }
    }

    fn finish(&mut self) -> Vec<SessionEvent> {
        self.result()
    }

    fn failure(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// pi names its session in its first line, before any work.
    fn kept_after_failure(&self) -> Option<&str> {
        self.tally.session.as_deref()
    }

    /// Its `message_update` deltas, which carry the whole message so far (the longest lines
    /// pi writes); `message_end` says the same once.
    fn noise(&self) -> fn(&[u8]) -> bool {
        |head| head.starts_with(br#"{"type":"message_update""#)
    }
}

fn pi_block(block: &Value) -> Option<SessionEvent> {
    match block.get("type").and_then(Value::as_str)? {
        "text" => {
            let text = block.get("text")?.as_str()?;
            (!text.trim().is_empty()).then(|| SessionEvent::text(text.to_owned()))
        }
        "toolCall" => Some(tool_event(
            block.get("name")?.as_str()?,
            block.get("arguments"),
            &["path", "file_path", "pattern", "command"],
        )),
        _ => None,
    }
}

/// atelier-agent's output, one JSON object per line (the agent's `events` module is their one
/// definition): a `text` is said (a blank one is not), a `tool` is the call's name and its
/// target (`input.path`, else `input.pattern`), each `file_change` names its one file, and
/// `result` is the result (`resume`, `cost_usd`, `duration_ms`). The `start` line's `resume`
/// names the conversation the agent saved before its first request, kept for a turn that ends
/// without a result. An `error` line — the last before a non-zero exit — is said as text and
/// makes the turn a failure, its `resume` (when it has one) naming the conversation kept;
/// `tool_result` and `warning` lines are the agent's own log.
#[derive(Debug, Default)]
pub struct AtelierJson {
    /// The `error` line's message, once one was read.
    error: Option<String>,
    /// The conversation saved so far: the `start` line's, or the `error` line's `resume`.
    kept: Option<String>,
}

impl LineParser for AtelierJson {
    fn parse_line(&mut self, line: &str) -> Vec<SessionEvent> {
        let Some(frame) = json_object(line) else {
            return Vec::new();
        };
        let field = |key: &str| frame.get(key).and_then(Value::as_str);
        let event =
            match field("type") {
                Some("text") => field("text")
                    .filter(|text| !text.trim().is_empty())
                    .map(|text| SessionEvent::text(text.to_owned())),
                Some("tool") => field("name")
                    .map(|name| tool_event(name, frame.get("input"), &["path", "pattern"])),
                Some("file_change") => field("path").filter(|path| !path.is_empty()).map(|path| {
                    SessionEvent::FileChange {
                        files: vec![path.to_owned()],
                    }
                }),
                Some("result") => {
                    let result = finished(
                        resume_token(frame.get("resume")),
                        frame.get("cost_usd").and_then(finite),
                        millis(frame.get("duration_ms")),
                    );
                    // Otherwise the editor sees a turn that ended well with the work undone.
                    match field("stop") {
                        Some("max_tokens") => {
                            return vec![SessionEvent::text(OUTPUT_LIMIT_NOTICE), result]
                        }
                        Some("max_turns") => {
                            return vec![SessionEvent::text(ROUND_LIMIT_NOTICE), result]
                        }
                        _ => Some(result),
                    }
                }
                Some("start") => {
                    self.kept = resume_token(frame.get("resume"));
                    None
                }
                Some("error") => {
                    let message = field("message").unwrap_or("the turn failed");
                    let reason = field("reason").unwrap_or("unknown");
                    self.error = Some(message.to_owned());
                    if let Some(kept) = resume_token(frame.get("resume")) {
                        self.kept = Some(kept);
                    }
                    Some(SessionEvent::text(format!(
                        "atelier-agent error ({reason}): {message}"
                    )))
                }
                _ => None,
            };
        event.into_iter().collect()
    }

    fn failure(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn kept_after_failure(&self) -> Option<&str> {
        self.kept.as_deref()
    }
}

/// What a turn the agent ended at its limit of rounds (model calls) is said with, before its
/// result: the agent stopped, not because the work was done.
pub const ROUND_LIMIT_NOTICE: &str = "[atelier] The agent reached its limit of rounds for one \
     turn before it finished, so its work may be unfinished. Send a message to let it continue.";

/// What an atelier turn whose last answer was cut at the model's output limit is said with,
/// before its result.
pub const OUTPUT_LIMIT_NOTICE: &str = "atelier-agent: the model's last answer was cut off at its \
     output limit, so what it was writing is unfinished. Send a message to let it continue.";

/// opencode's `run --format json`. Each line is `{type, timestamp, sessionID, part…}`:
/// `text` and `tool_use` parts become events, `step_finish` costs add up, `error` is said
/// as text (opencode writes it to stdout, so no stderr tail would carry it), and `done` (or,
/// for a version without it, [`LineParser::finish`]) is the result: the session to resume,
/// the summed cost and the span of the timestamps. Flat frames without a `part` are read too,
/// as the original daemon read them: a string `text` is a text event, a string `tool` a tool
/// event of that name, and `{type: "session", id}` the result, resuming that session.
#[derive(Debug, Default)]
pub struct OpencodeJson {
    tally: RunTally,
}

impl LineParser for OpencodeJson {
    fn parse_line(&mut self, line: &str) -> Vec<SessionEvent> {
        let Some(frame) = json_object(line) else {
            return Vec::new();
        };
        self.tally.saw_session(frame.get("sessionID"));
        self.tally.saw_time(frame.get("timestamp"));
        let mut events = Vec::new();
        let part = frame.get("part").filter(|p| p.is_object());
        if part.is_none() {
            if let Some(text) = frame.get("text").and_then(Value::as_str) {
                events.push(SessionEvent::text(text.to_owned()));
            }
            if let Some(tool) = frame.get("tool").and_then(Value::as_str) {
                events.push(SessionEvent::Tool {
                    name: tool.to_owned(),
                    summary: tool.to_owned(),
                });
            }
        }
        match frame.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = part.and_then(|p| p.get("text")).and_then(Value::as_str) {
                    if !text.trim().is_empty() {
                        events.push(SessionEvent::text(text.to_owned()));
                    }
                }
            }
            Some("tool_use") => {
                if let Some(tool) = part.and_then(|p| p.get("tool")).and_then(Value::as_str) {
                    let input = part
                        .and_then(|p| p.get("state"))
                        .and_then(|s| s.get("input"));
                    events.push(tool_event(
                        tool,
                        input,
                        &["filePath", "path", "command", "pattern", "url", "query"],
                    ));
                }
            }
            Some("step_finish") => self.tally.add_cost(part.and_then(|p| p.get("cost"))),
            Some("error") => {
                if let Some(message) = frame.get("error").and_then(error_message) {
                    events.push(SessionEvent::text(format!("opencode error: {message}")));
                }
            }
            Some("done") => events.extend(self.tally.result()),
            Some("session") if resume_token(frame.get("id")).is_some() => {
                self.tally.saw_session(frame.get("id"));
                events.extend(self.tally.result());
            }
            _ => {}
        }
        events
    }

    fn finish(&mut self) -> Vec<SessionEvent> {
        if self.tally.session.is_none() {
            return Vec::new();
        }
        self.tally.result()
    }

    /// Every opencode frame names its session.
    fn kept_after_failure(&self) -> Option<&str> {
        self.tally.session.as_deref()
    }
}

/// What an opencode error says: `data.message`, else `message`, else its `name`.
fn error_message(error: &Value) -> Option<&str> {
    error
        .get("data")
        .and_then(|d| d.get("message"))
        .or_else(|| error.get("message"))
        .or_else(|| error.get("name"))
        .and_then(Value::as_str)
}

/// A session id the next turn may pass back on its argv; anything else is dropped.
fn resume_token(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .filter(|t| is_resume_token(t))
        .map(str::to_owned)
}

fn finite(value: &Value) -> Option<f64> {
    value.as_f64().filter(|v| v.is_finite())
}

/// A non-negative count of milliseconds, else 0.
fn millis(value: Option<&Value>) -> u64 {
    value
        .and_then(Value::as_f64)
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map_or(0, |d| d as u64)
}

/// A frame's `type`, read without decoding the rest of it; `None` for a line that is no JSON
/// object or has no string `type`.
fn frame_type(line: &str) -> Option<Cow<'_, str>> {
    #[derive(Deserialize)]
    struct Typed<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Typed<'_>>(line.trim()).ok()?.kind
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

    fn split(max: usize, chunks: &[&[u8]]) -> (Vec<String>, Option<String>, u64) {
        let mut splitter = LineSplitter::new(max);
        let mut lines = Vec::new();
        for chunk in chunks {
            lines.extend(splitter.push(chunk));
        }
        let last = splitter.finish();
        (lines, last, splitter.dropped())
    }

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
            ("nothing", vec![], vec![], None, 0),
            (
                "empty chunks",
                vec![b"", b"a", b"", b"\n"],
                vec!["a"],
                None,
                0,
            ),
            (
                "split across chunks",
                vec![b"ab", b"c\nd"],
                vec!["abc"],
                Some("d"),
                0,
            ),
            (
                "final partial line",
                vec![b"a\nlast"],
                vec!["a"],
                Some("last"),
                0,
            ),
            ("crlf", vec![b"a\r\nb\r\n"], vec!["a", "b"], None, 0),
            (
                "crlf split between chunks",
                vec![b"a\r", b"\nb"],
                vec!["a"],
                Some("b"),
                0,
            ),
            (
                "a lone cr is kept inside",
                vec![b"a\rb\n"],
                vec!["a\rb"],
                None,
                0,
            ),
            (
                "a final partial line's cr",
                vec![b"a\r"],
                vec![],
                Some("a"),
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
                "4-byte sequence in 4 chunks",
                vec![b"\xf0", b"\x9f", b"\xa6", b"\x80\n"],
                vec!["🦀"],
                None,
                0,
            ),
            (
                "invalid utf-8 is lossy per line",
                vec![b"\xff\n\xc3\n"],
                vec!["\u{fffd}", "\u{fffd}"],
                None,
                0,
            ),
            (
                "a truncated sequence at the end",
                vec![b"ok\xe2\x82"],
                vec![],
                Some("ok\u{fffd}"),
                0,
            ),
            ("blank lines kept", vec![b"\n\n"], vec!["", ""], None, 0),
            (
                "exactly the bound",
                vec![b"0123456789\n"],
                vec!["0123456789"],
                None,
                0,
            ),
            (
                "one over the bound dropped",
                vec![b"0123456789a\nok\n"],
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
                "over-long in many chunks counted once",
                vec![b"012345678", b"9abcdef", b"0123", b"\n"],
                vec![],
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
                "two over-long lines",
                vec![b"0123456789ab\n0123456789ab\nok"],
                vec![],
                Some("ok"),
                2,
            ),
            (
                "the bound holds for the partial line",
                vec![b"0123456789", b"x"],
                vec![],
                None,
                1,
            ),
        ];
        for (name, chunks, want, last, dropped) in cases {
            let (lines, got_last, got_dropped) = split(10, &chunks);
            assert_eq!(lines, want, "{name}");
            assert_eq!(got_last.as_deref(), last, "{name}");
            assert_eq!(got_dropped, dropped, "{name}");
        }
    }

    #[test]
    fn an_over_long_line_of_noise_is_dropped_uncounted() {
        let noise = PiJson::default().noise();
        let update = format!(
            r#"{{"type":"message_update","partial":"{}"}}"#,
            "x".repeat(200)
        );
        let end = format!(
            r#"{{"type":"message_end","message":"{}"}}"#,
            "x".repeat(200)
        );
        for chunk in [update.len() + end.len() + 2, 7, 1] {
            let mut splitter = LineSplitter::new(100).with_noise(noise);
            let text = format!("{update}\n{end}\nok\n");
            let lines: Vec<String> = text
                .as_bytes()
                .chunks(chunk)
                .flat_map(|bytes| splitter.push(bytes))
                .collect();
            assert_eq!(lines, ["ok"], "chunks of {chunk}");
            assert_eq!(
                splitter.dropped(),
                1,
                "only message_end counts (chunks of {chunk})"
            );
        }
    }

    #[test]
    fn a_finished_splitter_starts_afresh() {
        let mut splitter = LineSplitter::new(4);
        assert!(splitter.push(b"toolong").is_empty());
        assert_eq!(splitter.finish(), None);
        assert_eq!(splitter.push(b"ok\n"), ["ok"]);
        assert_eq!(splitter.dropped(), 1);
    }

    #[test]
    fn claude_summaries() {
        let mut parser = ClaudeStreamJson::default();
        let mut tool = |input: Value| {
            let line = serde_json::json!({"type": "assistant", "message": {"content": [
                {"type": "tool_use", "id": "toolu_1", "name": "T", "input": input}]}});
            match parser.parse_line(&line.to_string()).as_slice() {
                [SessionEvent::Tool { summary, .. }] => summary.clone(),
                other => panic!("{other:?}"),
            }
        };
        let long = "é".repeat(130);
        let cases = [
            (
                "file_path first",
                serde_json::json!({"file_path": "/a", "path": "/b", "command": "c"}),
                "T: /a".to_owned(),
            ),
            (
                "then path",
                serde_json::json!({"path": "/b", "command": "c"}),
                "T: /b".to_owned(),
            ),
            (
                "then command",
                serde_json::json!({"command": "ls", "query": "q"}),
                "T: ls".to_owned(),
            ),
            (
                "then query",
                serde_json::json!({"query": "q"}),
                "T: q".to_owned(),
            ),
            (
                "a non-string is skipped",
                serde_json::json!({"file_path": 3, "query": "q"}),
                "T: q".to_owned(),
            ),
            (
                "no target",
                serde_json::json!({"pattern": "*.html"}),
                "T".to_owned(),
            ),
            ("no input object", Value::Null, "T".to_owned()),
            (
                "120 chars, not bytes",
                serde_json::json!({"command": long}),
                format!("T: {}", "é".repeat(120)),
            ),
            (
                "an empty target",
                serde_json::json!({"path": ""}),
                "T: ".to_owned(),
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(tool(input), want, "{name}");
        }
    }

    #[test]
    fn atelier_lines_table() {
        let text = |t: &str| SessionEvent::text(t);
        let tool = |name: &str, summary: &str| SessionEvent::Tool {
            name: name.to_owned(),
            summary: summary.to_owned(),
        };
        let cases: Vec<(&str, &str, Vec<SessionEvent>)> = vec![
            (
                "text",
                r#"{"type":"text","text":"Done: about page added."}"#,
                vec![text("Done: about page added.")],
            ),
            ("blank text", r#"{"type":"text","text":" \n"}"#, vec![]),
            (
                "text that is not a string",
                r#"{"type":"text","text":3}"#,
                vec![],
            ),
            (
                "a tool's target is its path",
                r#"{"type":"tool","id":"c1","name":"write","input":{"path":"about.html","content":"<p>About</p>\n"}}"#,
                vec![tool("write", "write: about.html")],
            ),
            (
                "else its pattern",
                r#"{"type":"tool","id":"c2","name":"glob","input":{"pattern":"**/*.html"}}"#,
                vec![tool("glob", "glob: **/*.html")],
            ),
            (
                "path before pattern",
                r#"{"type":"tool","id":"c3","name":"grep","input":{"pattern":"h1","path":"src"}}"#,
                vec![tool("grep", "grep: src")],
            ),
            (
                "no target",
                r#"{"type":"tool","id":"c4","name":"list","input":{}}"#,
                vec![tool("list", "list")],
            ),
            (
                "arguments that were not JSON",
                r#"{"type":"tool","id":"c5","name":"edit","input":"{\"path\": \"a"}"#,
                vec![tool("edit", "edit")],
            ),
            (
                "a tool without a name",
                r#"{"type":"tool","id":"c6","input":{}}"#,
                vec![],
            ),
            (
                "a tool result is the agent's log",
                r#"{"type":"tool_result","id":"c1","name":"write","ok":false,"error":"refused: symlink (evil)"}"#,
                vec![],
            ),
            (
                "a file change names its file",
                r#"{"type":"file_change","path":"src/index.html","kind":"modified"}"#,
                vec![SessionEvent::FileChange {
                    files: vec!["src/index.html".into()],
                }],
            ),
            (
                "an empty path",
                r#"{"type":"file_change","path":"","kind":"created"}"#,
                vec![],
            ),
            (
                "a path that is not a string",
                r#"{"type":"file_change","path":["a"]}"#,
                vec![],
            ),
            (
                "the result",
                r#"{"type":"result","stop":"end_turn","rounds":3,"usage":{"input_tokens":300,"output_tokens":30},"cost_usd":0.25,"duration_ms":1234,"resume":"0f3c9a1e5b7d2c4a6e8f0a1b3c5d7e9f"}"#,
                vec![finished(
                    Some("0f3c9a1e5b7d2c4a6e8f0a1b3c5d7e9f".into()),
                    Some(0.25),
                    1234,
                )],
            ),
            (
                "a result without a price, stopped at the round limit",
                r#"{"type":"result","stop":"max_turns","rounds":50,"usage":{"input_tokens":0,"output_tokens":0},"duration_ms":9,"resume":"ab_1"}"#,
                vec![
                    text(ROUND_LIMIT_NOTICE),
                    finished(Some("ab_1".into()), None, 9),
                ],
            ),
            (
                "a result cut at the output limit is said first",
                r#"{"type":"result","stop":"max_tokens","rounds":2,"usage":{"input_tokens":1,"output_tokens":9},"duration_ms":9,"resume":"ab_1"}"#,
                vec![
                    text(OUTPUT_LIMIT_NOTICE),
                    finished(Some("ab_1".into()), None, 9),
                ],
            ),
            (
                "an option-shaped resume is no token",
                r#"{"type":"result","duration_ms":-5,"resume":"--settings","cost_usd":"1"}"#,
                vec![finished(None, None, 0)],
            ),
            (
                "an error is said",
                r#"{"type":"error","reason":"provider","message":"the provider refused the request: 401","resume":"ab_1"}"#,
                vec![text(
                    "atelier-agent error (provider): the provider refused the request: 401",
                )],
            ),
            (
                "a warning is the agent's log",
                r#"{"type":"warning","message":"the dedalo_publication server did not answer"}"#,
                vec![],
            ),
            (
                "an unknown type",
                r#"{"type":"thinking","text":"hm"}"#,
                vec![],
            ),
            ("not JSON", "atelier-agent: warning", vec![]),
        ];
        for (name, line, want) in cases {
            let mut parser = AtelierJson::default();
            assert_eq!(parser.parse_line(line), want, "{name}");
            assert!(parser.finish().is_empty(), "{name}: the result is a line");
        }
    }

    #[test]
    fn an_atelier_error_line_fails_the_turn() {
        let mut parser = AtelierJson::default();
        parser.parse_line(r#"{"type":"text","text":"Working."}"#);
        assert_eq!(parser.failure(), None);
        parser.parse_line(
            r#"{"type":"error","reason":"resume_not_found","message":"no conversation ab_1"}"#,
        );
        assert_eq!(parser.failure(), Some("no conversation ab_1"));
        assert_eq!(parser.kept_after_failure(), None, "nothing was kept");
        let mut bare = AtelierJson::default();
        bare.parse_line(r#"{"type":"error"}"#);
        assert_eq!(bare.failure(), Some("the turn failed"));
        // A provider's fault after some work: the conversation so far was saved, and the next
        // message resumes it.
        let mut saved = AtelierJson::default();
        saved.parse_line(
            r#"{"type":"error","reason":"provider","message":"overloaded","resume":"ab_1"}"#,
        );
        assert_eq!(saved.failure(), Some("overloaded"));
        assert_eq!(saved.kept_after_failure(), Some("ab_1"));
        let mut forged = AtelierJson::default();
        forged.parse_line(r#"{"type":"error","message":"x","resume":"../../etc"}"#);
        assert_eq!(forged.kept_after_failure(), None, "not a token");
    }

    #[test]
    fn an_atelier_start_line_names_the_conversation_a_turn_without_a_result_keeps() {
        // Stopped (or killed) after its start: the conversation saved then is resumed.
        let mut stopped = AtelierJson::default();
        assert_eq!(
            stopped.parse_line(r#"{"type":"start","resume":"ab_1"}"#),
            []
        );
        stopped.parse_line(r#"{"type":"text","text":"Working."}"#);
        assert_eq!(stopped.kept_after_failure(), Some("ab_1"));
        assert_eq!(stopped.failure(), None);
        // A failure whose last save did not happen keeps the start's conversation.
        let mut unsaved = AtelierJson::default();
        unsaved.parse_line(r#"{"type":"start","resume":"ab_1"}"#);
        unsaved.parse_line(r#"{"type":"error","reason":"state_unavailable","message":"full"}"#);
        assert_eq!(unsaved.kept_after_failure(), Some("ab_1"));
        // A start line's resume is checked like any other.
        let mut forged = AtelierJson::default();
        forged.parse_line(r#"{"type":"start","resume":"--settings"}"#);
        assert_eq!(forged.kept_after_failure(), None, "not a token");
    }

    proptest::proptest! {
        /// No bytes panic a parser, the bound holds, and how the bytes are cut into chunks
        /// changes nothing.
        #[test]
        fn any_bytes_in_any_chunking(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            cuts in proptest::collection::vec(0usize..512, 0..12),
        ) {
            let (whole, whole_last, whole_dropped) = split(32, &[&bytes]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut from = 0;
            for cut in cuts {
                chunks.push(&bytes[from..cut]);
                from = cut;
            }
            chunks.push(&bytes[from..]);
            let (lines, last, dropped) = split(32, &chunks);
            proptest::prop_assert_eq!(&lines, &whole);
            proptest::prop_assert_eq!(&last, &whole_last);
            proptest::prop_assert_eq!(dropped, whole_dropped);
            let mut parsers = DriverId::ALL.map(line_parser);
            for line in lines.iter().chain(last.iter()) {
                // Lossy decoding at most triples a line (one replacement per byte).
                proptest::prop_assert!(line.len() <= 32 * 3);
                for parser in &mut parsers {
                    for event in parser.parse_line(line) {
                        proptest::prop_assert!(is_driver_event(&event), "{}", event.kind());
                    }
                }
            }
            for parser in &mut parsers {
                parser.finish();
            }
        }

        /// JSON-shaped input reaches deep into the parsers without a panic.
        #[test]
        fn json_shaped_lines(
            kind in proptest::sample::select(vec!["assistant", "result", "text", "tool_use", "step_finish", "error", "done", "session", "user", "tool", "tool_result", "file_change", "message_end", "agent_end"]),
            key in proptest::sample::select(vec!["text", "tool", "name", "input", "part", "session_id", "sessionID", "timestamp", "cost", "duration_ms", "total_cost_usd", "id", "error", "content", "message", "state", "path", "pattern", "resume", "cost_usd", "reason"]),
            value in proptest::sample::select(vec!["null", "1e308", "-1", "18446744073709551616", "\"--x\"", "\"ses_1\"", "[]", "{}", "[{\"type\":\"text\",\"text\":1}]", "{\"text\":\"x\",\"tool\":\"t\",\"cost\":1e308,\"state\":{\"input\":{\"filePath\":2}}}"]),
        ) {
            let line = format!("{{\"type\":\"{kind}\",\"{key}\":{value},\"message\":{{\"content\":[{{\"type\":\"tool_use\",\"name\":\"n\",\"input\":{{\"{key}\":{value}}}}}]}},\"part\":{{\"{key}\":{value}}}}}");
            for mut parser in DriverId::ALL.map(line_parser) {
                for event in parser.parse_line(&line).into_iter().chain(parser.finish()) {
                    if let SessionEvent::Result { resume_token: Some(token), .. } = &event {
                        proptest::prop_assert!(is_resume_token(token));
                    }
                }
            }
        }
    }
}
