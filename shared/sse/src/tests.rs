//! The reader's rules, each named, under every split of the reads; the lenient end a provider's
//! stream gets; the size bound.

use super::*;

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

/// Frames of a provider's stream, read in `chunks`, ended leniently as the model drivers do.
fn frames_of(chunks: &[&[u8]]) -> Vec<SseFrame> {
    let mut parser = SseParser::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        for item in parser.push(chunk).unwrap() {
            if let SseItem::Frame(frame) = item {
                frames.push(frame);
            }
        }
    }
    frames.extend(parser.take_unterminated());
    frames
}

/// A provider's stream of every shape: comments, CRLF, multi-line data, a lone-CR frame, an
/// id and event without data (not dispatched; the id is not the next frame's own), a bare
/// `data`, an unterminated last frame.
const STREAM: &str = ": comment\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\n\
    data: one\ndata:two\n\nevent:b\rdata: é€\r\rid: 7\nevent: c\n\n\n\n\
    retry: 5\n\ndata\n\ndata: tail";

fn provider_frames() -> Vec<SseFrame> {
    let frame = |event: Option<&str>, data: &str| SseFrame {
        id: None,
        event: event.map(str::to_owned),
        data: data.to_owned(),
    };
    vec![
        frame(Some("a"), "{\"x\":1}"),
        frame(None, "one\ntwo"),
        frame(Some("b"), "é€"),
        frame(None, ""),
        frame(None, "tail"),
    ]
}

#[test]
fn a_provider_stream_reads_the_same_under_every_split_and_keeps_its_unterminated_tail() {
    let bytes = STREAM.as_bytes();
    assert_eq!(frames_of(&[bytes]), provider_frames());
    for cut in 0..=bytes.len() {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(frames_of(&[a, b]), provider_frames(), "split at {cut}");
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(frames_of(&singles), provider_frames());
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
        assert_eq!(frames_of(&chunks), provider_frames());
    }
}

#[test]
fn the_done_sentinel_is_recognised_exactly() {
    let frames = frames_of(&[b"data: [DONE]\n\n"]);
    assert!(frames[0].is_done_sentinel());
    let spaced = frames_of(&[b"data: [DONE] \n\n"]);
    assert!(!spaced[0].is_done_sentinel());
}

#[test]
fn a_lenient_end_of_nothing_pending_gives_nothing_and_a_strict_end_names_the_cut() {
    assert!(frames_of(&[b""]).is_empty());
    assert!(frames_of(&[b": ping\n\n:\r\n\r\n"]).is_empty());
    let mut parser = SseParser::new();
    parser.push(b"id: 1\ndata: x").unwrap();
    assert!(parser.is_mid_frame());
    assert_eq!(parser.finish(), Err(SseError::Truncated));
    let frame = parser.take_unterminated().unwrap();
    assert_eq!((frame.id.as_deref(), frame.data.as_str()), (Some("1"), "x"));
    assert!(!parser.is_mid_frame());
    assert_eq!(parser.finish(), Ok(()));
}
