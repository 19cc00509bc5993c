//! Publish and rollback under load: while two keep-alive clients fetch production's page,
//! stylesheet and script from a real nginx on the rendered vhost, 100 publish/rollback flips
//! through sited's routes produce no failed response, no file that is not one whole release's,
//! and no page whose assets come from another release when no flip was under way.
//!
//! Each build stamps one fresh id into the first and last line of every file it serves (the
//! scripted agent writes that build step). A client brackets each page-and-assets fetch with
//! reads of a flip epoch the flipper bumps before it sends a flip and after sited answers:
//! an unchanged, even epoch proves no flip ran meanwhile, so the three files must carry the
//! stamp of the release sited last said it serves. After each flip the flipper waits until
//! the clients have checked such quiet triples against the new release, so every one of the
//! 101 served states is verified. Triples that overlap a flip may straddle it (each request
//! resolves the link once) and are only counted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use atelier_site_client::model::BuildOutcome;
use atelier_site_client::{Client, Id, NewSite, Slug, TurnState};
use atelier_test_support::nginx::{Nginx, WebClient};

use crate::support::instance::{Instance, RELEASES_RETAINED};
use crate::support::journey::{
    build, end_state, follow_to_end, release_prompt, stamp_of, when_free,
};

const PROD: &str = "alpha.example.org";
const FLIPS: usize = 100;
/// Concurrent clients: the machine has two cores, shared with nginx, sited and the flips.
const CLIENTS: usize = 2;
/// The most requests one client makes, so the load is bounded whatever the machine's speed.
const MAX_REQUESTS_PER_CLIENT: u64 = 300_000;
const FILES: [&str; 3] = ["/", "/style.css", "/main.js"];

fn alpha() -> Slug {
    Slug::parse("alpha").unwrap()
}

/// A turn writing a release titled `title`, its build, and its publish; returns the production
/// release and the stamp its files carry.
async fn release(
    client: &Client,
    nginx: &Nginx,
    session: &mut Option<Id>,
    title: &str,
) -> (Id, String) {
    let slug = alpha();
    let prompt = release_prompt(title);
    let after = match session {
        None => {
            *session = Some(
                when_free(|| client.start_session(&slug, &prompt, None))
                    .await
                    .unwrap(),
            );
            -1
        }
        Some(id) => {
            let seen = follow_to_end(client, id, -1).await;
            when_free(|| client.send_message(id, &prompt))
                .await
                .unwrap();
            seen.last().unwrap().seq as i64
        }
    };
    let id = session.clone().unwrap();
    let events = follow_to_end(client, &id, after).await;
    assert_eq!(end_state(events.last().unwrap()), Some(TurnState::Idle));
    let built = build(client, &slug).await;
    assert_eq!(built.record.outcome, BuildOutcome::Success, "{}", built.log);
    let published = when_free(|| client.publish(&slug, None)).await.unwrap();
    let page = nginx.get(PROD, "/").await;
    assert_eq!(page.status, 200, "{}", nginx.error_log());
    assert!(page.text().contains(&format!("<h1>{title}</h1>")));
    let stamp = stamp_of(&page.body).expect("a stamped page");
    (Id::parse("release", &published.release).unwrap(), stamp)
}

/// What one client saw.
#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    failed: Vec<String>,
    /// Files that are not one whole, known release's.
    torn: Vec<String>,
    /// Triples fetched while no flip ran whose stamps are not the served release's.
    mixed: Vec<String>,
    quiet: u64,
    straddling: u64,
}

/// The flip epoch (odd while a flip is under way), and per served state (epoch / 2) the
/// stamp served and how many quiet triples were checked against it.
struct Flips {
    epoch: AtomicU64,
    served: Mutex<Vec<(String, u64)>>,
    requests: AtomicU64,
    stop: AtomicBool,
}

impl Flips {
    fn checks(&self, state: usize) -> u64 {
        self.served.lock().unwrap()[state].1
    }

    /// Waits until `state` was checked by `CLIENTS` quiet triples.
    async fn await_checks(&self, state: usize) {
        let deadline = Instant::now() + crate::support::WAIT;
        while self.checks(state) < CLIENTS as u64 {
            assert!(
                Instant::now() < deadline,
                "no quiet triple checked state {state}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

fn load(port: u16, flips: &Flips, known: &[String; 2]) -> Tally {
    let mut client = WebClient::new(port, PROD);
    let mut tally = Tally::default();
    while !flips.stop.load(Ordering::SeqCst) && tally.requests < MAX_REQUESTS_PER_CLIENT {
        let before = flips.epoch.load(Ordering::SeqCst);
        let mut stamps = Vec::new();
        for path in FILES {
            tally.requests += 1;
            flips.requests.fetch_add(1, Ordering::SeqCst);
            match client.get(path) {
                Ok(r) if r.status == 200 => match stamp_of(&r.body) {
                    Some(stamp) if known.contains(&stamp) => stamps.push(stamp),
                    _ => tally.torn.push(format!("{path}: {:?}", r.text())),
                },
                Ok(r) => tally.failed.push(format!("{path}: status {}", r.status)),
                Err(e) => tally.failed.push(format!("{path}: {e}")),
            }
        }
        let after = flips.epoch.load(Ordering::SeqCst);
        if stamps.len() < FILES.len() {
            continue;
        }
        if before == after && before % 2 == 0 {
            tally.quiet += 1;
            let expected = {
                let mut served = flips.served.lock().unwrap();
                let state = &mut served[(before / 2) as usize];
                state.1 += 1;
                state.0.clone()
            };
            if stamps.iter().any(|s| *s != expected) {
                tally
                    .mixed
                    .push(format!("epoch {before}: {stamps:?}, serving {expected}"));
            }
        } else {
            tally.straddling += 1;
        }
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_rollback_flips_under_load_serve_only_whole_releases() {
    // The flag repeats the declared retention, which sited's env reading drops (see
    // publishing.rs): the rollback target must survive 50 publishes.
    let retained = RELEASES_RETAINED.to_string();
    let instance = Instance::start_with(
        &[("alpha", PROD)],
        serde_json::json!({"releases_retained": RELEASES_RETAINED}),
        &["--releases-retained", &retained],
    );
    let nginx = Nginx::serve(instance.vhosts());
    let ana = instance.client(42, "ana");
    ana.create_site(NewSite {
        slug: alpha(),
        name: "Alpha".into(),
        domain: PROD.into(),
        template: Some("basic".into()),
        driver: None,
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", instance.sited_log()));
    let mut session = None;
    let (release_a, stamp_a) = release(&ana, &nginx, &mut session, "Release A").await;
    let (_, stamp_b) = release(&ana, &nginx, &mut session, "Release B").await;
    assert_ne!(stamp_a, stamp_b);
    // Preproduction now holds B, so each publish serves B and each rollback A.
    let setup_requests = 2;

    let flips = Arc::new(Flips {
        epoch: AtomicU64::new(0),
        served: Mutex::new(vec![(stamp_b.clone(), 0)]),
        requests: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let known = [stamp_a.clone(), stamp_b.clone()];
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (flips, known, port) = (Arc::clone(&flips), known.clone(), nginx.port());
            std::thread::spawn(move || load(port, &flips, &known))
        })
        .collect();
    flips.await_checks(0).await;

    let slug = alpha();
    let started = Instant::now();
    let requests_before = flips.requests.load(Ordering::SeqCst);
    let mut last = String::new();
    for flip in 0..FLIPS {
        flips.epoch.fetch_add(1, Ordering::SeqCst);
        let (served, stamp) = if flip % 2 == 0 {
            (ana.rollback(&slug, &release_a).await, &stamp_a)
        } else {
            (ana.publish(&slug, None).await, &stamp_b)
        };
        let served = served.unwrap_or_else(|e| panic!("flip {flip}: {e}"));
        flips.served.lock().unwrap().push((stamp.clone(), 0));
        flips.epoch.fetch_add(1, Ordering::SeqCst);
        last = served.release;
        flips.await_checks(flip + 1).await;
    }
    let flipping = started.elapsed();
    let during = flips.requests.load(Ordering::SeqCst) - requests_before;
    flips.stop.store(true, Ordering::SeqCst);
    let mut total = Tally::default();
    for client in clients {
        let tally = client.join().unwrap();
        total.requests += tally.requests;
        total.failed.extend(tally.failed);
        total.torn.extend(tally.torn);
        total.mixed.extend(tally.mixed);
        total.quiet += tally.quiet;
        total.straddling += tally.straddling;
    }
    println!(
        "{FLIPS} publish/rollback flips through sited in {flipping:?} under load: {} requests \
         to nginx ({during} during the flips), {} failed, {} torn, {} mixed; {} page+assets \
         triples checked with no flip under way, {} overlapping a flip",
        total.requests,
        total.failed.len(),
        total.torn.len(),
        total.mixed.len(),
        total.quiet,
        total.straddling
    );
    assert!(
        total.failed.is_empty(),
        "{} failed, first {:?}\n{}",
        total.failed.len(),
        total.failed.first(),
        nginx.error_log()
    );
    for (what, found) in [("torn", &total.torn), ("mixed", &total.mixed)] {
        assert!(
            found.is_empty(),
            "{} {what}, first: {:?}",
            found.len(),
            &found[..found.len().min(3)]
        );
    }
    assert!(
        during >= FLIPS as u64,
        "the clients kept requesting while the flips ran: {during}"
    );
    assert!(
        total.quiet >= ((FLIPS + 1) * CLIENTS) as u64,
        "every served state was checked: {}",
        total.quiet
    );

    // sited and nginx agree on what production serves at the end: B, from the last publish.
    let releases = ana.releases(&slug).await.unwrap();
    assert_eq!(releases.current.as_deref(), Some(last.as_str()));
    assert!(releases.releases.contains(&release_a.as_str().to_owned()));
    let page = nginx.get(PROD, "/").await;
    assert_eq!(stamp_of(&page.body), Some(stamp_b));

    // nginx's own log: every production request was answered 200, and it saw each one.
    let logged = nginx.stop();
    let prod: Vec<_> = logged.iter().filter(|l| l.host == PROD).collect();
    assert_eq!(
        prod.len() as u64,
        total.requests + setup_requests + 1,
        "nginx logged every request the clients counted"
    );
    let refused: Vec<_> = prod.iter().filter(|l| l.status != 200).collect();
    assert!(refused.is_empty(), "{refused:?}");
}
