//! A real nginx serving a webspace's prod link while clients request continuously and 100
//! publish/rollback flips happen: zero failed responses and zero responses that are not
//! exactly one release's file (every file names its release first and last). Run for the
//! plain configuration (`disable_symlinks off`) and the provisioner's (`if_not_owner`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::support::{is_whole_file, tag_of, Webspace};
use atelier_fs::Root;
use atelier_releases::{publish, Store, Strategy};
use atelier_test_support::nginx::{Nginx, SymlinkPolicy};

/// Releases retained in prod, as a deployment would keep them (`RELEASES_RETAINED`).
const RETAINED: usize = 5;

const FILES: [(&str, usize); 4] = [
    ("index.html", 3000),
    ("assets/app.css", 800),
    ("assets/app.js", 40_000),
    ("about/index.html", 1200),
];

/// Client threads; the machine class has two cores, shared with nginx and the flips.
const CLIENTS: usize = 2;

#[test]
fn publish_and_rollback_flips_under_load_with_symlinks_followed() {
    flips_under_load(SymlinkPolicy::Off);
}

#[test]
fn publish_and_rollback_flips_under_load_with_the_provisioners_symlink_rule() {
    flips_under_load(SymlinkPolicy::IfNotOwner);
}

#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    failed: Vec<String>,
    mixed: u64,
    /// A page and its asset from two releases: inherent to per-request resolution of the link
    /// (each request sees one whole release), counted to show the flips landed mid-page.
    page_asset_skew: u64,
}

fn flips_under_load(policy: SymlinkPolicy) {
    let web = Webspace::new();
    let (pre, prod) = (web.preprod(), web.prod());
    let tags = ["build-a", "build-b"];
    let builds: Vec<_> = tags
        .iter()
        .map(|tag| {
            pre.promote(
                &Root::open(web.source(tag, &FILES)).unwrap(),
                Strategy::default(),
            )
            .unwrap()
            .id
        })
        .collect();
    let first = publish(&pre, &prod, Strategy::default()).unwrap();
    let nginx = Nginx::start(&web.path().join("web"), policy);
    let page = nginx.client().get("/").unwrap();
    assert_eq!(page.status, 200, "{}", nginx.error_log());
    assert_eq!(
        page.body,
        std::fs::read(web.path().join("pre/index.html")).unwrap()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let known: Arc<BTreeSet<String>> = Arc::new(tags.iter().map(|t| (*t).to_owned()).collect());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (stop, known, mut client) = (stop.clone(), known.clone(), nginx.client());
            std::thread::spawn(move || {
                let mut tally = Tally::default();
                while !stop.load(Ordering::Relaxed) {
                    let mut page_tag = None;
                    for path in ["/", "/assets/app.css", "/assets/app.js", "/about/"] {
                        tally.requests += 1;
                        match client.get(path) {
                            Ok(r) if r.status == 200 => {
                                let tag = tag_of(&r.body);
                                if !is_whole_file(&r.body) || !known.contains(&tag) {
                                    tally.mixed += 1;
                                }
                                match &page_tag {
                                    None => page_tag = Some(tag),
                                    Some(page) if *page != tag => tally.page_asset_skew += 1,
                                    Some(_) => {}
                                }
                            }
                            Ok(r) => tally.failed.push(format!("{path}: status {}", r.status)),
                            Err(e) => tally.failed.push(format!("{path}: {e}")),
                        }
                    }
                }
                tally
            })
        })
        .collect();

    // 100 flips: publish the other build (a new prod release), then roll back to the one
    // before it, pruning prod as a deployment does.
    let started = Instant::now();
    let mut served = first.release;
    for flip in 0..100 {
        if flip % 2 == 0 {
            pre.activate(builds[(flip / 2 + 1) % 2].as_str()).unwrap();
            let published = publish(&pre, &prod, Strategy::default()).unwrap();
            prod.prune(RETAINED).unwrap();
            served = published.release;
        } else {
            let previous = prod
                .list()
                .unwrap()
                .into_iter()
                .find(|id| *id != served)
                .unwrap();
            prod.activate(previous.as_str()).unwrap();
            served = previous;
        }
    }
    let flipping = started.elapsed();
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let mut total = Tally::default();
    for client in clients {
        let tally = client.join().unwrap();
        total.requests += tally.requests;
        total.failed.extend(tally.failed);
        total.mixed += tally.mixed;
        total.page_asset_skew += tally.page_asset_skew;
    }
    println!(
        "nginx ({policy:?}): 100 publish/rollback flips in {flipping:?}; {} requests, {} failed, \
         {} mixed, {} page/asset pairs straddling a flip",
        total.requests,
        total.failed.len(),
        total.mixed,
        total.page_asset_skew
    );
    assert!(
        total.failed.is_empty(),
        "{} failed, first: {:?}\n{}",
        total.failed.len(),
        total.failed.first(),
        nginx.error_log()
    );
    assert_eq!(total.mixed, 0);
    assert!(
        total.requests > 400,
        "the clients barely ran: {}",
        total.requests
    );

    // Afterwards nginx serves exactly the release prod's link names.
    let store = Store::open(&web.path().join(".releases/web"), &web.path().join("web")).unwrap();
    assert_eq!(store.current().unwrap(), Some(served.clone()));
    let mut client = nginx.client();
    for (rel, _) in FILES {
        let url = format!("/{rel}");
        let body = client.get(&url).unwrap().body;
        let on_disk = std::fs::read(
            web.path()
                .join(".releases/web")
                .join(served.as_str())
                .join(rel),
        )
        .unwrap();
        assert_eq!(body, on_disk, "{rel}");
    }
}
