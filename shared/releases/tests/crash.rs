//! Crash safety: a promote, then a prune, runs in a child process (this test binary re-run on
//! that one test, in child mode) and is SIGKILLed at a random moment, again and again. After
//! every kill the served link must name a complete release (or still the placeholder), every
//! listed release must be complete (a rollback may serve any of them), and the leftovers must
//! be ignored by listing and removed by the next promote.
//!
//! With `ATELIER_RELEASES_CRASH_CHILD` set the test is the child and runs one promote or
//! prune. `ATELIER_CRASH_SEED` replays a run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::support::{snapshot, Webspace};
use atelier_fs::Root;
use atelier_releases::{
    ReleaseId, Store, Strategy, LINK_TEMP_INFIX, PRUNING_PREFIX, STAGING_PREFIX,
};

const CHILD_ENV: &str = "ATELIER_RELEASES_CRASH_CHILD";

/// The test's name as the test binary's filter spells it, so a child runs only this test.
const TEST_NAME: &str = "crash::a_promote_killed_at_any_moment_leaves_only_complete_releases";

/// Kills to land at least this many times inside a promote (a staging leftover seen).
const WANT_MID_PROMOTE: usize = 8;

/// Kills at most; the test fails if the wanted landings did not happen by then.
const MAX_KILLS: usize = 200;

/// The prune test's name, as [`TEST_NAME`].
const PRUNE_TEST_NAME: &str = "crash::a_prune_killed_at_any_moment_lists_only_complete_releases";

/// Kills of the prune test to land inside a prune (a pruned release's leftover seen).
const WANT_MID_PRUNE: usize = 6;

/// Releases the prune test keeps in its store before each prune, which keeps one.
const PRUNE_STOCK: usize = 4;

#[test]
fn a_promote_killed_at_any_moment_leaves_only_complete_releases() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    parent();
}

/// One promote: `<store>\n<link>\n<source>\n<strategy>`.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split('\n').collect();
    let store = Store::open(Path::new(parts[0]), Path::new(parts[1])).unwrap();
    let strategy = Strategy::ALL
        .into_iter()
        .find(|s| s.as_str() == parts[3])
        .unwrap();
    store
        .promote(&Root::open(parts[2]).unwrap(), strategy)
        .unwrap();
}

fn parent() {
    let web = Webspace::new();
    let files = release_files();
    let files: Vec<(&str, usize)> = files.iter().map(|(p, n)| (p.as_str(), *n)).collect();
    let sources = [web.source("a", &files), web.source("b", &files)];
    let trees: Vec<BTreeMap<String, Vec<u8>>> = sources.iter().map(|s| snapshot(s)).collect();
    let store_dir = web.path().join(".releases/pre");
    let link = web.path().join("pre");
    let spawn = |source: &Path, strategy: Strategy| {
        let spec = format!(
            "{}\n{}\n{}\n{}",
            store_dir.display(),
            link.display(),
            source.display(),
            strategy.as_str()
        );
        // The harness's own report is noise here; a failed promote still tells on stderr.
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--test-threads=1", "--nocapture"])
            .env(CHILD_ENV, spec)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };

    // How long one unkilled promote of each strategy takes, process start included: the first
    // window its kills are drawn from. One calibration is not trusted for the whole run: the
    // machine may be busier while it is taken (other tests, the first exec of the binary) than
    // later, and then nearly every kill lands after the promote has finished. Each window
    // therefore follows what the kills find: a promote that finished first shrinks it, one
    // killed before it made anything grows it.
    let mut windows = Strategy::ALL.map(|strategy| {
        let calibration = Instant::now();
        assert!(spawn(&sources[0], strategy).wait().unwrap().success());
        calibration.elapsed()
    });
    let full = windows[0];

    let seed = seed();
    let mut rng = XorShift(seed);
    let mut verified: BTreeSet<ReleaseId> = BTreeSet::new();
    let (mut kills, mut mid_promote, mut completed) = (0usize, 0usize, 0usize);
    while kills < MAX_KILLS && (mid_promote < WANT_MID_PROMOTE || completed == 0) {
        let which = kills % 3;
        let strategy = Strategy::ALL[which];
        let before = leftover_names(&web.path(), &store_dir);
        let mut child = spawn(&sources[kills % 2], strategy);
        let delay = windows[which].mul_f64(rng.unit() * 1.3);
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().unwrap();
        kills += 1;
        // Inside a promote: this child left a staging directory or next-link of its own.
        let inside = !leftover_names(&web.path(), &store_dir).is_subset(&before);
        if status.success() {
            completed += 1;
            windows[which] = windows[which].mul_f64(0.85);
        } else if !inside {
            windows[which] = windows[which].mul_f64(1.1);
        }
        let context = format!("seed {seed}, kill {kills} after {delay:?} ({strategy:?})");

        // The served link: a complete release, never anything half-made.
        let store = Store::open(&store_dir, &link).unwrap();
        let served = store
            .current()
            .unwrap()
            .expect("calibration served a release");
        let served_tree = snapshot(&link);
        assert!(
            trees.contains(&served_tree),
            "{context}: {served} is not a complete release"
        );
        // Every release directory, listed or not yet checked, is complete.
        for id in store.list().unwrap() {
            if verified.insert(id.clone()) {
                let tree = snapshot(&store_dir.join(id.as_str()));
                assert!(
                    trees.contains(&tree),
                    "{context}: release {id} is incomplete"
                );
            }
        }
        if inside {
            mid_promote += 1;
        }
    }
    assert!(
        mid_promote >= WANT_MID_PROMOTE && completed > 0,
        "seed {seed}: {kills} kills, {mid_promote} mid-promote, {completed} completed"
    );

    // The next promote cleans every leftover and serves a complete release.
    let store = Store::open(&store_dir, &link).unwrap();
    let last = store
        .promote(&Root::open(&sources[1]).unwrap(), Strategy::default())
        .unwrap();
    assert!(leftover_names(&web.path(), &store_dir).is_empty());
    assert_eq!(store.current().unwrap(), Some(last.id));
    assert_eq!(snapshot(&link), trees[1]);
    println!(
        "crash: seed {seed}: {kills} kills ({mid_promote} inside a promote, {completed} after it \
         completed), {} releases, all complete; a promote takes {full:?}",
        verified.len() + 1
    );
}

#[test]
fn a_prune_killed_at_any_moment_lists_only_complete_releases() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (store, link) = spec.split_once('\n').unwrap();
        Store::open(Path::new(store), Path::new(link))
            .unwrap()
            .prune(1)
            .unwrap();
        return;
    }
    let web = Webspace::new();
    let files = release_files();
    let files: Vec<(&str, usize)> = files.iter().map(|(p, n)| (p.as_str(), *n)).collect();
    let source = web.source("a", &files);
    let tree = snapshot(&source);
    let store_dir = web.path().join(".releases/pre");
    let link = web.path().join("pre");
    let store = Store::open(&store_dir, &link).unwrap();
    let stock = |store: &Store| {
        while store.list().unwrap().len() < PRUNE_STOCK {
            store
                .promote(&Root::open(&source).unwrap(), Strategy::Copy)
                .unwrap();
        }
    };
    let spawn = || {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                PRUNE_TEST_NAME,
                "--test-threads=1",
                "--nocapture",
            ])
            .env(
                CHILD_ENV,
                format!("{}\n{}", store_dir.display(), link.display()),
            )
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let pruning = || -> Vec<String> {
        std::fs::read_dir(&store_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(PRUNING_PREFIX))
            .collect()
    };
    // The first window: one unkilled prune, process start included; then as in the promote
    // test, each window follows what the kills find.
    stock(&store);
    let calibration = Instant::now();
    assert!(spawn().wait().unwrap().success());
    let mut window = calibration.elapsed();
    let seed = seed();
    let mut rng = XorShift(seed);
    let (mut kills, mut mid_prune) = (0usize, 0usize);
    while kills < MAX_KILLS && mid_prune < WANT_MID_PRUNE {
        stock(&store);
        let mut child = spawn();
        let delay = window.mul_f64(rng.unit() * 1.3);
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().unwrap();
        kills += 1;
        let inside = !pruning().is_empty();
        // Finished: it exited, or was killed after its work (one release left) on its way out.
        let finished = status.success() || (!inside && store.list().unwrap().len() == 1);
        if finished {
            window = window.mul_f64(0.85);
        } else if !inside {
            window = window.mul_f64(1.1);
        }
        let context = format!("seed {seed}, kill {kills} after {delay:?}");
        // Every listed release is complete, and a rollback to it serves it whole.
        for id in store.list().unwrap() {
            assert_eq!(
                snapshot(&store_dir.join(id.as_str())),
                tree,
                "{context}: release {id} is listed but incomplete"
            );
        }
        if inside {
            mid_prune += 1;
            // The next promote removes what the prune left.
            store
                .promote(&Root::open(&source).unwrap(), Strategy::Copy)
                .unwrap();
            assert_eq!(pruning(), Vec::<String>::new(), "{context}");
        }
    }
    assert!(
        mid_prune >= WANT_MID_PRUNE,
        "seed {seed}: {kills} kills, {mid_prune} mid-prune"
    );
    let served = store.current().unwrap().expect("a release is served");
    assert_eq!(snapshot(&link), tree, "{served}");
    println!("crash: seed {seed}: {kills} kills of a prune ({mid_prune} inside it)");
}

/// The staging directories in the store and the next-links beside the served link.
fn leftover_names(webspace: &Path, store: &Path) -> BTreeSet<String> {
    let named = |dir: &Path, prefix: &str| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(prefix))
            .collect::<Vec<_>>()
    };
    let mut names = BTreeSet::new();
    names.extend(named(store, STAGING_PREFIX));
    names.extend(named(webspace, &format!("pre{LINK_TEMP_INFIX}")));
    names
}

/// The files of every release the tests make: 600 in 20 folders, of 2 to 5 kB.
fn release_files() -> Vec<(String, usize)> {
    (0..600)
        .map(|i| (format!("d{}/f{i}.html", i % 20), 2000 + i % 3000))
        .collect()
}

/// The run's seed: `ATELIER_CRASH_SEED`, to replay a run, else the clock's.
fn seed() -> u64 {
    std::env::var("ATELIER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

/// A small deterministic generator, so a failing seed can be replayed.
struct XorShift(u64);

impl XorShift {
    /// A number in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}
