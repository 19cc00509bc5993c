//! The one incremental reader of the `text/event-stream` format, for every stream Atelier
//! reads: a model provider's answer (`shared/llm`), a session's events as `atelierctl` and the
//! tests follow them. Bytes go in as they arrive, in reads split anywhere; what they complete
//! comes out: frames (`id`, `event`, `data`) and comments. Lines end at CRLF, LF or a lone CR
//! (also when the CR and the LF arrive in different reads); a leading byte-order mark is
//! stripped; several `data` lines join with `\n`; a frame without `data` is not dispatched (its
//! `id` still counts as the last one); `retry` and unknown fields are ignored. A line or a
//! frame's data larger than [`MAX_LINE_BYTES`] is refused, so a broken or hostile server cannot
//! exhaust memory.
//!
//! How a stream may end is the reader's to decide: [`SseParser::finish`] calls a stream cut
//! inside a frame an error (a follower must know it lost events), while
//! [`SseParser::take_unterminated`] hands out a last frame a server never closed with its blank
//! line (a provider's answer is used as far as it came).

/// The longest line (and the largest frame's data) a follower buffers: far above any event
/// sited writes, low enough that a broken server cannot exhaust memory.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseFrame {
    /// The frame's own `id:` field, when it had one.
    pub id: Option<String>,
    /// The `event:` field, when it had one (clients read no field as `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseFrame {
    /// Whether this is the `data: [DONE]` sentinel that ends OpenAI-style streams.
    pub fn is_done_sentinel(&self) -> bool {
        self.data == "[DONE]"
    }
}

/// What the parser hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event.
    Frame(SseFrame),
    /// A comment line (`: ping`), without the colon and one leading space.
    Comment(String),
}

/// Why a stream cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line or a frame's data grew past [`MAX_LINE_BYTES`].
    #[error("an event stream line or frame is larger than {MAX_LINE_BYTES} bytes")]
    TooLarge,
    /// The stream ended inside a frame.
    #[error("the event stream ended inside a frame")]
    Truncated,
}

/// The incremental parser of the `text/event-stream` format (the HTML standard's algorithm;
/// `retry:` and unknown fields are ignored).
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous byte ended a line with CR, so an LF right after belongs to it.
    after_cr: bool,
    /// The first line is not yet complete, so a byte-order mark may still be stripped.
    at_start: bool,
    id: Option<String>,
    event: Option<String>,
    data: String,
    has_data: bool,
    last_event_id: Option<String>,
}

// === impl SseParser ===

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser {
            at_start: true,
            ..SseParser::default()
        }
    }

    /// The last `id:` seen (what a reconnecting client would send as `Last-Event-ID`).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// Feeds the next bytes of the stream; returns what they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseItem>, SseError> {
        let mut items = Vec::new();
        let mut rest = bytes;
        while let Some((&byte, tail)) = rest.split_first() {
            rest = tail;
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    self.end_line(&mut items)?;
                }
                _ => {
                    // Copy the run up to the next line end at once.
                    let run = rest
                        .iter()
                        .position(|&b| b == b'\n' || b == b'\r')
                        .unwrap_or(rest.len());
                    if self.line.len() + 1 + run > MAX_LINE_BYTES {
                        return Err(SseError::TooLarge);
                    }
                    self.line.push(byte);
                    self.line.extend_from_slice(&rest[..run]);
                    rest = &rest[run..];
                }
            }
        }
        Ok(items)
    }

    /// Ends the stream strictly: an error if a frame was begun and never dispatched. (The
    /// standard discards such a frame; a follower must know its stream was cut.)
    pub fn finish(&self) -> Result<(), SseError> {
        if self.is_mid_frame() {
            Err(SseError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Whether a frame (or a line) was begun and not yet dispatched.
    pub fn is_mid_frame(&self) -> bool {
        !(self.line.is_empty() && !self.has_data && self.id.is_none() && self.event.is_none())
    }

    /// Ends the stream leniently: the last line and frame, if the server never ended them,
    /// dispatched as if it had. `None` when nothing with data was pending.
    pub fn take_unterminated(&mut self) -> Option<SseFrame> {
        let mut items = Vec::new();
        if !self.line.is_empty() {
            // A pending line is within the size bound: it was checked as it grew.
            let _ = self.end_line(&mut items);
        }
        self.dispatch(&mut items);
        self.after_cr = false;
        items.into_iter().rev().find_map(|item| match item {
            SseItem::Frame(frame) => Some(frame),
            SseItem::Comment(_) => None,
        })
    }

    fn end_line(&mut self, items: &mut Vec<SseItem>) -> Result<(), SseError> {
        // The line's buffer is lent out and given back, so its capacity is reused.
        let mut raw = std::mem::take(&mut self.line);
        let ended = self.field(&raw, items);
        raw.clear();
        self.line = raw;
        ended
    }

    fn field(&mut self, raw: &[u8], items: &mut Vec<SseItem>) -> Result<(), SseError> {
        let decoded = String::from_utf8_lossy(raw);
        let mut line: &str = &decoded;
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(items);
            return Ok(());
        }
        if let Some(comment) = line.strip_prefix(':') {
            let comment = comment.strip_prefix(' ').unwrap_or(comment);
            items.push(SseItem::Comment(comment.to_owned()));
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_LINE_BYTES {
                    return Err(SseError::TooLarge);
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // An id holding NUL is ignored, as the standard says.
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_owned());
                self.last_event_id = Some(value.to_owned());
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, items: &mut Vec<SseItem>) {
        let id = self.id.take();
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            // No data field: nothing is dispatched (the id still counts as the last one).
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        items.push(SseItem::Frame(SseFrame { id, event, data }));
    }
}

#[cfg(test)]
mod tests;
