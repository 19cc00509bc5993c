//! Promote and publish of a 10,000-file, 60 MB site, and of a one-file change on top of it,
//! for each [`Strategy`], reported as the median of a few runs and as a ratio to the full copy
//! measured in the same process (`cargo bench -p atelier-releases`).
//!
//! `ATELIER_BENCH_DIR` runs it on another filesystem (e.g. an XFS or btrfs mount, where reflink
//! works); `ATELIER_BENCH_REPS` sets the runs per measurement (default 3). Every promote ends
//! with the `syncfs` a real promote does, so the numbers include writing the data back.

#![expect(
    clippy::unwrap_used,
    reason = "a benchmark's setup failing must stop it"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atelier_fs::Root;
use atelier_releases::{publish, CopyStats, Store, Strategy};

/// One operation's results: its name and, per strategy, the median time and the stats.
type Row = (&'static str, Vec<(Strategy, Duration, CopyStats)>);

const FILES: usize = 10_000;
const TOTAL_BYTES: usize = 60 * 1000 * 1000; // 60 MB

fn main() {
    let base = std::env::var_os("ATELIER_BENCH_DIR").map(PathBuf::from);
    let reps: usize = std::env::var("ATELIER_BENCH_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let tmp = match &base {
        Some(dir) => tempfile::tempdir_in(dir).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let source = tmp.path().join("source");
    let bytes = write_site(&source);
    println!(
        "site: {FILES} files, {:.1} MB, on {} ({}); median of {reps} runs; each promote ends in syncfs",
        bytes as f64 / 1e6,
        tmp.path().display(),
        fs_name(tmp.path()),
    );

    let mut rows: Vec<Row> = vec![
        ("promote, full site", Vec::new()),
        ("publish, full site", Vec::new()),
        ("promote, one file changed", Vec::new()),
        ("publish, one file changed", Vec::new()),
    ];
    // Strategies interleaved within each run, so a change in the machine's load (the disk is
    // shared) shifts every strategy alike instead of whichever ran at that time.
    let mut samples: Vec<[Vec<(Duration, CopyStats)>; 4]> =
        Strategy::ALL.iter().map(|_| Default::default()).collect();
    for rep in 0..reps {
        for (index, strategy) in Strategy::ALL.into_iter().enumerate() {
            let web = tmp.path().join(format!("web-{}-{rep}", strategy.as_str()));
            for surface in ["pre", "web"] {
                std::fs::create_dir_all(web.join(".releases").join(surface)).unwrap();
                std::os::unix::fs::symlink(Path::new(".releases").join(surface), web.join(surface))
                    .unwrap();
            }
            let pre = Store::open(&web.join(".releases/pre"), &web.join("pre")).unwrap();
            let prod = Store::open(&web.join(".releases/web"), &web.join("web")).unwrap();
            let site = tmp.path().join(format!("site-{}-{rep}", strategy.as_str()));
            copy_plain(&source, &site);
            let runs = &mut samples[index];

            let promote = || {
                pre.promote(&Root::open(&site).unwrap(), strategy)
                    .unwrap()
                    .stats
            };
            runs[0].push(timed(promote));
            runs[1].push(timed(|| publish(&pre, &prod, strategy).unwrap().stats));
            std::fs::write(site.join("d7/f7.html"), b"<p>one changed file</p>\n").unwrap();
            let promote = || {
                pre.promote(&Root::open(&site).unwrap(), strategy)
                    .unwrap()
                    .stats
            };
            runs[2].push(timed(promote));
            runs[3].push(timed(|| publish(&pre, &prod, strategy).unwrap().stats));
            std::fs::remove_dir_all(&web).unwrap();
            std::fs::remove_dir_all(&site).unwrap();
        }
    }
    for (strategy, per_op) in Strategy::ALL.into_iter().zip(samples) {
        for (row, mut sample) in rows.iter_mut().zip(per_op) {
            sample.sort_by_key(|(t, _)| *t);
            let (t, stats) = sample[sample.len() / 2];
            row.1.push((strategy, t, stats));
        }
    }

    println!();
    println!(
        "{:<28} {:>16} {:>8}  files linked/cloned/copied",
        "operation", "strategy", "ms"
    );
    for (name, results) in &rows {
        let baseline = results
            .iter()
            .find(|(s, _, _)| *s == Strategy::Copy)
            .map(|(_, t, _)| t.as_secs_f64())
            .unwrap_or(f64::NAN);
        for (strategy, t, stats) in results {
            println!(
                "{name:<28} {:>16} {:>8.1}  {}/{}/{}  ({:.3}x copy)",
                strategy.as_str(),
                t.as_secs_f64() * 1000.0,
                stats.linked,
                stats.cloned,
                stats.copied,
                t.as_secs_f64() / baseline,
            );
        }
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

/// 10,000 files in 100 directories, sizes spread around 6 kB so the total is 60 MB; every
/// file's bytes differ (a counter), so nothing deduplicates by accident.
fn write_site(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mean = TOTAL_BYTES / FILES;
    for i in 0..FILES {
        // Sizes from mean/6 to 11·mean/6, averaging the mean.
        let size = mean / 6 + (i * 7919 % 1000) * mean * 10 / 6 / 999;
        let mut bytes = format!("file {i}\n").into_bytes();
        bytes.resize(size.max(bytes.len()), b'a' + (i % 26) as u8);
        let path = dir.join(format!("d{}/f{i}.html", i % 100));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        total += bytes.len() as u64;
    }
    total
}

fn copy_plain(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_plain(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The filesystem's name from `statfs`, for the report.
#[allow(
    clippy::unnecessary_cast,
    reason = "f_type is i64 on x86_64 but narrower on other targets"
)]
fn fs_name(path: &Path) -> String {
    let magic = rustix::fs::statfs(path)
        .map(|s| s.f_type as i64)
        .unwrap_or(0);
    match magic {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlayfs".into(),
        other => format!("filesystem magic {other:#x}"),
    }
}
