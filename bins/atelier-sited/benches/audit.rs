//! `GET /v1/audit`'s default page (the newest 100 entries) read from a small audit log and from
//! a large one, in the same process: the ratio says whether reading the page grows with the
//! log. A filtered page for a site whose entries are spread evenly is measured the same way.
//!
//! Run: `cargo bench -p atelier-sited --bench audit` (ATELIER_BENCH_ENTRIES sets the large
//! log's size; 1,000,000 by default).

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark stops at the first broken fixture"
)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use atelier_site_api::Actor;
use atelier_sited::audit::{Audit, AuditEntry, AUDIT_FILE, DEFAULT_LIMIT};

const SMALL: usize = 1_000;
const DEFAULT_LARGE: usize = 1_000_000;
const READS: usize = 200;

fn main() {
    let large = std::env::var("ATELIER_BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_LARGE);
    let small_dir = tempfile::tempdir().unwrap();
    let large_dir = tempfile::tempdir().unwrap();
    write_log(small_dir.path(), SMALL);
    write_log(large_dir.path(), large);
    let (small, large_log) = (Audit::new(small_dir.path()), Audit::new(large_dir.path()));
    for (what, site) in [("default page", None), ("one site's page", Some("site3"))] {
        let base = p50(&small, site);
        let big = p50(&large_log, site);
        println!(
            "audit {what}: {SMALL} entries {:.3} ms; {large} entries {:.3} ms; ratio {:.2}x",
            base.as_secs_f64() * 1000.0,
            big.as_secs_f64() * 1000.0,
            big.as_secs_f64() / base.as_secs_f64(),
        );
    }
    // The same page the way every request read it before: the whole file, every line parsed.
    let started = Instant::now();
    let page = whole_file_page(large_dir.path());
    let whole = started.elapsed();
    assert_eq!(page, large_log.read(None, DEFAULT_LIMIT).unwrap());
    let paged = p50(&large_log, None);
    println!(
        "audit default page of {large} entries: whole-file read (the earlier way) {:.1} ms; backwards read {:.3} ms; {:.0}x faster",
        whole.as_secs_f64() * 1000.0,
        paged.as_secs_f64() * 1000.0,
        whole.as_secs_f64() / paged.as_secs_f64(),
    );
}

/// The default page as it was read before: every line of the file parsed, then the newest kept.
fn whole_file_page(dir: &Path) -> Vec<AuditEntry> {
    let file = std::fs::File::open(dir.join(AUDIT_FILE)).unwrap();
    let mut entries: Vec<AuditEntry> =
        std::io::BufRead::split(std::io::BufReader::new(file), b'\n')
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_slice(&line).ok())
            .collect();
    entries.reverse();
    entries.truncate(DEFAULT_LIMIT);
    entries
}

/// The median time of a page read.
fn p50(audit: &Audit, site: Option<&str>) -> Duration {
    let mut times: Vec<Duration> = (0..READS)
        .map(|_| {
            let started = Instant::now();
            let page = audit.read(site, DEFAULT_LIMIT).unwrap();
            assert_eq!(page.len(), DEFAULT_LIMIT);
            started.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[times.len() / 2]
}

/// An audit log of `entries` lines over ten sites, written as `record` writes them.
fn write_log(dir: &Path, entries: usize) {
    let file = std::fs::File::create(dir.join(AUDIT_FILE)).unwrap();
    let mut out = std::io::BufWriter::new(file);
    for n in 0..entries {
        let entry = AuditEntry {
            ts: "2026-12-04T12:00:00.000Z".to_owned(),
            actor: Actor {
                user_id: 7,
                username: "ana".to_owned(),
            },
            action: "session_message".to_owned(),
            site: Some(format!("site{}", n % 10)),
            detail: serde_json::json!({"session_id": "0f8fad5b-d9cb-469f-a165-70867728950e"}),
        };
        serde_json::to_writer(&mut out, &entry).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
}
