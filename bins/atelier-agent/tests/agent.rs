//! atelier-agent's integration tests: the file tools' rules against a real directory, and the
//! real binary driven by a scripted OpenAI-compatible provider on loopback (and by the lab
//! model's own script), with the lab's MCP stand-in as the server whose tools it offers.
// The support code outside `#[test]` functions panics on purpose when the setup breaks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support {
    use std::io::Read;
    use std::net::TcpListener;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use atelier_test_support::provider::provider;
    pub use atelier_test_support::provider::{
        answering, cut_round, refusing, scripted, text_round, tool_round, Answer, Scripted, NO_MORE,
    };
    use serde_json::Value;

    /// Each request gets what the lab model's OpenAI script answers it.
    pub fn lab_provider(script: atelier_lab_model::script::Script) -> Scripted {
        use atelier_lab_model::openai;
        let mut n = 0;
        provider(move |seen| {
            let Ok(request) = serde_json::from_value::<openai::Request>(seen.body.clone()) else {
                return Answer::Refuse(NO_MORE);
            };
            n += 1;
            let mut chunks = openai::chunks(&request, &script, n);
            chunks.push(openai::DONE.to_owned());
            Answer::Frames(chunks)
        })
    }

    /// The key the runs are given; it must never be printed.
    pub const KEY: &str = "sekrit-test-key-0451";

    /// A workspace, a HOME with a state directory, and a directory outside both.
    pub struct Site {
        _tmp: tempfile::TempDir,
        pub ws: PathBuf,
        pub home: PathBuf,
        pub outside: PathBuf,
    }

    pub fn site() -> Site {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let home = tmp.path().join("home");
        let outside = tmp.path().join("outside");
        for dir in [&ws, &home.join("state"), &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        Site {
            ws,
            home,
            outside,
            _tmp: tmp,
        }
    }

    /// A finished run of the binary.
    pub struct Run {
        pub code: Option<i32>,
        /// The `start` line's resume token, when the run wrote one (first, as it must).
        pub started: Option<String>,
        /// Every line after the `start` line.
        pub lines: Vec<Value>,
        pub stdout: String,
        pub stderr: String,
    }

    impl Run {
        pub fn types(&self) -> Vec<&str> {
            self.lines
                .iter()
                .map(|l| l["type"].as_str().unwrap())
                .collect()
        }

        pub fn last(&self) -> &Value {
            self.lines.last().unwrap()
        }
    }

    /// Runs the binary in `site`'s workspace against `base_url` with nothing in its
    /// environment but HOME, the key and `env`.
    pub fn agent(
        site: &Site,
        base_url: &str,
        flags: &[&str],
        env: &[(&str, &str)],
        prompt: &str,
    ) -> Run {
        let output = command(site, base_url, flags, env, prompt)
            .output()
            .unwrap();
        Run::of(output)
    }

    /// Runs the binary as [`agent`] does, resuming the conversation `token`.
    pub fn resume(site: &Site, provider: &Scripted, token: &str, prompt: &str) -> Run {
        agent(site, &provider.base_url, &["--resume", token], &[], prompt)
    }

    /// The command [`agent`] runs.
    pub fn command(
        site: &Site,
        base_url: &str,
        flags: &[&str],
        env: &[(&str, &str)],
        prompt: &str,
    ) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_atelier-agent"));
        command
            .current_dir(&site.ws)
            .env_clear()
            .env("HOME", &site.home)
            .env("AGENT_API_KEY", KEY)
            .envs(env.iter().copied())
            .args([
                "--provider",
                "openai-compatible",
                "--model",
                "scripted",
                "--base-url",
                base_url,
            ])
            .args(flags)
            .arg("--")
            .arg(prompt);
        command
    }

    impl Run {
        /// The run that ended with `output`.
        pub fn of(output: std::process::Output) -> Run {
            let stdout = String::from_utf8(output.stdout).unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            let mut lines: Vec<Value> = stdout
                .lines()
                .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
                .collect();
            let started = match lines.first() {
                Some(first) if first["type"] == "start" => {
                    let token = first["resume"].as_str().unwrap().to_owned();
                    lines.remove(0);
                    Some(token)
                }
                _ => None,
            };
            assert!(
                lines.iter().all(|line| line["type"] != "start"),
                "a start line comes first or not at all: {stdout}"
            );
            Run {
                code: output.status.code(),
                started,
                lines,
                stdout,
                stderr,
            }
        }
    }

    /// Starts the binary as [`agent`] does and waits until `provider` was asked `requests`
    /// times; the child, and the deadline for the rest of the test.
    pub fn spawn_until_asked(
        site: &Site,
        provider: &Scripted,
        prompt: &str,
        requests: usize,
    ) -> (Child, Instant) {
        let child = command(site, &provider.base_url, &[], &[], prompt)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while provider.seen().len() < requests {
            assert!(Instant::now() < deadline, "round {requests} never came");
            std::thread::sleep(Duration::from_millis(20));
        }
        (child, deadline)
    }

    /// What `child` wrote once it exited, which it must before `deadline`.
    pub fn wait_with_deadline(child: &mut Child, deadline: Instant) -> std::process::Output {
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the agent did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_end(&mut stderr)
            .unwrap();
        std::process::Output {
            status: child.wait().unwrap(),
            stdout,
            stderr,
        }
    }

    pub fn count_entries(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    /// A loopback port nothing listens on (bound, then let go).
    pub fn closed_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// The content the model read back for the call `id` in a request's messages.
    pub fn tool_message(body: &Value, id: &str) -> String {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id} in {body}"))["content"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The names of the tools a request offered.
    pub fn offered(body: &Value) -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The path rules, through the same entry point the model's calls take.
mod paths {
    use std::os::unix::fs::symlink;

    use atelier_agent::tools::{Workspace, MAX_READ_BYTES};
    use serde_json::{json, Value};

    use super::support::{site, Site};

    const SECRET: &str = "outside the workspace\n";

    fn planted() -> Site {
        let site = site();
        let ws = &site.ws;
        std::fs::write(site.outside.join("secret.txt"), SECRET).unwrap();
        std::fs::write(ws.join("index.html"), "<h1>Home</h1>\n").unwrap();
        std::fs::create_dir_all(ws.join("assets")).unwrap();
        std::fs::write(ws.join("assets/site.css"), "h1 { color: red }\n").unwrap();
        symlink("index.html", ws.join("link.html")).unwrap();
        symlink(&site.outside, ws.join("out")).unwrap();
        std::fs::hard_link(site.outside.join("secret.txt"), ws.join("hard.txt")).unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(ws.join(".builder")).unwrap();
        std::fs::write(ws.join(".builder/mcp.json"), "{}").unwrap();
        std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
        std::fs::write(ws.join("sub/.git/HEAD"), "ref\n").unwrap();
        std::fs::write(
            ws.join("big.txt"),
            vec![b'x'; usize::try_from(MAX_READ_BYTES).unwrap() + 1],
        )
        .unwrap();
        site
    }

    #[test]
    fn path_rule_table() {
        let site = planted();
        let workspace = Workspace::open(&site.ws).unwrap();
        let secret = site.outside.join("secret.txt");
        let absolute = secret.to_str().unwrap();
        let ws = std::fs::canonicalize(&site.ws).unwrap();
        let inside = |rel: &str| ws.join(rel).to_str().unwrap().to_owned();
        let cases: Vec<(&str, &str, Value, Result<(), &str>)> = vec![
            ("read a file", "read", json!({"path": "index.html"}), Ok(())),
            (
                "read a symlink",
                "read",
                json!({"path": "link.html"}),
                Err("symlink"),
            ),
            (
                "read through a linked directory",
                "read",
                json!({"path": "out/secret.txt"}),
                Err("symlink"),
            ),
            (
                "write through a linked directory",
                "write",
                json!({"path": "out/new.txt", "content": "x"}),
                Err("symlink"),
            ),
            (
                "write over a symlink",
                "write",
                json!({"path": "link.html", "content": "x"}),
                Err("symlink"),
            ),
            (
                "edit in a symlink",
                "edit",
                json!({"path": "link.html", "old_string": "Home", "new_string": "x"}),
                Err("symlink"),
            ),
            (
                "list a linked directory",
                "list",
                json!({"path": "out"}),
                Err("symlink"),
            ),
            (
                "search a linked directory",
                "grep",
                json!({"pattern": "x", "path": "out"}),
                Err("symlink"),
            ),
            (
                "read a hard link",
                "read",
                json!({"path": "hard.txt"}),
                Err("hard_link"),
            ),
            (
                "write a hard link",
                "write",
                json!({"path": "hard.txt", "content": "x"}),
                Err("hard_link"),
            ),
            (
                "edit in a hard link",
                "edit",
                json!({"path": "hard.txt", "old_string": "outside", "new_string": "x"}),
                Err("hard_link"),
            ),
            (
                "dot dot",
                "read",
                json!({"path": "../outside/secret.txt"}),
                Err("escape"),
            ),
            (
                "dot dot inside",
                "write",
                json!({"path": "assets/../x.txt", "content": "x"}),
                Err("escape"),
            ),
            ("absolute", "read", json!({"path": absolute}), Err("escape")),
            (
                "absolute below the workspace",
                "read",
                json!({"path": inside("assets/site.css")}),
                Ok(()),
            ),
            (
                "absolute below the workspace through a linked directory",
                "write",
                json!({"path": inside("out/new.txt"), "content": "x"}),
                Err("symlink"),
            ),
            (
                "absolute below the workspace into .git",
                "write",
                json!({"path": inside(".git/hooks/pre-commit"), "content": "x"}),
                Err("out_of_reach"),
            ),
            (
                "absolute write",
                "write",
                json!({"path": "/tmp/atelier-agent-test", "content": "x"}),
                Err("escape"),
            ),
            (
                ".git",
                "read",
                json!({"path": ".git/config"}),
                Err("out_of_reach"),
            ),
            (
                ".git deeper",
                "write",
                json!({"path": "sub/.git/HEAD", "content": "x"}),
                Err("out_of_reach"),
            ),
            (
                ".builder",
                "list",
                json!({"path": ".builder"}),
                Err("out_of_reach"),
            ),
            (
                ".builder write",
                "write",
                json!({"path": ".builder/mcp.json", "content": "{}"}),
                Err("out_of_reach"),
            ),
            (
                "too large to read",
                "read",
                json!({"path": "big.txt"}),
                Err("too_large"),
            ),
            (
                "too large to edit",
                "edit",
                json!({"path": "big.txt", "old_string": "x", "new_string": "y", "replace_all": true}),
                Err("too_large"),
            ),
            (
                "not found",
                "read",
                json!({"path": "missing.html"}),
                Err("not_found"),
            ),
            (
                "not found below",
                "read",
                json!({"path": "nowhere/missing.html"}),
                Err("not_found"),
            ),
            (
                "edit not found",
                "edit",
                json!({"path": "missing.html", "old_string": "a", "new_string": "b"}),
                Err("not_found"),
            ),
            (
                "list not found",
                "list",
                json!({"path": "missing"}),
                Err("not_found"),
            ),
            (
                "read a directory",
                "read",
                json!({"path": "assets"}),
                Err("not_regular_file"),
            ),
            (
                "write a directory",
                "write",
                json!({"path": "assets", "content": "x"}),
                Err("not_regular_file"),
            ),
            (
                "list a file",
                "list",
                json!({"path": "index.html"}),
                Err("not_directory"),
            ),
            (
                "write below a file",
                "write",
                json!({"path": "index.html/x", "content": "x"}),
                Err("not_directory"),
            ),
            (
                "write a new nested file",
                "write",
                json!({"path": "new/dir/page.html", "content": "<p>new</p>"}),
                Ok(()),
            ),
        ];
        for (name, tool, arguments, want) in cases {
            let got = workspace
                .call_tool(tool, &arguments)
                .map(|_| ())
                .map_err(|e| (e.reason(), e.to_string()));
            match (&want, &got) {
                (Ok(()), Ok(())) => {}
                (Err(reason), Err((got, message))) => {
                    assert_eq!(reason, got, "case {name}: {message}");
                    let named = match *reason {
                        "symlink" => "refused: symlink",
                        "hard_link" => "refused: hard link",
                        "escape" => "refused: path escapes the workspace",
                        "out_of_reach" => "is out of reach",
                        "too_large" => "too large",
                        "not_found" => "not found",
                        _ => "",
                    };
                    assert!(message.contains(named), "case {name}: {message}");
                }
                _ => panic!("case {name}: want {want:?}, got {got:?}"),
            }
        }
        // Nothing refused changed anything.
        assert_eq!(
            std::fs::read_to_string(site.outside.join("secret.txt")).unwrap(),
            SECRET
        );
        assert_eq!(super::support::count_entries(&site.outside), 1);
        assert!(std::fs::symlink_metadata(site.ws.join("link.html"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_to_string(site.ws.join("index.html")).unwrap(),
            "<h1>Home</h1>\n"
        );
        assert_eq!(
            std::fs::read_to_string(site.ws.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(site.ws.join("new/dir/page.html")).unwrap(),
            "<p>new</p>"
        );
    }

    #[test]
    fn listing_globbing_and_searching_never_reach_past_the_rules() {
        let site = planted();
        let workspace = Workspace::open(&site.ws).unwrap();
        let listed = workspace.call_tool("list", &json!({})).unwrap().data;
        let entries: Vec<(String, String)> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["kind"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "assets",
                "big.txt",
                "hard.txt",
                "index.html",
                "link.html",
                "out",
                "sub"
            ]
        );
        assert!(entries.contains(&("link.html".to_owned(), "symlink".to_owned())));
        assert!(entries.contains(&("out".to_owned(), "symlink".to_owned())));

        let globbed = workspace
            .call_tool("glob", &json!({"pattern": "**/*"}))
            .unwrap()
            .data;
        assert_eq!(
            globbed["files"],
            json!(["assets/site.css", "big.txt", "hard.txt", "index.html"])
        );
        let css = workspace
            .call_tool("glob", &json!({"pattern": "*.css", "path": "assets"}))
            .unwrap()
            .data;
        assert_eq!(css["files"], json!(["assets/site.css"]));

        let found = workspace
            .call_tool("grep", &json!({"pattern": "(?i)OUTSIDE|core|h1"}))
            .unwrap()
            .data;
        let paths: Vec<&str> = found["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["path"].as_str().unwrap())
            .collect();
        // The hard link and the big file are skipped, the linked directory and .git unseen.
        assert_eq!(paths, ["assets/site.css", "index.html"]);
        assert_eq!(found["files_skipped"], 2);
        assert_eq!(
            found["matches"][1],
            json!({"path": "index.html", "line": 1, "text": "<h1>Home</h1>"})
        );

        let filtered = workspace
            .call_tool("grep", &json!({"pattern": "h1", "glob": "*.html"}))
            .unwrap()
            .data;
        assert_eq!(filtered["matches"].as_array().unwrap().len(), 1);
        let one_file = workspace
            .call_tool(
                "grep",
                &json!({"pattern": "RED", "path": "assets/site.css", "ignore_case": true}),
            )
            .unwrap()
            .data;
        assert_eq!(one_file["matches"][0]["line"], 1);
    }

    #[test]
    fn searches_pass_by_what_the_site_s_gitignore_names() {
        let site = site();
        let ws = &site.ws;
        // A built site, as the templates ignore it.
        std::fs::write(ws.join(".gitignore"), "/dist/\n/node_modules/\n").unwrap();
        for dir in ["node_modules/lib", "dist", "src"] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
        }
        std::fs::write(ws.join("node_modules/lib/index.html"), "<h1>lib</h1>").unwrap();
        std::fs::write(ws.join("dist/index.html"), "<h1>Home</h1>").unwrap();
        std::fs::write(ws.join("src/index.html"), "<h1>Home</h1>").unwrap();
        let workspace = Workspace::open(ws).unwrap();

        let globbed = workspace
            .call_tool("glob", &json!({"pattern": "**/*.html"}))
            .unwrap()
            .data;
        assert_eq!(globbed["files"], json!(["src/index.html"]));
        assert_eq!(globbed["ignored"], json!(["dist/", "node_modules/"]));
        let found = workspace
            .call_tool("grep", &json!({"pattern": "<h1>"}))
            .unwrap()
            .data;
        assert_eq!(found["files_searched"], 2, "{found}");
        assert_eq!(found["matches"][0]["path"], "src/index.html");
        assert_eq!(found["ignored"], json!(["dist/", "node_modules/"]));

        // Named as the place to look, an ignored directory is searched.
        let inside = workspace
            .call_tool("grep", &json!({"pattern": "<h1>", "path": "dist"}))
            .unwrap()
            .data;
        assert_eq!(inside["matches"][0]["path"], "dist/index.html");
        assert!(inside.get("ignored").is_none(), "{inside}");
    }

    #[test]
    fn reading_a_window_of_lines() {
        let site = site();
        std::fs::write(site.ws.join("five.txt"), "1\n2\n3\n4\n5").unwrap();
        std::fs::write(site.ws.join("empty.txt"), "").unwrap();
        std::fs::write(site.ws.join("latin1.txt"), b"caf\xe9\n").unwrap();
        let workspace = Workspace::open(&site.ws).unwrap();
        let read = |args: Value| workspace.call_tool("read", &args);
        let window = read(json!({"path": "five.txt", "offset": 2, "limit": 2}))
            .unwrap()
            .data;
        assert_eq!(
            window,
            json!({"path": "five.txt", "total_lines": 5, "start_line": 2, "end_line": 3, "content": "2\n3\n", "next_offset": 4})
        );
        let tail = read(json!({"path": "five.txt", "offset": 5})).unwrap().data;
        assert_eq!(tail["content"], "5");
        assert!(tail.get("next_offset").is_none());
        let past = read(json!({"path": "five.txt", "offset": 6})).unwrap_err();
        assert_eq!(past.reason(), "invalid_arguments");
        let empty = read(json!({"path": "empty.txt"})).unwrap().data;
        assert_eq!(
            (empty["total_lines"].clone(), empty["content"].clone()),
            (json!(0), json!(""))
        );
        assert_eq!(
            read(json!({"path": "latin1.txt"})).unwrap_err().reason(),
            "not_text"
        );
    }
}

/// `edit`: exactly one occurrence, unless every one is asked for.
mod edit {
    use atelier_agent::tools::Workspace;
    use serde_json::json;

    use super::support::site;

    #[test]
    fn zero_one_or_several_matches() {
        let site = site();
        let file = site.ws.join("page.html");
        let workspace = Workspace::open(&site.ws).unwrap();
        let edit = |old: &str, new: &str, all: bool| {
            workspace.call_tool(
                "edit",
                &json!({"path": "page.html", "old_string": old, "new_string": new, "replace_all": all}),
            )
        };
        /// (name, old, new, replace_all, replacements or refusal, the file after).
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a str,
            bool,
            Result<usize, &'a str>,
            &'a str,
        );
        let cases: [Case<'_>; 5] = [
            (
                "no match",
                "<b>Kiwi</b>",
                "x",
                false,
                Err("no_match"),
                "<b>Apple</b> <b>Pear</b> <b>Apple</b>\n",
            ),
            (
                "several without replace_all",
                "<b>Apple</b>",
                "x",
                false,
                Err("ambiguous"),
                "<b>Apple</b> <b>Pear</b> <b>Apple</b>\n",
            ),
            (
                "exactly one",
                "<b>Pear</b>",
                "<b>Plum</b>",
                false,
                Ok(1),
                "<b>Apple</b> <b>Plum</b> <b>Apple</b>\n",
            ),
            (
                "several with replace_all",
                "Apple",
                "Fig",
                true,
                Ok(2),
                "<b>Fig</b> <b>Plum</b> <b>Fig</b>\n",
            ),
            (
                "one with replace_all",
                "Plum",
                "Date",
                true,
                Ok(1),
                "<b>Fig</b> <b>Date</b> <b>Fig</b>\n",
            ),
        ];
        std::fs::write(&file, "<b>Apple</b> <b>Pear</b> <b>Apple</b>\n").unwrap();
        for (name, old, new, all, want, after) in cases {
            let got = edit(old, new, all);
            match (want, got) {
                (Ok(count), Ok(output)) => {
                    assert_eq!(output.data["replacements"], count, "case {name}");
                    assert_eq!(output.changes.len(), 1, "case {name}");
                }
                (Err(reason), Err(error)) => {
                    assert_eq!(error.reason(), reason, "case {name}");
                    if reason == "ambiguous" {
                        assert!(error.to_string().contains("occurs 2 times"), "{error}");
                    }
                }
                (want, got) => panic!("case {name}: want {want:?}, got {got:?}"),
            }
            assert_eq!(
                std::fs::read_to_string(&file).unwrap(),
                after,
                "case {name}"
            );
        }
    }

    #[test]
    fn a_replaced_file_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let site = site();
        let file = site.ws.join("run.sh");
        std::fs::write(&file, "echo a\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let workspace = Workspace::open(&site.ws).unwrap();
        workspace
            .call_tool(
                "edit",
                &json!({"path": "run.sh", "old_string": "a", "new_string": "b"}),
            )
            .unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "echo b\n");
    }
}

/// The real binary against the scripted provider.
mod turns {
    use std::os::unix::fs::symlink;
    use std::process::Command;

    use serde_json::{json, Value};

    use super::support::{
        agent, answering, count_entries, cut_round, lab_provider, offered, refusing, resume,
        scripted, site, spawn_until_asked, text_round, tool_message, tool_round,
        wait_with_deadline, Answer, Run, KEY,
    };

    #[test]
    fn a_turn_writes_replaces_and_is_refused_through_a_planted_symlink() {
        let site = site();
        std::fs::write(site.ws.join("index.html"), "<h1>Old title</h1>\n").unwrap();
        std::fs::write(
            site.ws.join("AGENTS.md"),
            "# The Museum\nWrite British English.\n",
        )
        .unwrap();
        symlink(&site.outside, site.ws.join("evil")).unwrap();
        let provider = scripted(vec![
            tool_round(&[
                (
                    "c1",
                    "write",
                    json!({"path": "about.html", "content": "<p>About</p>\n"}),
                ),
                (
                    "c2",
                    "edit",
                    json!({"path": "index.html", "old_string": "Old title", "new_string": "New title"}),
                ),
            ]),
            tool_round(&[(
                "c3",
                "write",
                json!({"path": "evil/pwned.html", "content": "x"}),
            )]),
            text_round("Done: about page added, title changed."),
        ]);

        let run = agent(
            &site,
            &provider.base_url,
            &[],
            &[],
            "Add an about page and retitle.",
        );
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(
            run.types(),
            [
                "tool",
                "tool",
                "file_change",
                "tool_result",
                "file_change",
                "tool_result",
                "tool",
                "tool_result",
                "text",
                "result"
            ]
        );
        let lines = &run.lines;
        assert_eq!(
            lines[0],
            json!({"type": "tool", "id": "c1", "name": "write", "input": {"path": "about.html", "content": "<p>About</p>\n"}})
        );
        assert_eq!(
            lines[2],
            json!({"type": "file_change", "path": "about.html", "kind": "created"})
        );
        assert_eq!(
            lines[3],
            json!({"type": "tool_result", "id": "c1", "name": "write", "ok": true})
        );
        assert_eq!(
            lines[4],
            json!({"type": "file_change", "path": "index.html", "kind": "modified"})
        );
        assert_eq!(lines[7]["ok"], false);
        let refusal = lines[7]["error"].as_str().unwrap();
        assert!(refusal.starts_with("refused: symlink (evil"), "{refusal}");
        assert_eq!(
            lines[8],
            json!({"type": "text", "text": "Done: about page added, title changed."})
        );
        let result = run.last();
        assert_eq!(result["stop"], "end_turn");
        assert_eq!(result["rounds"], 3);
        assert_eq!(
            result["usage"],
            json!({"input_tokens": 300, "output_tokens": 30})
        );
        assert!(result.get("cost_usd").is_none());
        let token = result["resume"].as_str().unwrap();
        assert_eq!(
            run.started.as_deref(),
            Some(token),
            "the start line named it first"
        );
        assert_eq!(token.len(), 32);
        assert!(site
            .home
            .join(format!("state/atelier-agent/{token}.json"))
            .is_file());

        // The workspace holds exactly the two changes; nothing reached the outside.
        assert_eq!(
            std::fs::read_to_string(site.ws.join("about.html")).unwrap(),
            "<p>About</p>\n"
        );
        assert_eq!(
            std::fs::read_to_string(site.ws.join("index.html")).unwrap(),
            "<h1>New title</h1>\n"
        );
        assert_eq!(count_entries(&site.outside), 0);

        // What the provider was sent.
        let seen = provider.seen();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0].target, "/v1/chat/completions");
        assert_eq!(
            seen[0].header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        let first = &seen[0].body;
        assert_eq!(first["model"], "scripted");
        let system = first["messages"][0]["content"].as_str().unwrap();
        assert!(system.contains("atelier-agent"), "{system}");
        assert!(
            system.ends_with("# The Museum\nWrite British English.\n"),
            "{system}"
        );
        assert_eq!(
            first["messages"][1],
            json!({"role": "user", "content": "Add an about page and retitle."})
        );
        assert_eq!(
            offered(first),
            ["read", "write", "edit", "list", "glob", "grep"]
        );
        let written: Value = serde_json::from_str(&tool_message(&seen[1].body, "c1")).unwrap();
        assert_eq!(
            written,
            json!({"path": "about.html", "bytes": 13, "status": "created"})
        );
        let replaced: Value = serde_json::from_str(&tool_message(&seen[1].body, "c2")).unwrap();
        assert_eq!(replaced, json!({"path": "index.html", "replacements": 1}));
        // The model received the named refusal in the next request.
        assert_eq!(tool_message(&seen[2].body, "c3"), refusal);

        // The key went to the provider only.
        assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
    }

    #[test]
    fn the_lab_model_s_script_drives_the_agent_unchanged() {
        let site = site();
        // The lab names the file by its absolute path, as it does for every agent.
        let target = std::fs::canonicalize(&site.ws)
            .unwrap()
            .join("src/index.html");
        let script = atelier_lab_model::script::Script {
            write_path: target.to_str().unwrap().to_owned(),
            write_content: "<h1 class=\"hero\">Café du lab</h1>\n".to_owned(),
            final_text: atelier_lab_model::DEFAULT_FINAL_TEXT.to_owned(),
            replace: None,
        };
        let provider = lab_provider(script.clone());
        let run = agent(&site, &provider.base_url, &[], &[], "Write the home page.");
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(
            run.types(),
            ["tool", "file_change", "tool_result", "text", "result"]
        );
        assert_eq!(run.lines[0]["name"], "write");
        assert_eq!(
            run.lines[0]["input"],
            json!({"path": script.write_path, "content": script.write_content})
        );
        assert_eq!(
            run.lines[1],
            json!({"type": "file_change", "path": "src/index.html", "kind": "created"})
        );
        assert_eq!(run.lines[2]["ok"], true);
        assert_eq!(run.lines[3]["text"], script.final_text);
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            script.write_content
        );
        assert_eq!(provider.seen().len(), 2);
    }

    #[test]
    fn a_resumed_turn_sends_the_first_turns_messages() {
        let site = site();
        let provider = scripted(vec![
            tool_round(&[("c1", "write", json!({"path": "a.txt", "content": "a"}))]),
            text_round("Wrote a.txt."),
            text_round("It holds one letter."),
        ]);
        let first = agent(&site, &provider.base_url, &[], &[], "Write a.txt.");
        assert_eq!(first.code, Some(0), "{}", first.stdout);
        let token = first.last()["resume"].as_str().unwrap().to_owned();

        let second = resume(&site, &provider, &token, "What is in it?");
        assert_eq!(second.code, Some(0), "{}", second.stdout);
        assert_eq!(second.last()["resume"], token.as_str());
        assert_eq!(second.types(), ["text", "result"]);

        let seen = provider.seen();
        assert_eq!(seen.len(), 3);
        let mut expected = seen[1].conversation();
        expected.push(json!({"role": "assistant", "content": "Wrote a.txt."}));
        expected.push(json!({"role": "user", "content": "What is in it?"}));
        assert_eq!(seen[2].conversation(), expected);
        assert_eq!(
            expected[0],
            json!({"role": "user", "content": "Write a.txt."})
        );
        // The system prompt is stated afresh, not taken from the saved conversation.
        assert_eq!(seen[2].body["messages"][0]["role"], "system");
    }

    #[test]
    fn a_stopped_turn_keeps_its_conversation_and_a_resumed_one_continues_it() {
        let site = site();
        let provider = answering(vec![
            Answer::Frames(tool_round(&[(
                "c1",
                "write",
                json!({"path": "a.txt", "content": "a"}),
            )])),
            Answer::Hold,
            Answer::Frames(text_round("Carrying on.")),
        ]);
        // Stopped while its second round waits on the provider, as a stop or a timeout of the
        // turn's unit does: with SIGTERM.
        let (mut child, deadline) = spawn_until_asked(&site, &provider, "Write a.txt.", 2);
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let stopped = Run::of(wait_with_deadline(&mut child, deadline));
        assert_eq!(
            stopped.code,
            Some(1),
            "{}\n{}",
            stopped.stdout,
            stopped.stderr
        );
        assert_eq!(
            stopped.types(),
            ["tool", "file_change", "tool_result", "error"]
        );
        assert_eq!(stopped.last()["reason"], "interrupted");
        assert_eq!(
            stopped.last()["message"],
            "the turn was stopped before it finished; the conversation so far is saved"
        );
        let token = stopped.last()["resume"].as_str().unwrap().to_owned();

        // The next turn sends what the stopped one did: the call and its result.
        let resumed = resume(&site, &provider, &token, "Go on.");
        assert_eq!(resumed.code, Some(0), "{}", resumed.stdout);
        let seen = provider.seen();
        assert_eq!(seen.len(), 3);
        let mut expected = seen[1].conversation();
        expected.push(json!({"role": "user", "content": "Go on."}));
        assert_eq!(seen[2].conversation(), expected);
        assert_eq!(expected[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(expected[2]["tool_call_id"], "c1");
    }

    #[test]
    fn a_killed_turn_leaves_the_conversation_its_start_line_names() {
        let site = site();
        let provider = answering(vec![Answer::Hold, Answer::Frames(text_round("Here I am."))]);
        let (mut child, deadline) = spawn_until_asked(&site, &provider, "Write a.txt.", 1);
        child.kill().unwrap();
        let killed = Run::of(wait_with_deadline(&mut child, deadline));
        assert_eq!(killed.code, None, "killed by SIGKILL");
        assert!(killed.lines.is_empty(), "{}", killed.stdout);
        let token = killed.started.expect("the start line came first");

        let resumed = resume(&site, &provider, &token, "Go on.");
        assert_eq!(resumed.code, Some(0), "{}", resumed.stdout);
        assert_eq!(resumed.started.as_deref(), Some(token.as_str()));
        assert_eq!(
            provider.seen()[1].conversation(),
            [
                json!({"role": "user", "content": "Write a.txt."}),
                json!({"role": "user", "content": "Go on."}),
            ]
        );
    }

    #[test]
    fn a_conversation_longer_than_the_model_takes_leaves_out_its_oldest_exchanges() {
        let site = site();
        // Anthropic's words for it, which the shared classification does not take for one.
        let too_long = Answer::Refuse((
            "400 Bad Request",
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
        ));
        let provider = answering(vec![
            Answer::Frames(text_round("One.")),
            Answer::Frames(text_round("Two.")),
            too_long,
            Answer::Frames(text_round("Three.")),
            Answer::Frames(text_round("Four.")),
        ]);
        let first = agent(&site, &provider.base_url, &[], &[], "First.");
        let token = first.started.clone().unwrap();
        assert_eq!(resume(&site, &provider, &token, "Second.").code, Some(0));

        let third = resume(&site, &provider, &token, "Third.");
        assert_eq!(third.code, Some(0), "{}", third.stdout);
        assert_eq!(third.types(), ["warning", "text", "result"]);
        assert_eq!(
            third.lines[0]["message"],
            "the conversation is longer than the model's context, so its 2 oldest messages are \
             left out from now on"
        );
        assert_eq!(third.last()["rounds"], 1);
        let user = |text: &str| json!({"role": "user", "content": text});
        let assistant = |text: &str| json!({"role": "assistant", "content": text});
        let seen = provider.seen();
        assert_eq!(
            seen[3].conversation(),
            [user("Second."), assistant("Two."), user("Third.")]
        );

        // The conversation kept is the shorter one.
        assert_eq!(resume(&site, &provider, &token, "Fourth.").code, Some(0));
        assert_eq!(
            provider.seen()[4].conversation(),
            [
                user("Second."),
                assistant("Two."),
                user("Third."),
                assistant("Three."),
                user("Fourth.")
            ]
        );
    }

    #[test]
    fn an_answer_cut_at_the_output_limit_ends_the_turn_max_tokens() {
        let site = site();
        let provider = scripted(vec![cut_round("<h1>Half a pa")]);
        let flags = ["--max-output-tokens", "500"];
        let run = agent(&site, &provider.base_url, &flags, &[], "Write the page.");
        assert_eq!(run.code, Some(0), "{}", run.stdout);
        assert_eq!(run.types(), ["text", "result"]);
        assert_eq!(run.last()["stop"], "max_tokens");
        assert_eq!(provider.seen()[0].body["max_tokens"], 500);

        // Given no limit, an OpenAI-compatible provider is asked for none.
        let provider = scripted(vec![text_round("Hi.")]);
        let run = agent(&site, &provider.base_url, &[], &[], "Hi");
        assert_eq!(run.last()["stop"], "end_turn");
        let body = &provider.seen()[0].body;
        assert!(body.get("max_tokens").is_none(), "{body}");
    }

    #[test]
    fn a_transient_provider_failure_is_a_warning_and_asked_again() {
        let site = site();
        let provider = answering(vec![
            Answer::Refuse(("529 Overloaded", r#"{"error":{"message":"overloaded"}}"#)),
            Answer::Frames(text_round("Hello.")),
        ]);
        let run = agent(&site, &provider.base_url, &[], &[], "Hi");
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.types(), ["warning", "text", "result"]);
        assert_eq!(
            run.lines[0]["message"],
            "the provider failed (Custom Provider service error (529): overloaded. Please try \
             again.); asking again in 2 s"
        );
        let seen = provider.seen();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].body, seen[1].body, "the same request, asked again");
    }

    #[test]
    fn requests_go_through_the_proxy_the_environment_names() {
        let site = site();
        let proxy = scripted(vec![text_round("Hello.")]);
        let proxy_url = format!("http://{}", proxy.addr);
        let run = agent(
            &site,
            "http://provider.invalid",
            &[],
            &[("HTTP_PROXY", &proxy_url)],
            "Hi",
        );
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        let seen = proxy.seen();
        assert_eq!(seen.len(), 1);
        // Sent to the proxy as an absolute URL: the provider's name was never resolved here.
        assert_eq!(
            seen[0].target,
            "http://provider.invalid/v1/chat/completions"
        );
    }

    #[test]
    fn the_round_limit_ends_the_turn_without_running_the_last_calls() {
        let site = site();
        let provider = scripted(vec![tool_round(&[(
            "c1",
            "write",
            json!({"path": "late.txt", "content": "x"}),
        )])]);
        let run = agent(&site, &provider.base_url, &["--max-turns", "1"], &[], "Go.");
        assert_eq!(run.code, Some(0), "{}", run.stdout);
        assert_eq!(run.types(), ["tool", "tool_result", "result"]);
        assert_eq!(run.lines[1]["ok"], false);
        assert_eq!(run.last()["stop"], "max_turns");
        assert!(!site.ws.join("late.txt").exists());
    }

    #[test]
    fn failures_are_one_named_error_line_and_exit_1() {
        // A provider that refuses: the conversation so far is still kept.
        let site = site();
        let provider = scripted(Vec::new());
        let run = agent(&site, &provider.base_url, &[], &[], "Hi");
        assert_eq!(run.code, Some(1));
        assert_eq!(run.types(), ["error"]);
        assert_eq!(run.last()["reason"], "provider");
        assert!(run.last()["message"]
            .as_str()
            .unwrap()
            .contains("no more answers"));
        let token = run.last()["resume"].as_str().unwrap().to_owned();
        assert_eq!(run.started, Some(token.clone()));
        assert!(site
            .home
            .join(format!("state/atelier-agent/{token}.json"))
            .is_file());

        // Each refusal before the first request: nothing reaches the provider.
        let unknown = agent(
            &site,
            &provider.base_url,
            &["--resume", "no_such_turn"],
            &[],
            "Hi",
        );
        assert_eq!(
            (unknown.code, unknown.last()["reason"].clone()),
            (Some(1), json!("resume_not_found"))
        );
        assert_eq!(
            unknown.started, None,
            "a refused turn names no conversation"
        );

        symlink("elsewhere.md", site.ws.join("AGENTS.md")).unwrap();
        let brief = agent(&site, &provider.base_url, &[], &[], "Hi");
        assert_eq!(
            (brief.code, brief.last()["reason"].clone()),
            (Some(1), json!("brief_refused"))
        );
        std::fs::remove_file(site.ws.join("AGENTS.md")).unwrap();

        std::fs::remove_dir_all(site.home.join("state")).unwrap();
        symlink(&site.outside, site.home.join("state")).unwrap();
        let state = agent(&site, &provider.base_url, &[], &[], "Hi");
        assert_eq!(
            (state.code, state.last()["reason"].clone()),
            (Some(1), json!("state_unavailable"))
        );
        assert_eq!(count_entries(&site.outside), 0);

        assert_eq!(provider.seen().len(), 1);
    }

    #[test]
    fn a_refused_key_is_said_in_the_agents_words_not_the_chat_runtimes() {
        // The shared driver's sentence sends a CMS editor to the CMS's provider settings; the
        // agent's reader has none, and gave the key in the agent's environment.
        let site = site();
        let provider = refusing((
            "401 Unauthorized",
            r#"{"error":{"message":"invalid api key"}}"#,
        ));
        let run = agent(&site, &provider.base_url, &[], &[], "Hi");
        assert_eq!(run.code, Some(1));
        assert_eq!(run.last()["reason"], "provider");
        assert_eq!(
            run.last()["message"],
            "Custom Provider refused the API key (HTTP 401): check the credential the agent \
             was given in AGENT_API_KEY"
        );
        assert!(!run.stdout.contains("/admin/"), "{}", run.stdout);
        assert_eq!(provider.seen().len(), 1);
    }

    #[test]
    fn the_help_the_drivers_probe_is_tested_against_is_this_binary_s() {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_atelier-agent"))
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/agents/tests/fixtures/atelier/help.txt"
        );
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            std::fs::read_to_string(fixture).unwrap(),
            "refresh {fixture} from `atelier-agent --help`"
        );
    }

    #[test]
    fn a_missing_key_is_a_usage_error_that_names_the_variable_only() {
        let site = site();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_atelier-agent"))
            .current_dir(&site.ws)
            .env_clear()
            .env("HOME", &site.home)
            .args(["--provider", "anthropic", "--model", "m", "Hi"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let line: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            line,
            json!({"type": "error", "reason": "usage", "message": "--provider anthropic needs an API key in AGENT_API_KEY"})
        );
    }
}

/// The lab's MCP stand-in as the server whose tools the agent offers.
mod mcp {
    use atelier_lab_model::mcp::{record, search_tool, McpServer, SEARCH_TOOL, SESSION_ID};
    use serde_json::{json, Value};

    use super::support::{
        agent, closed_port, offered, scripted, site, text_round, tool_message, tool_round,
    };

    /// The server's name, as the driver passes it.
    const SERVER: &str = "dedalo_publication";

    /// Its tool as the model is offered it.
    const TOOL: &str = "mcp__dedalo_publication__publication_search";

    fn flags(url: &str) -> [&str; 4] {
        ["--mcp-name", SERVER, "--mcp-url", url]
    }

    #[test]
    fn the_server_s_tool_is_offered_called_and_its_result_reaches_the_model() {
        let site = site();
        let server = McpServer::start().unwrap();
        let provider = scripted(vec![
            tool_round(&[("m1", TOOL, json!({"query": "amphora"}))]),
            text_round("Found one record."),
        ]);
        let url = server.url();
        let run = agent(
            &site,
            &provider.base_url,
            &flags(&url),
            &[],
            "Find the amphora.",
        );
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.types(), ["tool", "tool_result", "text", "result"]);
        assert_eq!(
            run.lines[0],
            json!({"type": "tool", "id": "m1", "name": TOOL, "input": {"query": "amphora"}})
        );
        assert_eq!(
            run.lines[1],
            json!({"type": "tool_result", "id": "m1", "name": TOOL, "ok": true})
        );

        // The model was offered the tool, with the server's description and schema.
        let seen = provider.seen();
        assert_eq!(seen.len(), 2);
        let first = &seen[0].body;
        assert_eq!(
            offered(first),
            ["read", "write", "edit", "list", "glob", "grep", TOOL]
        );
        let tool = &first["tools"][6]["function"];
        assert_eq!(tool["description"], search_tool()["description"]);
        assert_eq!(tool["parameters"], search_tool()["inputSchema"]);
        let system = first["messages"][0]["content"].as_str().unwrap();
        assert!(system.contains(&format!("`{TOOL}`")), "{system}");
        assert!(system.contains("served by a remote server"), "{system}");

        // The server's answer reached the model in the next request.
        let content: Value = serde_json::from_str(&tool_message(&seen[1].body, "m1")).unwrap();
        assert_eq!(content, record());

        // The server saw one session, the tool under its own name, and no key.
        let requests = server.seen();
        let methods: Vec<Value> = requests
            .iter()
            .map(|r| r.json()["method"].clone())
            .collect();
        assert_eq!(
            methods,
            [
                "initialize",
                "notifications/initialized",
                "tools/list",
                "tools/call"
            ]
        );
        assert_eq!(requests[0].header("mcp-session-id"), None);
        for request in &requests {
            assert_eq!(request.method, "POST");
            assert!(request
                .header("accept")
                .is_some_and(|accept| accept.contains("text/event-stream")));
            assert_eq!(request.header("authorization"), None);
            assert_eq!(request.header("x-api-key"), None);
        }
        for request in &requests[1..] {
            assert_eq!(request.header("mcp-session-id"), Some(SESSION_ID));
            assert_eq!(request.header("mcp-protocol-version"), Some("2025-06-18"));
        }
        assert_eq!(
            requests[3].json()["params"],
            json!({"name": SEARCH_TOOL, "arguments": {"query": "amphora"}})
        );
    }

    #[test]
    fn the_server_s_refusal_is_a_failed_result_the_model_reads() {
        let site = site();
        let server = McpServer::start().unwrap();
        let provider = scripted(vec![
            tool_round(&[("m1", TOOL, json!({}))]),
            text_round("The search needs words."),
        ]);
        let url = server.url();
        let run = agent(&site, &provider.base_url, &flags(&url), &[], "Search.");
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.types(), ["tool", "tool_result", "text", "result"]);
        let refusal = format!("{TOOL} failed: {SEARCH_TOOL} needs a non-empty `query`");
        assert_eq!(
            run.lines[1],
            json!({"type": "tool_result", "id": "m1", "name": TOOL, "ok": false, "error": refusal})
        );
        assert_eq!(tool_message(&provider.seen()[1].body, "m1"), refusal);
    }

    #[test]
    fn an_unavailable_server_is_a_warning_and_the_turn_goes_on() {
        let site = site();
        let provider = scripted(vec![text_round("Nothing to search with.")]);
        let url = format!("http://127.0.0.1:{}/mcp", closed_port());
        let run = agent(&site, &provider.base_url, &flags(&url), &[], "Search.");
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.types(), ["warning", "text", "result"]);
        let warning = run.lines[0]["message"].as_str().unwrap();
        assert!(
            warning.starts_with(
                "the MCP server dedalo_publication is unavailable, so its tools are not offered"
            ),
            "{warning}"
        );
        assert_eq!(run.last()["stop"], "end_turn");
        let tools = offered(&provider.seen()[0].body);
        assert!(
            tools.iter().all(|name| !name.starts_with("mcp__")),
            "{tools:?}"
        );
    }

    #[test]
    fn the_server_is_reached_directly_never_through_the_proxy() {
        let site = site();
        let server = McpServer::start().unwrap();
        let proxy = scripted(vec![text_round("Hello.")]);
        let proxy_url = format!("http://{}", proxy.addr);
        let url = server.url();
        // No NO_PROXY: the loopback server would go to the proxy if the proxy were asked.
        let run = agent(
            &site,
            "http://provider.invalid",
            &flags(&url),
            &[("HTTP_PROXY", &proxy_url), ("HTTPS_PROXY", &proxy_url)],
            "Hi",
        );
        assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
        assert_eq!(run.types(), ["text", "result"]);
        let through_proxy: Vec<String> = proxy.seen().into_iter().map(|s| s.target).collect();
        assert_eq!(
            through_proxy,
            ["http://provider.invalid/v1/chat/completions"]
        );
        assert_eq!(server.seen().len(), 3);
        assert!(offered(&proxy.seen()[0].body).contains(&TOOL.to_owned()));
    }
}
