use super::*;

/// What a case is, the body, and what it finds (`None`: relayed).
type Case = (&'static str, String, Option<BodyFinding>);

fn tool(kind: &str) -> Option<BodyFinding> {
    Some(BodyFinding::ProviderTool(format!("{kind:?}")))
}

fn fetch(url: &str) -> Option<BodyFinding> {
    Some(BodyFinding::ProviderFetch(format!("{url:?}")))
}

fn source_url() -> Option<BodyFinding> {
    Some(BodyFinding::ProviderFetch("a source URL".to_owned()))
}

/// A messages request with `content` as the user's one message, and `extra` members.
fn messages(content: &str, extra: &str) -> String {
    format!(
        r#"{{"model":"m","max_tokens":8,"messages":[{{"role":"user","content":{content}}}]{extra}}}"#
    )
}

/// A request declaring `tools`.
fn with_tools(tools: &str) -> String {
    messages(r#""hi""#, &format!(r#","tools":{tools}"#))
}

/// An agent's own tool, whose schema names members the walk looks for.
const CUSTOM_TOOL: &str = r#"{"name":"Read","description":"reads","input_schema":{"type":"object",
    "properties":{"file_path":{"type":"string"},"source":{"type":["string","null"]},
    "image_url":{"type":"string","format":"uri"},"url":{"type":"string"}}}}"#;

fn cases() -> Vec<Case> {
    vec![
        // Relayed.
        ("an empty object", "{}".into(), None),
        (
            "a plain request, URLs in its text",
            messages(r#""see https://example.com""#, r#","stream":true"#),
            None,
        ),
        (
            "the agent's own tools, no type",
            with_tools(&format!("[{CUSTOM_TOOL}]")),
            None,
        ),
        (
            "the agent's own tools, typed",
            with_tools(
                r#"[{"type":"custom","name":"a","input_schema":{}},{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"image_url":{"type":"string"}}}}}]"#,
            ),
            None,
        ),
        (
            "provider-defined tools the agent runs",
            with_tools(
                r#"[{"type":"bash_20250124","name":"bash"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},{"type":"computer_20250124","name":"computer","display_width_px":1,"display_height_px":1},{"type":"memory_20250818","name":"memory"},{"type":"tool_search_tool_regex_20251119","name":"tool_search_tool_regex"},{"type":"advisor_20260301","name":"advisor"}]"#,
            ),
            None,
        ),
        (
            "tools and members null",
            messages(
                r#""hi""#,
                r#","tools":null,"mcp_servers":null,"container":null"#,
            ),
            None,
        ),
        (
            "a base64 image and document",
            messages(
                r#"[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]"#,
                "",
            ),
            None,
        ),
        (
            "a data URL image, any case",
            messages(
                r#"[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":"DATA:image/png;base64,AAAA"}]"#,
                "",
            ),
            None,
        ),
        (
            "a tool call's input names a URL source",
            messages(
                r#"[{"type":"tool_use","id":"t1","name":"fetch","input":{"source":{"type":"url","url":"https://example.com"},"image_url":"https://example.com/a.png"}}]"#,
                "",
            ),
            None,
        ),
        (
            "a search result's source is a citation",
            messages(
                r#"[{"type":"search_result","source":"https://example.com/a","title":"t","content":[{"type":"text","text":"x"}]}]"#,
                "",
            ),
            None,
        ),
        (
            "an earlier server tool's result in the history",
            messages(
                r#"[{"type":"web_search_tool_result","tool_use_id":"s1","content":[{"type":"web_search_result","url":"https://example.com","title":"t"}]}]"#,
                "",
            ),
            None,
        ),
        (
            "a server tool's call in the history, which the provider would make",
            messages(
                r#"[{"type":"server_tool_use","id":"s1","name":"web_fetch","input":{"url":"https://example.com/?leak"}}]"#,
                "",
            ),
            tool("server_tool_use"),
        ),
        (
            "an MCP call in the history, in another case",
            messages(
                r#"[{"type":"MCP_TOOL_USE","id":"m1","name":"x","input":{}}]"#,
                "",
            ),
            tool("MCP_TOOL_USE"),
        ),
        (
            "file references that name no URL",
            messages(
                r#"[{"type":"file","file":{"file_id":"file-abc123"}},{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0="}},{"type":"document","source":{"type":"file","file_id":"file_011"}}]"#,
                "",
            ),
            None,
        ),
        (
            "URLs in schemas and their examples",
            messages(
                r#""hi""#,
                r#","tools":[{"name":"pic","input_schema":{"type":"object","examples":[{"image_url":"https://example.com/cat.png","source":{"type":"url"}}]}},{"type":"function","function":{"name":"f","parameters":{"examples":[{"file_url":"https://x"}]}}}],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"examples":[{"image_url":"https://x"}]}}}"#,
            ),
            None,
        ),
        // The provider would run a tool of its own.
        (
            "web search",
            with_tools(r#"[{"type":"web_search_20250305","name":"web_search","max_uses":5}]"#),
            tool("web_search_20250305"),
        ),
        (
            "web fetch",
            with_tools(r#"[{"type":"web_fetch_20250910","name":"web_fetch"}]"#),
            tool("web_fetch_20250910"),
        ),
        (
            "code execution",
            with_tools(r#"[{"type":"code_execution_20250825","name":"code_execution"}]"#),
            tool("code_execution_20250825"),
        ),
        (
            "an MCP toolset",
            with_tools(r#"[{"type":"mcp_toolset","mcp_server_name":"x"}]"#),
            tool("mcp_toolset"),
        ),
        (
            "a prefix with nothing after it",
            with_tools(r#"[{"type":"bash_","name":"bash"}]"#),
            tool("bash_"),
        ),
        (
            "a server tool after the agent's own",
            with_tools(&format!(
                r#"[{CUSTOM_TOOL},{{"type":"web_search_20250305","name":"web_search"}}]"#
            )),
            tool("web_search_20250305"),
        ),
        (
            "a second type member",
            with_tools(r#"[{"type":"custom","name":"a","type":"web_fetch_20250910"}]"#),
            tool("web_fetch_20250910"),
        ),
        (
            "the type in capitals",
            with_tools(r#"[{"TYPE":"web_search_20250305"}]"#),
            tool("web_search_20250305"),
        ),
        (
            "the tools in capitals",
            messages(r#""hi""#, r#","Tools":[{"type":"web_search_20250305"}]"#),
            tool("web_search_20250305"),
        ),
        (
            "a second tools member",
            messages(
                r#""hi""#,
                r#","tools":[],"tools":[{"type":"web_fetch_20250910"}]"#,
            ),
            tool("web_fetch_20250910"),
        ),
        (
            "a tool type in another case",
            with_tools(r#"[{"type":"Custom"}]"#),
            tool("Custom"),
        ),
        (
            "MCP servers",
            messages(
                r#""hi""#,
                r#","mcp_servers":[{"type":"url","url":"https://mcp.example.com","name":"x"}]"#,
            ),
            tool("mcp_servers"),
        ),
        (
            "MCP servers in capitals",
            messages(r#""hi""#, r#","MCP_SERVERS":[]"#),
            tool("MCP_SERVERS"),
        ),
        (
            "MCP servers with a long s",
            messages(r#""hi""#, r#","mcp_ſervers":[]"#),
            tool("mcp_ſervers"),
        ),
        (
            "MCP servers escaped",
            messages(r#""hi""#, r#","mcp\u005fservers":{}"#),
            tool("mcp_servers"),
        ),
        (
            "a container",
            messages(r#""hi""#, r#","container":{"id":"c"}"#),
            tool("container"),
        ),
        (
            "web search options",
            messages(r#""hi""#, r#","web_search_options":{}"#),
            tool("web_search_options"),
        ),
        (
            "a gateway's plugins",
            messages(r#""hi""#, r#","plugins":[{"id":"web"}]"#),
            tool("plugins"),
        ),
        (
            "MCP servers in camel case",
            messages(
                r#""hi""#,
                r#","mcpServers":[{"url":"https://mcp.example.com"}]"#,
            ),
            tool("mcpServers"),
        ),
        (
            "a container with a dotted capital I",
            messages(r#""hi""#, r#","contaİner":{"id":"c"}"#),
            tool("contaİner"),
        ),
        (
            "members a gateway merges in unread",
            messages(
                r#""hi""#,
                r#","extra_body":{"tools":[{"type":"web_search_20250305"}]}"#,
            ),
            tool("extra_body"),
        ),
        (
            "a vendor's web search",
            messages(r#""hi""#, r#","enable_search":true"#),
            tool("enable_search"),
        ),
        (
            "a one-member tool a gateway reads as its provider's",
            with_tools(r#"[{"urlContext":{}}]"#),
            tool("urlContext"),
        ),
        (
            "a named tool with a gateway's provider tool in it",
            with_tools(r#"[{"name":"search","googleSearch":{}}]"#),
            tool("googleSearch"),
        ),
        (
            "a tool with neither a type nor a name",
            with_tools(r#"[{"description":"d","input_schema":{}}]"#),
            Some(BodyFinding::ProviderTool(
                "a tool with neither a type nor a name".into(),
            )),
        ),
        (
            "legacy functions with a provider tool",
            messages(r#""hi""#, r#","functions":[{"google_search":{}}]"#),
            tool("google_search"),
        ),
        (
            "a versioned type of another family",
            with_tools(r#"[{"type":"computer_use_preview"}]"#),
            tool("computer_use_preview"),
        ),
        (
            "a version of seven digits",
            with_tools(r#"[{"type":"bash_2025012","name":"bash"}]"#),
            tool("bash_2025012"),
        ),
        // The provider would fetch a URL.
        (
            "an image by URL",
            messages(
                r#"[{"type":"image","source":{"type":"base64","url":"https://example.com/a.png"}}]"#,
                "",
            ),
            fetch("https://example.com/a.png"),
        ),
        (
            "a document of type url",
            messages(r#"[{"type":"document","source":{"type":"url"}}]"#, ""),
            source_url(),
        ),
        (
            "a source of type URL in capitals",
            messages(r#"[{"type":"image","Source":{"Type":"URL"}}]"#, ""),
            source_url(),
        ),
        (
            "an image inside a tool result",
            messages(
                r#"[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"x"}}]}]"#,
                "",
            ),
            source_url(),
        ),
        (
            "an OpenAI image URL",
            messages(
                r#"[{"type":"image_url","image_url":{"url":"https://example.com/?leak=1","detail":"low"}}]"#,
                "",
            ),
            fetch("https://example.com/?leak=1"),
        ),
        (
            "an image URL as a string",
            messages(r#"[{"type":"image_url","image_url":"http://x"}]"#, ""),
            fetch("http://x"),
        ),
        (
            "a file URL",
            messages(r#"[{"type":"file","file":{"file_url":"https://x"}}]"#, ""),
            fetch("https://x"),
        ),
        (
            "a data URL after a space",
            messages(r#"[{"image_url":" data:image/png;base64,AA"}]"#, ""),
            fetch(" data:image/png;base64,AA"),
        ),
        (
            "a URL cut short in the finding",
            messages(
                &format!(
                    r#"[{{"image_url":"https://example.com/{}"}}]"#,
                    "a".repeat(100)
                ),
                "",
            ),
            Some(BodyFinding::ProviderFetch(format!(
                "{:?}…",
                format!("https://example.com/{}", "a".repeat(44))
            ))),
        ),
        (
            "a file id that is a URL",
            messages(
                r#"[{"type":"file","file":{"file_id":"https://example.com/a.pdf"}}]"#,
                "",
            ),
            fetch("https://example.com/a.pdf"),
        ),
        (
            "file data that is a URL",
            messages(
                r#"[{"type":"file","file":{"filename":"a.pdf","file_data":"http://x/a.pdf"}}]"#,
                "",
            ),
            fetch("http://x/a.pdf"),
        ),
        // Not vetted.
        ("an empty body", String::new(), Some(BodyFinding::NotJson)),
        ("an array", "[]".into(), Some(BodyFinding::NotJson)),
        ("a string", r#""{}""#.into(), Some(BodyFinding::NotJson)),
        ("text", "model=m".into(), Some(BodyFinding::NotJson)),
        (
            "bytes after the object",
            "{} {}".into(),
            Some(BodyFinding::NotJson),
        ),
        (
            "a cut object",
            r#"{"model":"m""#.into(),
            Some(BodyFinding::NotJson),
        ),
        (
            "tools as an object",
            with_tools("{}"),
            Some(BodyFinding::NotJson),
        ),
        (
            "a tool as a string",
            with_tools(r#"["web_search"]"#),
            Some(BodyFinding::NotJson),
        ),
        (
            "a tool's type not a string",
            with_tools(r#"[{"type":["custom"]}]"#),
            Some(BodyFinding::NotJson),
        ),
        (
            "a lone surrogate in a tool call's input",
            messages(r#"[{"type":"tool_use","input":{"a":"\ud800"}}]"#, ""),
            Some(BodyFinding::NotJson),
        ),
        (
            "nesting past the parser's depth",
            format!(r#"{{"a":{}{}}}"#, "[".repeat(200), "]".repeat(200)),
            Some(BodyFinding::NotJson),
        ),
    ]
}

#[test]
fn a_body_is_relayed_only_when_the_provider_would_reach_nothing_of_its_own() {
    for (what, body, want) in cases() {
        assert_eq!(inspect(body.as_bytes(), None).err(), want, "{what}: {body}");
    }
}

/// Also where the walk skips (a tool call's input), so what is relayed is JSON throughout.
#[test]
fn invalid_utf_8_is_not_vetted() {
    for (open, close) in [
        (r#"{"model":""#, r#""}"#),
        (r#"{"messages":[{"input":{"a":""#, r#""}}]}"#),
    ] {
        let mut body = open.as_bytes().to_vec();
        body.extend_from_slice(&[0xff, 0xfe]);
        body.extend_from_slice(close.as_bytes());
        assert_eq!(inspect(&body, None), Err(BodyFinding::NotJson), "{open}");
    }
}

#[test]
fn a_finding_says_what_it_found() {
    let shown = [
        (
            BodyFinding::NotJson,
            "the body is not a JSON object the relay can vet",
        ),
        (
            BodyFinding::ProviderTool("\"web_search_20250305\"".into()),
            "the provider would run \"web_search_20250305\" itself, which the gate does not allow",
        ),
        (
            BodyFinding::ProviderFetch("\"http://x\\n\"".into()),
            "the provider would fetch \"http://x\\n\", which the gate does not allow",
        ),
    ];
    for (finding, text) in shown {
        assert_eq!(finding.to_string(), text);
    }
    // A quoted line break stays escaped: a log line holds the finding as one line.
    assert_eq!(
        inspect(br#"{"messages":[{"image_url":"http://x\n"}]}"#, None),
        Err(BodyFinding::ProviderFetch("\"http://x\\n\"".into()))
    );
}

/// The committed seeds of the fuzz target decide as their names say (`ok-`, `tool-`,
/// `fetch-`, `models-`, `not-json-`).
#[test]
fn the_fuzz_seeds_decide_as_their_names_say() {
    for (name, seed) in crate::fuzz_seeds("model_body") {
        let got = inspect(&seed, None);
        let fits = match name.split('-').next() {
            Some("ok") => got.is_ok(),
            Some("tool") => matches!(got, Err(BodyFinding::ProviderTool(_))),
            Some("fetch") => matches!(got, Err(BodyFinding::ProviderFetch(_))),
            Some("models") => matches!(got, Err(BodyFinding::ModelList(_))),
            Some("not") => got == Err(BodyFinding::NotJson),
            _ => panic!("{name}: no prefix naming its finding"),
        };
        assert!(fits, "{name}: {got:?}");
    }
}

/// A route pinning its model relays requests naming that model alone; one naming another, or
/// none (a gateway would pick its own), is refused; unpinned, any model passes.
#[test]
fn a_pinned_model_is_the_only_one_relayed() {
    let other = |model: &str| Err(BodyFinding::OtherModel(model.to_owned()));
    let cases: [(&str, &str, Result<(), BodyFinding>); 7] = [
        (
            "the pinned model",
            r#"{"model":"qwen3","messages":[]}"#,
            Ok(()),
        ),
        (
            "a search model",
            r#"{"model":"gpt-4o-search-preview"}"#,
            other("\"gpt-4o-search-preview\""),
        ),
        (
            "an online suffix",
            r#"{"model":"qwen3:online"}"#,
            other("\"qwen3:online\""),
        ),
        ("another case", r#"{"model":"Qwen3"}"#, other("\"Qwen3\"")),
        (
            "a second model member",
            r#"{"model":"qwen3","Model":"sonar"}"#,
            other("\"sonar\""),
        ),
        (
            "not a string",
            r#"{"model":["qwen3"]}"#,
            other("a model that is not a string"),
        ),
        ("no model", r#"{"messages":[]}"#, other("no model")),
    ];
    for (what, body, want) in cases {
        assert_eq!(inspect(body.as_bytes(), Some("qwen3")), want, "{what}");
    }
    assert_eq!(
        inspect(br#"{"model":"gpt-4o-search-preview"}"#, None),
        Ok(())
    );
    assert_eq!(inspect(b"{}", None), Ok(()));
}

/// A list of models for a gateway to fall back to is refused on every route, pinned or not
/// (a fallback is taken on any error, which the agent can cause); `null` says nothing.
#[test]
fn no_route_relays_a_list_of_fallback_models() {
    let listed = |member: &str| Err(BodyFinding::ModelList(format!("{member:?}")));
    let cases: [(&str, &str, Result<(), BodyFinding>); 6] = [
        (
            "models beside the pinned model",
            r#"{"model":"qwen3","models":["openai/gpt-4o:online"],"messages":[]}"#,
            listed("models"),
        ),
        (
            "fallbacks",
            r#"{"model":"qwen3","fallbacks":[{"model":"perplexity/sonar"}]}"#,
            listed("fallbacks"),
        ),
        (
            "an empty list",
            r#"{"model":"qwen3","models":[]}"#,
            listed("models"),
        ),
        (
            "another spelling",
            r#"{"model":"qwen3","Fall_Backs":["sonar"]}"#,
            listed("Fall_Backs"),
        ),
        ("null", r#"{"model":"qwen3","models":null}"#, Ok(())),
        (
            "a member that only holds the name",
            r#"{"model":"qwen3","metadata":{"models":["sonar"]}}"#,
            Ok(()),
        ),
    ];
    for (what, body, want) in cases {
        assert_eq!(
            inspect(body.as_bytes(), Some("qwen3")),
            want,
            "{what}, pinned"
        );
        assert_eq!(inspect(body.as_bytes(), None), want, "{what}, unpinned");
    }
    assert_eq!(
        BodyFinding::ModelList("\"models\"".into()).to_string(),
        "\"models\" lists models a gateway would route to, which the gate does not allow"
    );
}

/// The lists are written as [`is_one_of`] compares them: lowercase ASCII with `_`, each
/// folding to itself without its `_`.
#[test]
fn the_member_lists_are_written_as_they_are_compared() {
    let lists: [&[&str]; 6] = [
        &TOOL_PROVIDER_MEMBERS,
        &PROVIDER_MEMBERS,
        &MODEL_LIST_MEMBERS,
        &URL_MEMBERS,
        &FILE_MEMBERS,
        &INERT_MEMBERS,
    ];
    for name in lists.into_iter().flatten() {
        assert!(
            name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{name}"
        );
        assert!(is_one_of(&fold(name), &[name]), "{name}");
        assert!(is_one_of(&fold(&name.to_uppercase()), &[name]), "{name}");
    }
}
