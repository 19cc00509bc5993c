//! Fuzzes an agent run's stdout: arbitrary bytes, cut into chunks chosen by the first byte,
//! through `LineSplitter` and every driver's parser (Claude Code, opencode, pi, atelier).
//! Checks: no panic, the line bound holds, the chunking changes no line, every event is one a
//! driver may say (text, tool, file change, result), and a resume token is always one an argv
//! may carry.
#![no_main]

use atelier_agents::{
    is_driver_event, is_resume_token, line_parser, DriverId, LineSplitter, SessionEvent,
};
use libfuzzer_sys::fuzz_target;

const MAX_LINE: usize = 256;

fn lines(chunks: &[&[u8]]) -> (Vec<String>, u64) {
    let mut splitter = LineSplitter::new(MAX_LINE);
    let mut lines = Vec::new();
    for chunk in chunks {
        lines.extend(splitter.push(chunk));
    }
    lines.extend(splitter.finish());
    (lines, splitter.dropped())
}

fuzz_target!(|data: &[u8]| {
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let chunked: Vec<&[u8]> = data.chunks(step).collect();
    let (got, dropped) = lines(&chunked);
    assert_eq!(
        (got.clone(), dropped),
        lines(&[data]),
        "the chunking changed the lines"
    );
    for driver in DriverId::ALL {
        let mut parser = line_parser(driver);
        let mut results = 0;
        let events = got
            .iter()
            .flat_map(|line| {
                // One replacement character (3 bytes) at most per input byte.
                assert!(line.len() <= 3 * MAX_LINE);
                parser.parse_line(line)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .chain(parser.finish());
        for event in events {
            assert!(is_driver_event(&event), "a parser made {}", event.kind());
            if let SessionEvent::Result { resume_token, .. } = &event {
                results += 1;
                if let Some(token) = resume_token {
                    assert!(is_resume_token(token), "{token:?}");
                }
            }
        }
        if driver == DriverId::Opencode {
            assert!(results <= 1, "one opencode result per run");
        }
    }
});
