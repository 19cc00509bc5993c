//! The peak resident memory of what runs in a family of units, for the agent benchmark: every
//! few milliseconds it finds the cgroups under `--root` whose name starts with
//! `--unit-prefix` and reads the high-water mark (`VmHWM`) of every process in them. When a
//! unit's cgroup is gone, or the stop file appears, it prints one line per unit:
//!
//! `peak unit=<cgroup name> first_seen_us=<wall clock µs> agent_kib=<n> shim_kib=<n> procs=<name:kib,…>`
//!
//! `agent_kib` sums the high-water marks of the unit's processes other than the shim (whose
//! cost every driver shares): an upper bound of their simultaneous peak, exact for a single
//! process. A process's mark only grows, so the last sample before it exits misses at most
//! one interval of growth.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;

/// The process name of the door's shim, counted apart from the agent's.
const SHIM: &str = "atelier-shim";

/// Sample the peak RSS of the processes of a family of units.
#[derive(Debug, Parser)]
struct Args {
    /// The cgroup tree to search, e.g. /sys/fs/cgroup.
    #[arg(long)]
    root: PathBuf,
    /// The start of the unit names to watch, e.g. atelier-example-s1-turn@.
    #[arg(long)]
    unit_prefix: String,
    /// Stop (printing what is still running) once this file exists.
    #[arg(long)]
    stop_file: PathBuf,
    /// How often to sample, in milliseconds.
    #[arg(long, default_value_t = 5)]
    interval_ms: u64,
}

/// What is known of one unit so far.
#[derive(Debug, Default)]
struct Unit {
    first_seen_us: u128,
    /// Per process id: its name and highest mark seen, in KiB.
    peaks: BTreeMap<u32, (String, u64)>,
}

impl Unit {
    fn line(&self, name: &str) -> String {
        let mut agent = 0;
        let mut shim = 0;
        let mut procs = Vec::new();
        for (process, kib) in self.peaks.values() {
            if process == SHIM {
                shim += kib;
            } else {
                agent += kib;
            }
            procs.push(format!("{process}:{kib}"));
        }
        format!(
            "peak unit={name} first_seen_us={} agent_kib={agent} shim_kib={shim} procs={}",
            self.first_seen_us,
            procs.join(",")
        )
    }
}

fn main() {
    let args = Args::parse();
    let mut units: BTreeMap<String, Unit> = BTreeMap::new();
    loop {
        let stopping = args.stop_file.exists();
        let mut present = Vec::new();
        find_units(&args.root, &args.unit_prefix, &mut present);
        for dir in &present {
            let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let unit = units.entry(name.to_owned()).or_insert_with(|| Unit {
                first_seen_us: now_us(),
                ..Unit::default()
            });
            sample(dir, unit);
        }
        let gone: Vec<String> = units
            .keys()
            .filter(|name| {
                stopping
                    || !present
                        .iter()
                        .any(|dir| dir.file_name().is_some_and(|n| n == name.as_str()))
            })
            .cloned()
            .collect();
        for name in gone {
            if let Some(unit) = units.remove(&name) {
                println!("{}", unit.line(&name));
            }
        }
        if stopping {
            return;
        }
        std::thread::sleep(Duration::from_millis(args.interval_ms));
    }
}

/// The cgroups under `dir` named `prefix…`, not looking inside a match.
fn find_units(dir: &Path, prefix: &str, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            found.push(path);
        } else {
            find_units(&path, prefix, found);
        }
    }
}

/// Reads the mark of every process in the cgroup `dir` (and its children) into `unit`.
fn sample(dir: &Path, unit: &mut Unit) {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            let Some((name, kib)) = high_water_mark(pid) else {
                continue;
            };
            let seen = unit.peaks.entry(pid).or_insert((name, 0));
            seen.1 = seen.1.max(kib);
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                sample(&entry.path(), unit);
            }
        }
    }
}

/// A process's name and `VmHWM` in KiB, if it still runs and has memory of its own.
fn high_water_mark(pid: u32) -> Option<(String, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .map(str::trim)
    };
    let name = field("Name:")?.to_owned();
    let kib = field("VmHWM:")?.strip_suffix("kB")?.trim().parse().ok()?;
    Some((name, kib))
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros())
}
