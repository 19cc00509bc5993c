//! Fuzzes sited's reader of atelier-build's stream: arbitrary bytes, split into chunks of a
//! size the input chooses, must never panic, and must decode to the same items and the same
//! verdict however they are split.
#![no_main]

use atelier_proto::build::{BuildReport, EventReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, stream)) = data.split_first() else {
        return;
    };
    let whole = decode(stream, stream.len().max(1));
    let chunked = decode(stream, usize::from(split).max(1));
    assert_eq!(whole, chunked, "chunking changed what was decoded");
});

/// The items (as their debug form), whether reading failed, and whether the end was clean.
fn decode(stream: &[u8], chunk: usize) -> (Vec<String>, bool, bool) {
    let mut reader = EventReader::new();
    let mut items = Vec::new();
    let mut failed = false;
    for piece in stream.chunks(chunk) {
        if reader.push(piece, &mut items).is_err() {
            failed = true;
            break;
        }
    }
    let mut report = BuildReport::new();
    for item in &items {
        report.record(item);
    }
    let _ = report.outcome();
    let debug = items.iter().map(|item| format!("{item:?}")).collect();
    (debug, failed, !failed && reader.finish().is_ok())
}
