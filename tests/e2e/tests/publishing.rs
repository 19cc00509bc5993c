//! Build, publish and rollback in `none` confinement, served by a real nginx on the provisioner's
//! rendered vhosts: a turn edits the site, a build promotes it, `Host: pre.<domain>` serves
//! the built page, publish makes `Host: <domain>` serve the same bytes, a second turn, build
//! and publish, then a rollback serves the first release's bytes again.

use atelier_site_client::model::BuildOutcome;
use atelier_site_client::{Client, Id, NewSite, Slug, TurnState};
use atelier_test_support::nginx::{Nginx, WebResponse};

use crate::support::instance::Instance;
use crate::support::journey::{
    build, end_state, follow_to_end, release_prompt, stamp_of, when_free,
};

const PRE: &str = "pre.alpha.example.org";
const PROD: &str = "alpha.example.org";

fn alpha() -> Slug {
    Slug::parse("alpha").unwrap()
}

/// Runs one turn (the first starts the session) and follows it to an idle end.
async fn turn(client: &Client, session: Option<&Id>, prompt: &str) -> Id {
    let slug = alpha();
    let (id, after) = match session {
        None => (
            when_free(|| client.start_session(&slug, prompt, None))
                .await
                .unwrap(),
            -1,
        ),
        Some(id) => {
            let seen = follow_to_end(client, id, -1).await;
            when_free(|| client.send_message(id, prompt)).await.unwrap();
            (id.clone(), seen.last().unwrap().seq as i64)
        }
    };
    let events = follow_to_end(client, &id, after).await;
    assert_eq!(
        end_state(events.last().unwrap()),
        Some(TurnState::Idle),
        "{events:?}"
    );
    id
}

/// A page served as built: 200, HTML, stamped whole.
fn assert_page(response: &WebResponse, title: &str) -> String {
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.content_type.as_deref(), Some("text/html"));
    let text = response.text();
    assert!(text.contains(&format!("<h1>{title}</h1>")), "{text}");
    assert!(!text.contains("__BUILD__"), "the build stamped it: {text}");
    stamp_of(&response.body).expect("a whole, stamped page")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_built_previewed_published_and_rolled_back_through_nginx() {
    let instance = Instance::start(&[("alpha", PROD)]);
    let nginx = Nginx::serve(instance.vhosts());
    let row = instance.site("alpha").clone();
    for host in [PRE, PROD, "beta.example.org"] {
        let nothing = nginx.get(host, "/").await;
        assert_eq!(nothing.status, 404, "{host}: nothing served before a build");
    }

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
    let session = turn(&ana, None, &release_prompt("First release")).await;
    assert!(
        std::fs::read_to_string(instance.workspace("alpha").join("src/index.html"))
            .unwrap()
            .contains("<h1>First release</h1>")
    );

    // Build 1 → preproduction serves it, by Host, through the rendered vhost.
    let first = build(&ana, &alpha()).await;
    assert_eq!(first.record.outcome, BuildOutcome::Success, "{}", first.log);
    assert!(first.log.contains("# build: sh build.sh"), "{}", first.log);
    let pre1 = first.record.release.clone().unwrap();
    let page1 = nginx.get(PRE, "/").await;
    let stamp1 = assert_page(&page1, "First release");
    assert_eq!(
        page1.body,
        std::fs::read(row.preprod_store.join(&pre1).join("index.html")).unwrap(),
        "nginx serves the promoted release's bytes"
    );
    let css = nginx.get(PRE, "/style.css").await;
    assert_eq!(css.status, 200);
    assert_eq!(css.content_type.as_deref(), Some("text/css"));
    assert_eq!(stamp_of(&css.body), Some(stamp1.clone()));
    assert_eq!(
        nginx.get(PRE, "/.git/config").await.status,
        403,
        "the vhost denies dot paths"
    );
    assert_eq!(nginx.get(PROD, "/").await.status, 404, "not published yet");
    let preview = ana.preview(&alpha()).await.unwrap();
    assert_eq!(preview.url, format!("http://{PRE}/"));
    assert_eq!(preview.release.as_deref(), Some(pre1.as_str()));

    // Publish → production serves exactly the previewed bytes.
    let published1 = ana.publish(&alpha(), Some("first")).await.unwrap();
    // The scheme is the declaration's: see the test of the env file's keys below.
    assert!(
        published1.url.ends_with(&format!("://{PROD}/")),
        "{published1:?}"
    );
    let prod1 = published1.release.clone();
    assert_eq!(nginx.get(PROD, "/").await.body, page1.body);
    assert_eq!(nginx.get(PROD, "/style.css").await.body, css.body);

    // A second turn, build and publish.
    turn(&ana, Some(&session), &release_prompt("Second release")).await;
    let second = build(&ana, &alpha()).await;
    assert_eq!(
        second.record.outcome,
        BuildOutcome::Success,
        "{}",
        second.log
    );
    let page2 = nginx.get(PRE, "/").await;
    let stamp2 = assert_page(&page2, "Second release");
    assert_ne!(stamp2, stamp1, "each build has its own stamp");
    assert_eq!(
        nginx.get(PROD, "/").await.body,
        page1.body,
        "production keeps the published bytes until the next publish"
    );
    let slug = alpha();
    let published2 = when_free(|| ana.publish(&slug, None)).await.unwrap();
    let prod2 = published2.release.clone();
    assert_ne!(prod2, prod1);
    assert_eq!(nginx.get(PROD, "/").await.body, page2.body);
    let releases = ana.releases(&alpha()).await.unwrap();
    assert_eq!(releases.releases, [prod2.clone(), prod1.clone()]);
    assert_eq!(releases.current.as_deref(), Some(prod2.as_str()));

    // Rollback → production serves the first release's bytes again; preproduction is as built.
    let rolled = ana
        .rollback(&alpha(), &Id::parse("release", &prod1).unwrap())
        .await
        .unwrap();
    assert_eq!(rolled.release, prod1);
    let back = nginx.get(PROD, "/").await;
    assert_eq!(back.body, page1.body, "the first release's bytes");
    assert_eq!(nginx.get(PROD, "/style.css").await.body, css.body);
    assert_eq!(
        nginx.get(PROD, "/main.js").await.content_type.as_deref(),
        Some("application/javascript")
    );
    assert_eq!(nginx.get(PRE, "/").await.body, page2.body);
    let link = std::fs::read_link(&row.prod_link).unwrap();
    assert!(link.is_relative(), "{}", link.display());

    let audit = ana.audit(Some(&alpha()), None).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "rollback",
            "publish",
            "build",
            "session_message",
            "publish",
            "build",
            "session_start",
            "create_site"
        ]
    );
    let served = nginx.stop();
    assert!(
        served
            .iter()
            .any(|l| l.host == PROD && l.path == "/" && l.status == 200),
        "nginx's own log shows production served: {served:?}"
    );
}

/// The limits and the production scheme the provisioner renders into sited's env file are the
/// ones sited applies: the declaration says production has no TLS (so its URL is `http://`),
/// keeps 2 releases, and gives a build step 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declared_scheme_retention_and_build_deadline_reach_sited() {
    let limits = serde_json::json!({"releases_retained": 2, "build_timeout_ms": 1000});
    let instance = Instance::start_with(&[("alpha", PROD)], limits, &[]);
    assert_eq!(instance.env("ATELIER_PROD_URL_SCHEME"), "http");
    assert_eq!(instance.env("ATELIER_RELEASES_RETAINED"), "2");
    assert_eq!(instance.env("ATELIER_BUILD_TIMEOUT_MS"), "1000");
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
    let built = build(&ana, &alpha()).await;
    assert_eq!(built.record.outcome, BuildOutcome::Success, "{}", built.log);

    let slug = alpha();
    let mut urls = Vec::new();
    for _ in 0..4 {
        urls.push(when_free(|| ana.publish(&slug, None)).await.unwrap().url);
    }
    let releases = ana.releases(&alpha()).await.unwrap();

    // A build step past the declared deadline is cut off.
    let script = instance.workspace("alpha").join("build.sh");
    std::fs::write(&script, "sleep 4\n").unwrap();
    let slow = build(&ana, &alpha()).await;

    assert_eq!(
        (
            urls[0].as_str(),
            releases.releases.len(),
            slow.record.error.as_deref()
        ),
        (
            format!("http://{PROD}/").as_str(),
            2,
            Some("build timed out")
        ),
        "(publish URL, production releases kept after 4 publishes, a 4 s step's error); \
         the env file says ATELIER_PROD_URL_SCHEME=http, ATELIER_RELEASES_RETAINED=2, \
         ATELIER_BUILD_TIMEOUT_MS=1000"
    );
}
