//! sited's metrics scraped from its metrics socket while real work happens: a turn held open
//! while its events are followed, then stopped; a turn to idle; a turn whose agent fails; a
//! build; the site's create and delete. Every series is compared whole after each step, so a counter that moves twice, or
//! moves for something that did not happen, fails as surely as one that does not move.

use std::collections::BTreeMap;

use atelier_sited::live_status;
use http_body_util::BodyExt as _;
use hyper::Method;
use serde_json::{json, Value};

use super::{actor, build, exchange, instance, last_seq, support, Contract, Instance, WAIT};

/// The series a scrape reports, `name{labels}` to value. A histogram's buckets and sum depend
/// on the clock and are read apart ([`build_duration`]).
type Series = BTreeMap<String, f64>;

/// Scrapes the metrics socket as a monitoring agent would.
async fn scrape(instance: &Instance) -> String {
    let wire = exchange(&instance.metrics_socket, "GET", "/metrics", None, b"", 0).await;
    assert_eq!(wire.status, 200, "{}", wire.text());
    wire.text()
}

/// The samples of `text`, histogram buckets and sums left out.
fn series(text: &str) -> Series {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| !line.contains("_bucket{") && !line.contains("_sum"))
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// The series sited reports with the values given, and every unlabelled one at zero otherwise.
fn expected(moved: &[(&str, f64)]) -> Series {
    let mut all: Series = [
        "atelier_sited_turns_started_total",
        "atelier_sited_turns_running",
        "atelier_sited_sse_followers",
        "atelier_sited_sites",
    ]
    .into_iter()
    .map(|name| (name.to_owned(), 0.0))
    .collect();
    all.extend(
        moved
            .iter()
            .map(|(name, value)| ((*name).to_owned(), *value)),
    );
    all
}

/// The build duration histogram's buckets (upper bound to count) and sum for `outcome`.
fn build_duration(text: &str, outcome: &str) -> (Vec<(String, f64)>, f64) {
    let bucket = "atelier_sited_build_duration_seconds_bucket{le=\"";
    let labels = format!("\",outcome=\"{outcome}\"}} ");
    let buckets = text
        .lines()
        .filter_map(|line| line.strip_prefix(bucket))
        .filter_map(|rest| {
            let (le, count) = rest.split_once(labels.as_str())?;
            Some((le.to_owned(), count.parse().unwrap()))
        })
        .collect();
    let sum_name = format!("atelier_sited_build_duration_seconds_sum{{outcome=\"{outcome}\"}} ");
    let sum = text
        .lines()
        .find_map(|line| line.strip_prefix(sum_name.as_str()))
        .map_or(f64::NAN, |sum| sum.parse().unwrap());
    (buckets, sum)
}

/// Sends a follow-up and reads its events to the stream's end; returns the last `seq`.
async fn follow_up(instance: &Instance, id: &str, message: &str, after: i64) -> (i64, Vec<Value>) {
    let path = format!("/v1/sessions/{id}/messages");
    let sent = instance
        .call(
            Method::POST,
            &path,
            json!({"message": message, "actor": actor()}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text());
    let wire = instance.follow(id, after).await;
    let events = super::parse_event_stream(&wire.text(), &mut Vec::new());
    instance.wait_free("alpha").await;
    (last_seq(&events), events)
}

fn turn_end(events: &[Value]) -> &Value {
    &events.last().unwrap()["body"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_socket_counts_turns_builds_and_followers_by_exactly_what_happened() {
    let instance = instance(&[("alpha", "alpha.example.org")], |_, _| {}).await;
    assert_eq!(series(&scrape(&instance).await), expected(&[]));
    assert_eq!(
        instance.create("alpha", "alpha.example.org").await.status,
        201
    );
    // From here on the instance has its one site.
    let with_site = |moved: &[(&str, f64)]| {
        let mut all = expected(moved);
        all.insert("atelier_sited_sites".to_owned(), 1.0);
        all
    };
    assert_eq!(series(&scrape(&instance).await), with_site(&[]));

    // A turn that hangs, its events followed: it runs, it is followed, and the gauge reads
    // what the daemon's STATUS= line says.
    let started = instance
        .start_session("alpha", json!({"prompt": "hang"}))
        .await;
    assert_eq!(started.status, 201, "{}", started.text());
    let id = started.json()["session_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/sessions/{id}/events?after=-1");
    let stream = support::open(&instance.socket, Method::GET, &path, "").await;
    assert_eq!(stream.status(), 200);
    let text = scrape(&instance).await;
    assert_eq!(
        series(&text),
        with_site(&[
            ("atelier_sited_turns_started_total", 1.0),
            ("atelier_sited_turns_running", 1.0),
            ("atelier_sited_sse_followers", 1.0),
        ]),
        "{text}"
    );
    assert_eq!(
        live_status("test", instance.router.sites().reservations()),
        "serving instance test: 1 turn and 0 builds running"
    );
    let stop = format!("/v1/sessions/{id}/stop");
    let stopped = instance
        .call(Method::POST, &stop, json!({"actor": actor()}))
        .await;
    assert_eq!(stopped.status, 200, "{}", stopped.text());
    let body = tokio::time::timeout(WAIT, stream.into_body().collect())
        .await
        .expect("the stream closes in time")
        .unwrap()
        .to_bytes();
    let events = super::parse_event_stream(&String::from_utf8_lossy(&body), &mut Vec::new());
    // Whether it names the session to resume depends on how far the agent got.
    let end = turn_end(&events);
    assert_eq!(
        (&end["type"], &end["state"]),
        (&json!("turn_end"), &json!("interrupted"))
    );
    instance.wait_free("alpha").await;
    let interrupted = (
        "atelier_sited_turns_ended_total{state=\"interrupted\"}",
        1.0,
    );
    assert_eq!(
        series(&scrape(&instance).await),
        with_site(&[("atelier_sited_turns_started_total", 1.0), interrupted]),
        "the turn and its follower are given back"
    );

    // A turn to idle, then one whose agent fails, each followed to its end.
    let (after, events) = follow_up(
        &instance,
        &id,
        "write page.html <p>hi</p>",
        last_seq(&events),
    )
    .await;
    assert_eq!(turn_end(&events)["state"], "idle");
    let idle = ("atelier_sited_turns_ended_total{state=\"idle\"}", 1.0);
    assert_eq!(
        series(&scrape(&instance).await),
        with_site(&[
            ("atelier_sited_turns_started_total", 2.0),
            interrupted,
            idle
        ])
    );
    let (_, events) = follow_up(&instance, &id, "stderr boom\nexit 3", after).await;
    assert_eq!(turn_end(&events)["state"], "error");
    let failed = (
        "atelier_sited_turns_ended_total{state=\"error\",reason=\"turn_agent_exited\"}",
        1.0,
    );
    let turns = [
        ("atelier_sited_turns_started_total", 3.0),
        interrupted,
        idle,
        failed,
    ];
    assert_eq!(series(&scrape(&instance).await), with_site(&turns));

    // A build, to its terminal record.
    let record = build(&instance, &mut Contract::default(), "alpha").await;
    assert_eq!(record["outcome"], "success", "{record}");
    let text = scrape(&instance).await;
    let mut moved = turns.to_vec();
    moved.push(("atelier_sited_builds_total{outcome=\"success\"}", 1.0));
    moved.push((
        "atelier_sited_build_duration_seconds_count{outcome=\"success\"}",
        1.0,
    ));
    assert_eq!(series(&text), with_site(&moved), "{text}");
    let (buckets, sum) = build_duration(&text, "success");
    assert!(sum > 0.0 && sum < 1800.0, "{text}");
    let bounds: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
    assert_eq!(
        bounds,
        [
            "1.0", "2.0", "5.0", "10.0", "20.0", "30.0", "60.0", "120.0", "300.0", "600.0",
            "1200.0", "1800.0", "+Inf"
        ]
    );
    // Cumulative: every bucket from the build's own on holds it, none before.
    let first = buckets.iter().position(|(_, count)| *count == 1.0).unwrap();
    assert!(buckets[..first].iter().all(|(_, count)| *count == 0.0));
    assert!(buckets[first..].iter().all(|(_, count)| *count == 1.0));

    // The site deleted: only the site count moves.
    let deleted = instance
        .call(Method::DELETE, "/v1/sites/alpha", json!({"actor": actor()}))
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let mut gone = with_site(&moved);
    gone.insert("atelier_sited_sites".to_owned(), 0.0);
    assert_eq!(series(&scrape(&instance).await), gone);
}
