//! A canary value planted in every credential file the declaration names appears in no
//! rendered artifact, for either web server. The declaration holds only paths; the renderer
//! must never read them, and nothing else may smuggle a value in.

use std::path::Path;

use crate::common;

const CANARY: &str = "canary-7f3a9c1e-do-not-render-0b5d";

/// The example with its config base (and so its credentials dir) moved under `dir`, and every
/// credential file the declaration names written there holding the canary.
fn planted(dir: &Path, server: &str) -> String {
    let base = dir.join("etc-atelier");
    let credentials = base.join("example/credentials");
    std::fs::create_dir_all(&credentials).unwrap();
    // The CMS's vhost, with chatd's credentials, is nginx's only.
    let example = match server {
        "nginx" => common::example_text(),
        _ => common::without_chat(&common::example_text()),
    };
    let text = example
        .replace(
            "/etc/atelier/example/credentials",
            &credentials.display().to_string(),
        )
        .replace(
            "\"webspace_base\":",
            &format!(
                "\"paths\": {{ \"config_base\": \"{}\" }},\n  \"webspace_base\":",
                base.display()
            ),
        )
        .replace(
            "\"server\": \"nginx\"",
            &format!("\"server\": \"{server}\""),
        );
    for name in [
        "SERVICE_TOKEN",
        "PUBLICATION_API_KEY",
        "PREPROD_PASSWORD",
        "ANTHROPIC_API_KEY",
        "CHATD_SERVICE_TOKEN",
        "CHATD_MASTER_KEY",
    ] {
        let file = credentials.join(name);
        // The service tokens are minted, never declared; the master key only with a chat block.
        let minted = name.ends_with("SERVICE_TOKEN");
        let chat_only = name == "CHATD_MASTER_KEY" && server != "nginx";
        assert!(
            text.contains(&file.display().to_string()) || minted || chat_only,
            "the declaration names {name}"
        );
        std::fs::write(file, format!("{CANARY}\n")).unwrap();
    }
    text
}

#[test]
fn no_artifact_carries_a_credential_value() {
    for server in ["nginx", "apache"] {
        let dir = tempfile::tempdir().unwrap();
        let text = planted(dir.path(), server);
        let artifacts = common::render_text(&text);
        assert!(artifacts.len() > 30);
        let credentials = dir.path().join("etc-atelier/example/credentials");
        let mut named = false;
        for artifact in &artifacts {
            let body = String::from_utf8_lossy(&artifact.bytes);
            assert!(
                !body.contains(CANARY),
                "{} carries the canary",
                artifact.path.display()
            );
            named |= body.contains(&credentials.display().to_string());
        }
        // The credentials were named (as sources), so the files were in reach of the renderer.
        assert!(named, "no artifact names the credential files at all");
        let files = std::fs::read_dir(&credentials).unwrap().count();
        assert_eq!(files, 6);
    }
}
