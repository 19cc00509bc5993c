//! The one incremental Server-Sent Events parser every driver reads its stream with.
//!
//! Bytes go in as they arrive, complete frames come out. Lines end at CRLF, LF or a lone CR
//! (a CR at the end of one chunk and an LF at the start of the next are one line end); a
//! blank line ends a frame; lines starting with `:` are comments. Only `event`, `data` and
//! `id` are kept; several `data` lines are joined with `\n`. A frame with neither `event` nor
//! `data` is skipped, and an unterminated last frame is returned by [`SseParser::finish`].

/// One parsed SSE frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event` field, if any.
    pub event: Option<String>,
    /// The `data` lines joined with `\n`, if there was any `data` line.
    pub data: Option<String>,
    /// The `id` field, if any.
    pub id: Option<String>,
}

impl SseFrame {
    /// Whether this is the `data: [DONE]` sentinel that ends OpenAI-style streams.
    pub fn is_done_sentinel(&self) -> bool {
        self.data.as_deref() == Some("[DONE]")
    }
}

/// An incremental SSE parser; see the module docs for the rules.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being read (decoded only once complete, so a UTF-8 sequence split
    /// across chunks is never cut).
    line: Vec<u8>,
    /// The previous chunk ended in CR: an LF opening this one belongs to that line end.
    skip_lf: bool,
    frame: SseFrame,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `bytes` and returns the frames they completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseFrame> {
        let mut frames = Vec::new();
        for &byte in bytes {
            if std::mem::take(&mut self.skip_lf) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\r' => {
                    self.skip_lf = true;
                    self.end_line(&mut frames);
                }
                b'\n' => self.end_line(&mut frames),
                _ => self.line.push(byte),
            }
        }
        frames
    }

    /// Ends the stream: returns the unterminated last frame, if it holds anything.
    pub fn finish(&mut self) -> Option<SseFrame> {
        let mut frames = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut frames);
        }
        self.end_line(&mut frames);
        self.skip_lf = false;
        frames.pop()
    }

    fn end_line(&mut self, frames: &mut Vec<SseFrame>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            let frame = std::mem::take(&mut self.frame);
            if frame.event.is_some() || frame.data.is_some() {
                frames.push(frame);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let line = String::from_utf8_lossy(&line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.frame.event = Some(value.to_owned()),
            "data" => match &mut self.frame.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.frame.data = Some(value.to_owned()),
            },
            "id" => self.frame.id = Some(value.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(event: Option<&str>, data: Option<&str>) -> SseFrame {
        SseFrame {
            event: event.map(str::to_owned),
            data: data.map(str::to_owned),
            id: None,
        }
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseFrame> {
        let mut parser = SseParser::new();
        let mut frames = Vec::new();
        for chunk in chunks {
            frames.extend(parser.push(chunk));
        }
        frames.extend(parser.finish());
        frames
    }

    const STREAM: &str = ": comment\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\n\
        data: one\ndata:two\n\nevent:b\rdata: é€\r\rid: 7\nevent: c\n\n\n\n\
        retry: 5\n\ndata\n\ndata: tail";

    fn expected() -> Vec<SseFrame> {
        let mut with_id = frame(Some("c"), None);
        with_id.id = Some("7".to_owned());
        vec![
            frame(Some("a"), Some("{\"x\":1}")),
            frame(None, Some("one\ntwo")),
            frame(Some("b"), Some("é€")),
            with_id,
            frame(None, Some("")),
            frame(None, Some("tail")),
        ]
    }

    #[test]
    fn parses_line_endings_comments_multiline_data_and_trailing_frame() {
        assert_eq!(parse_all(&[STREAM.as_bytes()]), expected());
    }

    #[test]
    fn every_split_position_gives_the_same_frames() {
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(parse_all(&[a, b]), expected(), "split at {cut}");
        }
    }

    #[test]
    fn byte_at_a_time_and_pseudo_random_chunkings_agree() {
        let bytes = STREAM.as_bytes();
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_all(&singles), expected());
        // A small deterministic generator: chunk sizes 1..=7 in varying sequences.
        let mut seed = 0x2545_f491_u32;
        for _ in 0..500 {
            let mut chunks = Vec::new();
            let mut rest = bytes;
            while !rest.is_empty() {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let take = (seed % 7 + 1) as usize;
                let (head, tail) = rest.split_at(take.min(rest.len()));
                chunks.push(head);
                rest = tail;
            }
            assert_eq!(parse_all(&chunks), expected());
        }
    }

    #[test]
    fn done_sentinel_is_recognised() {
        let frames = parse_all(&[b"data: [DONE]\n\n"]);
        assert!(frames[0].is_done_sentinel());
        assert!(!frame(None, Some("[DONE] ")).is_done_sentinel());
    }

    #[test]
    fn empty_and_comment_only_input_yields_nothing() {
        assert!(parse_all(&[b""]).is_empty());
        assert!(parse_all(&[b": ping\n\n:\r\n\r\n"]).is_empty());
    }
}
