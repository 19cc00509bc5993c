//! The shared SSE reader over any bytes from a server (a model provider, sited), in any reads:
//! it never panics, a read split anywhere gives what one read gives, nothing it hands out is
//! larger than its bound, and its strict and lenient ends agree about a cut-off frame.

#![no_main]

use atelier_sse::{SseItem, SseParser, MAX_LINE_BYTES};
use libfuzzer_sys::fuzz_target;

fn read(chunks: &[&[u8]]) -> (Result<Vec<SseItem>, String>, bool, Option<String>) {
    let mut parser = SseParser::new();
    let mut items = Vec::new();
    for chunk in chunks {
        match parser.push(chunk) {
            Ok(more) => items.extend(more),
            Err(e) => return (Err(e.to_string()), false, None),
        }
    }
    let mid = parser.is_mid_frame();
    assert_eq!(parser.finish().is_err(), mid);
    let tail = parser.take_unterminated().map(|frame| frame.data);
    assert!(parser.finish().is_ok(), "the lenient end leaves nothing begun");
    (Ok(items), mid, tail)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = read(&[body]);
    let at = usize::from(cut) * body.len() / 256;
    let (a, b) = body.split_at(at);
    assert_eq!(read(&[a, b]), whole, "a read split at {at} changed the stream");
    if let (Ok(items), _, _) = &whole {
        for item in items {
            if let SseItem::Frame(frame) = item {
                assert!(frame.data.len() <= MAX_LINE_BYTES);
            }
        }
    }
});
