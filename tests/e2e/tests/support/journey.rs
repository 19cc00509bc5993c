//! The steps of a publisher's journey through the atelierctl library: following a turn to
//! its end, waiting out a busy site, building to a terminal record, and the scripted agent's
//! prompt for a site whose build stamps an id into every file it serves.

use std::future::Future;
use std::time::Instant;

use atelier_site_client::model::{BuildOutcome, BuildWithLog};
use atelier_site_client::{
    Client, Error, Id, SessionEvent, Slug, StoredEvent, StreamItem, TurnState,
};
use futures_util::StreamExt as _;

use super::{poll, WAIT};

/// Follows session `id` after `after` until sited closes the stream (after the turn's
/// `turn_end`), failing on a transport error, an `event: error` frame or [`WAIT`].
pub async fn follow_to_end(client: &Client, id: &Id, after: i64) -> Vec<StoredEvent> {
    let mut stream = client.follow(id, after).await.expect("the event stream");
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let item = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("the stream did not end in time: {events:?}"));
        match item {
            None => return events,
            Some(Ok(StreamItem::Event { event, .. })) => events.push(event),
            Some(Ok(StreamItem::Error { raw, .. })) => panic!("an error frame: {raw}"),
            Some(Err(e)) => panic!("the stream broke: {e}"),
        }
    }
}

/// The stored events' bodies.
pub fn bodies(events: &[StoredEvent]) -> Vec<serde_json::Value> {
    events.iter().map(|e| e.body.clone()).collect()
}

/// Returns true if and only if `error` is sited's 409 for a site another run holds.
fn is_busy(error: &Error) -> bool {
    error.problem().is_some_and(|p| {
        p.status == 409
            && matches!(
                p.reason.as_deref(),
                Some("session_running" | "build_running")
            )
    })
}

/// Runs `call` until sited stops answering that the site is busy (the run before has ended,
/// and its lock clears right after its terminal record); any other answer is returned.
pub async fn when_free<T, F, Fut>(call: F) -> Result<T, Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match call().await {
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// The state a `turn_end` event ended its turn in; `None` for any other event.
pub fn end_state(event: &StoredEvent) -> Option<TurnState> {
    match event.event() {
        Ok(SessionEvent::TurnEnd { state, .. }) => Some(state),
        _ => None,
    }
}

/// Builds `slug` and waits for the build's terminal record.
pub async fn build(client: &Client, slug: &Slug) -> BuildWithLog {
    let started = when_free(|| client.start_build(slug))
        .await
        .expect("the build starts");
    let id = Id::parse("build", &started.build_id).expect("a build id");
    poll("the build's terminal record", || async {
        let record = client.build(slug, &id).await.expect("the build's record");
        (record.record.outcome != BuildOutcome::Running).then_some(record)
    })
    .await
}

/// The scripted agent's prompt for a release titled `title`: a build step that copies `src/`
/// to `dist/` and stamps one fresh id into the first and last line of the page, its
/// stylesheet and its script, and the three files with the placeholder.
pub fn release_prompt(title: &str) -> String {
    let build =
        "set -eu\\nrm -rf dist\\ncp -R src dist\\nid=$(cat /proc/sys/kernel/random/uuid)\\n\
                 sed -i \"s/__BUILD__/$id/g\" dist/index.html dist/style.css dist/main.js";
    let page = format!(
        "<!doctype html><!-- build __BUILD__ -->\\n<html lang=\"en\">\\n<head>\\n\
         <meta charset=\"utf-8\">\\n<title>{title}</title>\\n\
         <meta name=\"atelier-build\" content=\"__BUILD__\">\\n\
         <link rel=\"stylesheet\" href=\"style.css\">\\n</head>\\n\
         <body>\\n<h1>{title}</h1>\\n<script type=\"module\" src=\"main.js\"></script>\\n\
         </body>\\n</html>\\n<!-- build __BUILD__ -->"
    );
    let style = "/* build __BUILD__ */\\nbody { font-family: sans-serif; }\\n/* build __BUILD__ */";
    let script = "// build __BUILD__\\ndocument.documentElement.dataset.build = \"__BUILD__\";\\n\
                  // build __BUILD__";
    format!(
        "I will make the page say {title}.\n\
         write build.sh {build}\n\
         write src/index.html {page}\n\
         write src/style.css {style}\n\
         write src/main.js {script}"
    )
}

/// The build id a served file carries: the id after `build ` on its first and on its last
/// line, when the two are the same (a file cut short or spliced from two releases has no
/// stamp).
pub fn stamp_of(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = id_after_build(lines.next()?)?;
    let last = id_after_build(lines.next_back()?)?;
    (first == last).then_some(first)
}

fn id_after_build(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("build ")?;
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
        .collect();
    (id.len() == 36).then_some(id)
}
