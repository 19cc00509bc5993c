//! Server-sent events as a client reads them: an incremental parser (fields `id`, `event`,
//! `data`, comments, CRLF/CR/LF line ends, frames split anywhere across reads) and
//! [`EventStream`], a `Stream` of a session's typed events over a response body.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use hyper::body::Body;

use crate::error::Error;
use crate::model::StoredEvent;

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

    /// Ends the stream: an error if a frame was begun and never dispatched. (The standard
    /// discards such a frame; a follower must know its stream was cut.)
    pub fn finish(&self) -> Result<(), SseError> {
        if self.line.is_empty() && !self.has_data && self.id.is_none() && self.event.is_none() {
            Ok(())
        } else {
            Err(SseError::Truncated)
        }
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

/// One item of a session's event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A stored event, with its `data:` text exactly as sent.
    Event {
        /// The event.
        event: StoredEvent,
        /// The frame's data, as received.
        raw: String,
    },
    /// An `event: error` frame (the replay failed); sited closes the stream after it.
    Error {
        /// Its data, as received.
        raw: String,
        /// Its data as JSON (`null` when it is not JSON).
        payload: serde_json::Value,
    },
}

/// A session's events over a response body, as a `Stream`. It ends when sited closes the
/// stream (after a `turn_end`, or at once when no turn is running after the replay); a stream
/// that breaks off mid-frame or with a transport error ends with [`Error::StreamLost`].
pub struct EventStream<B = hyper::body::Incoming> {
    body: B,
    parser: SseParser,
    ready: VecDeque<SseItem>,
    comments: u64,
    status: u16,
    done: bool,
}

impl<B> EventStream<B> {
    /// Reads `body`, the answer (with `status`) to `GET /v1/sessions/:id/events`.
    pub fn new(body: B, status: u16) -> Self {
        EventStream {
            body,
            parser: SseParser::new(),
            ready: VecDeque::new(),
            comments: 0,
            status,
            done: false,
        }
    }

    /// How many comments (keep-alives) were read so far.
    pub fn comments(&self) -> u64 {
        self.comments
    }

    /// The frame as an item; `None` for a frame of another event type.
    fn item(&self, frame: SseFrame) -> Option<Result<StreamItem, Error>> {
        let bad = |why: String| Error::BadResponse {
            status: self.status,
            why,
        };
        match frame.event.as_deref() {
            None | Some("message") => {}
            Some("error") => {
                let payload = serde_json::from_str(&frame.data).unwrap_or(serde_json::Value::Null);
                return Some(Ok(StreamItem::Error {
                    raw: frame.data,
                    payload,
                }));
            }
            Some(_) => return None,
        }
        let event: StoredEvent = match serde_json::from_str(&frame.data) {
            Ok(event) => event,
            Err(e) => {
                return Some(Err(bad(format!(
                    "a frame's data is not a stored event: {e}"
                ))))
            }
        };
        if let Some(id) = &frame.id {
            if *id != event.seq.to_string() {
                return Some(Err(bad(format!(
                    "a frame's id {id:?} is not its event's seq {}",
                    event.seq
                ))));
            }
        }
        Some(Ok(StreamItem::Event {
            event,
            raw: frame.data,
        }))
    }
}

impl<B> Stream for EventStream<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Item = Result<StreamItem, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            while let Some(item) = this.ready.pop_front() {
                match item {
                    SseItem::Comment(_) => this.comments += 1,
                    SseItem::Frame(frame) => {
                        if let Some(item) = this.item(frame) {
                            if item.is_err() {
                                this.done = true;
                                this.ready.clear();
                            }
                            return Poll::Ready(Some(item));
                        }
                    }
                }
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    if let Err(e) = this.parser.finish() {
                        return Poll::Ready(Some(Err(Error::StreamLost(e.to_string()))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(Error::StreamLost(e.to_string()))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers
                    };
                    match this.parser.push(&data) {
                        Ok(items) => this.ready.extend(items),
                        Err(e) => {
                            this.done = true;
                            return Poll::Ready(Some(Err(Error::StreamLost(e.to_string()))));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;

    fn frame(id: Option<&str>, event: Option<&str>, data: &str) -> SseItem {
        SseItem::Frame(SseFrame {
            id: id.map(str::to_owned),
            event: event.map(str::to_owned),
            data: data.to_owned(),
        })
    }

    fn comment(text: &str) -> SseItem {
        SseItem::Comment(text.to_owned())
    }

    /// Parses `text` fed in every split of the given chunk size.
    fn parse(text: &str, chunk: usize) -> Result<Vec<SseItem>, SseError> {
        let mut parser = SseParser::new();
        let mut items = Vec::new();
        for piece in text.as_bytes().chunks(chunk.max(1)) {
            items.extend(parser.push(piece)?);
        }
        parser.finish()?;
        Ok(items)
    }

    #[test]
    fn the_format_is_parsed_as_the_standard_says_whatever_the_read_sizes() {
        type Case = (&'static str, &'static str, Result<Vec<SseItem>, SseError>);
        let cases: Vec<Case> = vec![
            ("empty stream", "", Ok(vec![])),
            (
                "sited's frame",
                "id: 3\ndata: {\"seq\":3}\n\n",
                Ok(vec![frame(Some("3"), None, "{\"seq\":3}")]),
            ),
            (
                "two frames",
                "id: 0\ndata: a\n\nid: 1\ndata: b\n\n",
                Ok(vec![
                    frame(Some("0"), None, "a"),
                    frame(Some("1"), None, "b"),
                ]),
            ),
            (
                "keep-alive comment",
                ": ping\n\n",
                Ok(vec![comment("ping")]),
            ),
            (
                "comment without space",
                ":ping\n",
                Ok(vec![comment("ping")]),
            ),
            ("empty comment", ":\n", Ok(vec![comment("")])),
            (
                "CRLF line ends",
                "id: 1\r\ndata: x\r\n\r\n",
                Ok(vec![frame(Some("1"), None, "x")]),
            ),
            (
                "CR line ends",
                "id: 1\rdata: x\r\r",
                Ok(vec![frame(Some("1"), None, "x")]),
            ),
            (
                "mixed line ends",
                "data: a\r\ndata: b\rdata: c\n\r\n",
                Ok(vec![frame(None, None, "a\nb\nc")]),
            ),
            (
                "multi-line data",
                "data: a\ndata: b\n\n",
                Ok(vec![frame(None, None, "a\nb")]),
            ),
            (
                "no space after colon",
                "data:x\n\n",
                Ok(vec![frame(None, None, "x")]),
            ),
            (
                "only one space stripped",
                "data:  x\n\n",
                Ok(vec![frame(None, None, " x")]),
            ),
            (
                "colon in the value",
                "data: a: b\n\n",
                Ok(vec![frame(None, None, "a: b")]),
            ),
            (
                "field without colon",
                "data\n\n",
                Ok(vec![frame(None, None, "")]),
            ),
            (
                "empty data line",
                "data:\n\n",
                Ok(vec![frame(None, None, "")]),
            ),
            (
                "event type",
                "event: error\ndata: {\"reason\":\"replay_failed\"}\n\n",
                Ok(vec![frame(
                    None,
                    Some("error"),
                    "{\"reason\":\"replay_failed\"}",
                )]),
            ),
            ("no data, no dispatch", "id: 7\nevent: x\n\n", Ok(vec![])),
            (
                "unknown field ignored",
                "retry: 100\nfoo: bar\ndata: x\n\n",
                Ok(vec![frame(None, None, "x")]),
            ),
            (
                "id with NUL ignored",
                "id: 1\0\ndata: x\n\n",
                Ok(vec![frame(None, None, "x")]),
            ),
            (
                "leading BOM stripped",
                "\u{feff}data: x\n\n",
                Ok(vec![frame(None, None, "x")]),
            ),
            (
                "blank lines between frames",
                "\n\n\ndata: x\n\n\n",
                Ok(vec![frame(None, None, "x")]),
            ),
            (
                "comment inside a frame",
                "id: 2\n: ping\ndata: x\n\n",
                Ok(vec![comment("ping"), frame(Some("2"), None, "x")]),
            ),
            (
                "utf-8 data",
                "data: ¡olé! 😀\n\n",
                Ok(vec![frame(None, None, "¡olé! 😀")]),
            ),
            (
                "cut after data",
                "id: 1\ndata: x\n",
                Err(SseError::Truncated),
            ),
            (
                "cut mid line",
                "id: 1\ndata: {\"se",
                Err(SseError::Truncated),
            ),
            ("cut after id", "id: 1\n", Err(SseError::Truncated)),
        ];
        for (name, text, want) in &cases {
            for chunk in [1, 2, 3, 5, 7, 64, 4096] {
                assert_eq!(&parse(text, chunk), want, "{name}, chunks of {chunk}");
            }
        }
    }

    #[test]
    fn a_crlf_split_between_reads_ends_one_line() {
        let mut parser = SseParser::new();
        assert_eq!(parser.push(b"data: a\r").unwrap(), vec![]);
        assert_eq!(parser.push(b"\n\r").unwrap(), vec![frame(None, None, "a")]);
        assert_eq!(
            parser.push(b"\ndata: b\n\n").unwrap(),
            vec![frame(None, None, "b")]
        );
        assert_eq!(parser.last_event_id(), None);
    }

    #[test]
    fn the_last_event_id_survives_frames() {
        let mut parser = SseParser::new();
        parser.push(b"id: 4\ndata: a\n\ndata: b\n\n").unwrap();
        assert_eq!(parser.last_event_id(), Some("4"));
    }

    #[test]
    fn an_endless_line_is_refused_before_it_exhausts_memory() {
        let mut parser = SseParser::new();
        let block = vec![b'a'; 1024 * 1024];
        let mut refused = false;
        for _ in 0..=MAX_LINE_BYTES / block.len() {
            if parser.push(&block) == Err(SseError::TooLarge) {
                refused = true;
                break;
            }
        }
        assert!(refused);
        let mut parser = SseParser::new();
        let line = format!("data: {}\n", "a".repeat(1024 * 1024));
        let mut refused = false;
        for _ in 0..=MAX_LINE_BYTES / (1024 * 1024) {
            if parser.push(line.as_bytes()) == Err(SseError::TooLarge) {
                refused = true;
                break;
            }
        }
        assert!(refused, "many data lines are one frame's data");
    }

    /// A body that yields the given chunks, then ends (or fails).
    struct Chunks {
        chunks: VecDeque<Bytes>,
        fail_at_end: bool,
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = String;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, String>>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk)))),
                None if self.fail_at_end => {
                    self.fail_at_end = false;
                    Poll::Ready(Some(Err("connection reset".into())))
                }
                None => Poll::Ready(None),
            }
        }
    }

    fn stream(chunks: &[&str], fail_at_end: bool) -> EventStream<Chunks> {
        EventStream::new(
            Chunks {
                chunks: chunks.iter().map(|c| Bytes::from(c.to_string())).collect(),
                fail_at_end,
            },
            200,
        )
    }

    #[tokio::test]
    async fn the_stream_yields_stored_events_and_error_frames() {
        let mut events = stream(
            &[
                ": ping\n\nid: 0\ndata: {\"seq\":0,\"ts\":\"t\",\"body\":{\"type\":\"text\",",
                "\"text\":\"hi\"}}\n\nevent: other\ndata: x\n\nevent: error\ndata: {\"reason\":\"replay_failed\"}\n\n",
            ],
            false,
        );
        let first = events.next().await.unwrap().unwrap();
        let StreamItem::Event { event, raw } = first else {
            panic!("{first:?}");
        };
        assert_eq!(event.seq, 0);
        assert_eq!(event.kind(), Some("text"));
        assert_eq!(
            raw,
            r#"{"seq":0,"ts":"t","body":{"type":"text","text":"hi"}}"#
        );
        let second = events.next().await.unwrap().unwrap();
        assert_eq!(
            second,
            StreamItem::Error {
                raw: r#"{"reason":"replay_failed"}"#.into(),
                payload: serde_json::json!({"reason": "replay_failed"}),
            }
        );
        assert!(events.next().await.is_none());
        assert_eq!(events.comments(), 1);
    }

    #[tokio::test]
    async fn a_broken_stream_ends_in_stream_lost() {
        let cases: &[(&str, &[&str], bool)] = &[
            ("cut mid frame", &["id: 0\ndata: {\"seq\":0"], false),
            ("transport error", &["id: 0\n"], true),
        ];
        for (name, chunks, fail) in cases {
            let mut events = stream(chunks, *fail);
            let item = events.next().await.unwrap();
            assert!(
                matches!(item, Err(Error::StreamLost(_))),
                "{name}: {item:?}"
            );
            assert!(events.next().await.is_none(), "{name}");
        }
    }

    #[tokio::test]
    async fn frames_that_break_the_contract_are_refused() {
        let cases: &[(&str, &str)] = &[
            ("data not JSON", "id: 0\ndata: hello\n\n"),
            ("not a stored event", "id: 0\ndata: {\"seq\":0}\n\n"),
            (
                "id differs from seq",
                "id: 5\ndata: {\"seq\":0,\"ts\":\"t\",\"body\":{}}\n\n",
            ),
        ];
        for (name, text) in cases {
            let mut events = stream(&[text], false);
            let item = events.next().await.unwrap();
            assert!(
                matches!(item, Err(Error::BadResponse { .. })),
                "{name}: {item:?}"
            );
            assert!(events.next().await.is_none(), "{name}");
        }
    }
}
