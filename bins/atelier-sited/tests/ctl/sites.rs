//! Sites through the library and through the binary against a real sited: create, list, show,
//! delete, the audit of each with its actor, `--json` printing the daemon's body exactly, the
//! exit codes, and a sweep of every route of the table answering its shape or a problem.

use atelier_site_client::{Error, Id, NewSite, Route, Slug};
use serde_json::Value;

use crate::ctl::support;

mod failures;

fn slug(text: &str) -> Slug {
    Slug::parse(text).unwrap()
}

fn new_site(s: &str) -> NewSite {
    NewSite {
        slug: slug(s),
        name: format!("Site {s}"),
        domain: format!("{s}.example.org"),
        template: None,
        driver: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_round_trip_through_the_library() {
    let instance = support::instance().await;
    let client = instance.client();
    assert!(client.list_sites().await.unwrap().is_empty());

    let created = client.create_site(new_site("alpha")).await.unwrap();
    assert_eq!(created.manifest.slug, "alpha");
    assert_eq!(created.manifest.domain, "alpha.example.org");
    assert_eq!(
        created.manifest.owner_user_id, 42,
        "the actor reached the body"
    );
    assert_eq!(created.manifest.template, "basic");
    client.create_site(new_site("beta")).await.unwrap();

    let listed: Vec<String> = client
        .list_sites()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.manifest.slug)
        .collect();
    assert_eq!(listed, ["alpha", "beta"]);
    assert_eq!(client.site(&slug("alpha")).await.unwrap(), created);

    let again = client.create_site(new_site("alpha")).await.unwrap_err();
    assert_eq!(again.code(), "slug_exists");
    assert_eq!(again.problem().map(|p| p.status), Some(409));

    let report = client.delete_site(&slug("alpha"), false).await.unwrap();
    assert_eq!(report.deleted, "alpha");
    assert!(!report.purged_prod);
    let gone = client.site(&slug("alpha")).await.unwrap_err();
    assert_eq!(
        gone.problem().map(|p| (p.status, p.title.as_str())),
        Some((404, "Not Found"))
    );

    let audit = client.audit(None, None).await.unwrap();
    let actions: Vec<(&str, Option<&str>)> = audit
        .iter()
        .map(|e| (e.action.as_str(), e.site.as_deref()))
        .collect();
    assert_eq!(
        actions,
        [
            ("delete_site", Some("alpha")),
            ("create_site", Some("beta")),
            ("create_site", Some("alpha")),
        ],
        "newest first"
    );
    for entry in &audit {
        assert_eq!(
            (entry.actor.user_id, entry.actor.username.as_str()),
            (42, "ana")
        );
    }
    let only_beta = client.audit(Some(&slug("beta")), Some(5)).await.unwrap();
    assert_eq!(only_beta.len(), 1);

    for request in instance.seen() {
        let mutating = request.method == "POST" || request.method == "DELETE";
        assert_eq!(
            request.header("content-type"),
            mutating.then_some("application/json"),
            "{} {}",
            request.method,
            request.path
        );
    }
}

/// The binary's one line of `--json`, parsed.
fn json_line(out: &support::Ctl) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.matches('\n').count(), 1, "one line: {out:?}");
    serde_json::from_str(out.stdout.trim_end()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sites_round_trip_through_the_binary_with_json() {
    let instance = support::instance().await;
    let client = instance.client();

    let created = json_line(
        &instance
            .ctl(&[
                "--json",
                "sites",
                "create",
                "beta",
                "--name",
                "Beta",
                "--domain",
                "beta.example.org",
            ])
            .await,
    );
    assert_eq!(created["manifest"]["slug"], "beta");
    assert_eq!(
        created["manifest"]["owner_user_id"], 7,
        "--actor-id reached sited"
    );

    // --json prints the daemon's body exactly: the same bytes the library receives.
    let shown = instance.ctl(&["sites", "show", "beta", "--json"]).await;
    let body = client.send(&Route::GetSite(slug("beta"))).await.unwrap();
    assert_eq!(shown.stdout, format!("{}\n", body.text()));
    let listed = instance.ctl(&["--json", "sites", "list"]).await;
    let body = client.send(&Route::ListSites).await.unwrap();
    assert_eq!(listed.stdout, format!("{}\n", body.text()));
    assert_eq!(json_line(&listed)["data"][0]["manifest"]["slug"], "beta");

    let table = instance.ctl(&["sites", "list"]).await;
    assert_eq!(table.code, 0, "{table:?}");
    let mut lines = table.stdout.lines();
    assert!(lines.next().unwrap().starts_with("SLUG"), "{table:?}");
    assert!(lines.next().unwrap().starts_with("beta  "), "{table:?}");
    let show = instance.ctl(&["sites", "show", "beta"]).await;
    assert!(
        show.stdout.contains("domain      beta.example.org\n"),
        "{show:?}"
    );

    let missing = instance.ctl(&["sites", "show", "nosuch"]).await;
    assert_eq!(missing.code, 1, "{missing:?}");
    assert_eq!(missing.stdout, "");
    assert!(
        missing.stderr.starts_with("error: Not Found (404): "),
        "{missing:?}"
    );
    let taken = instance
        .ctl(&[
            "sites",
            "create",
            "beta",
            "--name",
            "B",
            "--domain",
            "beta.example.org",
        ])
        .await;
    assert_eq!(taken.code, 1, "{taken:?}");
    assert!(
        taken.stderr.starts_with("error: slug_exists (409): "),
        "{taken:?}"
    );

    let deleted = json_line(
        &instance
            .ctl(&["--json", "sites", "delete", "beta", "--confirm"])
            .await,
    );
    assert_eq!(deleted["deleted"], "beta");
    assert_eq!(deleted["purged_prod"], false);
    let audit = json_line(&instance.ctl(&["audit", "--site", "beta", "--json"]).await);
    let actors: Vec<&Value> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["actor"])
        .collect();
    assert_eq!(
        actors,
        [&serde_json::json!({"user_id": 7, "username": "ops"}); 2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_sending_and_failures_of_pairing_have_their_exit_codes() {
    let instance = support::instance().await;
    let sent = || instance.seen().len();

    let before = sent();
    for (name, args, want) in [
        ("publish unconfirmed", vec!["publish", "alpha"], "error: confirmation_required: publishing needs --confirm\n"),
        ("purge unconfirmed", vec!["sites", "delete", "alpha", "--purge-prod"], "error: confirmation_required: deleting the site with production (--purge-prod) needs --confirm\n"),
        ("delete unconfirmed", vec!["sites", "delete", "alpha"], "error: confirmation_required: deleting the site's workspace and its history needs --confirm\n"),
        ("rollback unconfirmed", vec!["rollback", "alpha", "20990101T000000000Z-000000"], "error: confirmation_required: rolling production back needs --confirm\n"),
        ("bad slug", vec!["sites", "show", "../x"], "error: invalid_slug: \"../x\" is not a site slug (2-40 characters: a lowercase letter, then lowercase letters, digits or '-')\n"),
    ] {
        let out = instance.ctl(&args).await;
        assert_eq!((out.code, out.stderr.as_str()), (2, want), "{name}");
    }
    let no_token = support::ctl(vec![
        "--socket".into(),
        instance.socket.display().to_string(),
        "--instance".into(),
        "test".into(),
        "health".into(),
    ])
    .await;
    assert_eq!(no_token.code, 2, "{no_token:?}");
    assert!(
        no_token.stderr.starts_with("error: no service token: "),
        "{no_token:?}"
    );
    let usage = support::ctl(vec!["sites".into(), "frobnicate".into()]).await;
    assert_eq!(usage.code, 2, "{usage:?}");
    assert_eq!(sent(), before, "nothing was sent");

    let mismatch = support::ctl(vec![
        "--socket".into(),
        instance.socket.display().to_string(),
        "--instance".into(),
        "museum".into(),
        "--token-file".into(),
        instance.token_file.display().to_string(),
        "sites".into(),
        "list".into(),
    ])
    .await;
    assert_eq!(mismatch.code, 3, "{mismatch:?}");
    assert!(
        mismatch.stderr.starts_with("error: instance_mismatch: "),
        "{mismatch:?}"
    );
    let after: Vec<String> = instance.seen()[before..]
        .iter()
        .map(|s| s.path.clone())
        .collect();
    assert_eq!(after, ["/publication/site_builder/health"]);

    let absent = support::ctl(vec![
        "--socket".into(),
        instance.root.join("absent.sock").display().to_string(),
        "--instance".into(),
        "test".into(),
        "--token-file".into(),
        instance.token_file.display().to_string(),
        "health".into(),
    ])
    .await;
    assert_eq!(absent.code, 3, "{absent:?}");
    assert!(
        absent.stderr.starts_with("error: unreachable: "),
        "{absent:?}"
    );
    assert!(
        absent.stderr.contains("nothing is there: check --socket"),
        "{absent:?}"
    );

    let health = instance.ctl(&["health"]).await;
    assert_eq!(health.code, 0, "{health:?}");
    assert!(
        health.stdout.contains("pairing  fingerprint verified"),
        "{health:?}"
    );
    assert!(
        !health.stdout.contains(support::TOKEN),
        "the token never shows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_env_file_pairs_the_binary() {
    let instance = support::instance().await;
    let env = instance.root.join("engine.env");
    std::fs::write(
        &env,
        format!(
            "# as the provisioner renders it\nDEDALO_SITE_BUILDER_INSTANCE=\"test\"\n\
             DEDALO_SITE_BUILDER_SOCKET=\"{}\"\nDATABASE_URL=ignored\n",
            instance.socket.display()
        ),
    )
    .unwrap();
    let args = |extra: &[&str]| {
        let mut argv: Vec<String> = vec!["--engine-env".into(), env.display().to_string()];
        argv.extend(extra.iter().map(|a| (*a).to_owned()));
        argv
    };
    let token = instance.token_file.display().to_string();
    let out = support::ctl(args(&["--token-file", &token, "--json", "capabilities"])).await;
    let caps = json_line(&out);
    assert_eq!(caps["templates"][0]["id"], "basic");

    let without_token = support::ctl(args(&["capabilities"])).await;
    assert_eq!(
        without_token.code, 2,
        "the fragment has no token: {without_token:?}"
    );

    std::fs::write(
        &env,
        "DEDALO_SITE_BUILDER_INSTANCE=test\nDEDALO_SITE_BUILDER_SOKET=/x\n",
    )
    .unwrap();
    let typo = support::ctl(args(&["--token-file", &token, "capabilities"])).await;
    assert_eq!(typo.code, 2, "{typo:?}");
    assert!(
        typo.stderr
            .contains("unknown key DEDALO_SITE_BUILDER_SOKET"),
        "{typo:?}"
    );
}

/// Every route of the table, on a site that exists, answers its typed shape or a named
/// problem — never an answer the client cannot read. (Routes sited does not serve yet answer
/// 404 problems; once they exist their real shapes are checked here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_its_shape_or_a_problem() {
    let instance = support::instance().await;
    let client = instance.client();
    let alpha = slug("alpha");
    let unknown_id = Id::parse("id", "20260101T000000000Z-000000").unwrap();
    fn check<T: std::fmt::Debug>(route: &str, result: Result<T, Error>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(Error::Problem(problem)) => {
                assert!(
                    problem
                        .r#type
                        .starts_with("https://dedalo.dev/site-builder/problems/"),
                    "{route}: {problem:?}"
                );
                None
            }
            Err(other) => panic!("{route}: {other}"),
        }
    }
    check("health", client.pair().await).unwrap();
    check("capabilities", client.capabilities().await).unwrap();
    check("create", client.create_site(new_site("alpha")).await).unwrap();
    check("list", client.list_sites().await).unwrap();
    check("show", client.site(&alpha).await).unwrap();
    let session = check(
        "start session",
        client.start_session(&alpha, "hello", None).await,
    );
    check("list sessions", client.list_sessions(&alpha).await).unwrap();
    if let Some(session) = &session {
        check("message", client.send_message(session, "again").await);
        check("stop", client.stop_session(session).await);
        let mut events = client.follow(session, -1).await.unwrap();
        while let Some(item) = futures_util::StreamExt::next(&mut events).await {
            item.unwrap();
        }
    }
    check("build", client.start_build(&alpha).await);
    check("get build", client.build(&alpha, &unknown_id).await);
    check("preview", client.preview(&alpha).await);
    check("publish", client.publish(&alpha, Some("sweep")).await);
    check("releases", client.releases(&alpha).await);
    check("rollback", client.rollback(&alpha, &unknown_id).await);
    check("audit", client.audit(Some(&alpha), Some(10)).await).unwrap();
    let wait = std::time::Instant::now();
    loop {
        match client.delete_site(&alpha, false).await {
            Ok(report) => {
                assert_eq!(report.deleted, "alpha");
                break;
            }
            // A turn or build the sweep started may still hold the site.
            Err(Error::Problem(p)) if p.status == 409 && wait.elapsed().as_secs() < 60 => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(other) => panic!("delete: {other}"),
        }
    }
}
