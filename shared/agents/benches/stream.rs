//! Throughput of an agent run's stdout through `LineSplitter` and a driver's parser, against a
//! baseline in the same process: the same bytes split on `\n` and each line parsed into a
//! `serde_json::Value`, the least any JSON-lines reader pays. Reports the ratio (ours / the
//! baseline, lower is better) for the drivers' transcripts, in 64 KiB chunks as the shim
//! relays them and in 100-byte chunks (a slow writer).
//!
//! Run: `cargo bench -p atelier-agents --bench stream`.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use atelier_agents::{line_parser, DriverId, LineSplitter};

/// Copies of the transcript per measured pass (about 10 MiB for Claude Code's).
const COPIES: usize = 1000;
const PASSES: usize = 7;

fn transcript(driver: DriverId, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(driver.as_str())
        .join(name);
    let one = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    one.repeat(COPIES)
}

fn ours(driver: DriverId, bytes: &[u8], chunk: usize) -> usize {
    let mut splitter = LineSplitter::new(1 << 20);
    let mut parser = line_parser(driver);
    let mut events = 0;
    for piece in bytes.chunks(chunk) {
        for line in splitter.push(piece) {
            events += parser.parse_line(&line).len();
        }
    }
    events + parser.finish().len()
}

fn baseline(bytes: &[u8]) -> usize {
    bytes
        .split(|&b| b == b'\n')
        .filter(|line| serde_json::from_slice::<serde_json::Value>(line).is_ok())
        .count()
}

/// The median of `PASSES` timings of `f`.
fn median(mut f: impl FnMut() -> usize) -> Duration {
    let mut times: Vec<Duration> = (0..PASSES)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .collect();
    times.sort();
    times[PASSES / 2]
}

fn main() {
    println!("driver       chunk   MiB   ours ms  baseline ms  ratio  MiB/s");
    for (driver, name) in [
        (DriverId::ClaudeCode, "site_edit.jsonl"),
        (DriverId::Opencode, "site_edit.jsonl"),
        (DriverId::Atelier, "site_edit.jsonl"),
    ] {
        let bytes = transcript(driver, name);
        let base = median(|| baseline(&bytes));
        for chunk in [64 * 1024, 100] {
            let time = median(|| ours(driver, &bytes, chunk));
            let mib = bytes.len() as f64 / (1024.0 * 1024.0);
            println!(
                "{:<12} {:>6} {:>5.1} {:>9.1} {:>12.1} {:>6.2} {:>6.0}",
                driver.as_str(),
                chunk,
                mib,
                time.as_secs_f64() * 1e3,
                base.as_secs_f64() * 1e3,
                time.as_secs_f64() / base.as_secs_f64(),
                mib / time.as_secs_f64(),
            );
        }
    }
}
