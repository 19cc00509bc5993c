//! Message tests: wire shapes, round trips, closed key sets, and every validation rule.

use super::*;

fn sample_spec() -> Spec {
    Spec {
        v: 1,
        door: Door::Turn,
        argv: vec!["claude".into(), "--setting-sources".into(), String::new()],
        env: BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin".to_owned()),
            ("_private".to_owned(), String::new()),
        ]),
        host_netns: "net:[4026531840]".into(),
        stdin: None,
    }
}

fn sample_events() -> Vec<BuildEvent> {
    vec![
        BuildEvent::StepStarted {
            step: BuildStep::Install,
            argv: vec!["bun".into(), "install".into()],
        },
        BuildEvent::StepFinished {
            step: BuildStep::Build,
            outcome: StepOutcome::TimedOut,
            code: None,
            duration_ms: 120_000,
        },
        BuildEvent::StepFinished {
            step: BuildStep::Install,
            outcome: StepOutcome::Ok,
            code: Some(0),
            duration_ms: 0,
        },
        BuildEvent::OutputVerified {
            output: "dist".into(),
            files: 12,
            bytes: u64::MAX,
        },
        BuildEvent::Refused {
            reason: "no manifest".into(),
        },
    ]
}

fn json_of(frame: &Frame) -> serde_json::Value {
    serde_json::from_slice(&frame.payload).unwrap()
}

#[test]
fn messages_have_the_reference_wire_shapes() {
    let hello = Hello::new(Door::Build, "atelier-a-s1-build@0.service")
        .to_frame()
        .unwrap();
    assert_eq!(hello.kind, FrameKind::Hello);
    assert_eq!(
        json_of(&hello),
        serde_json::json!({"v": 1, "door": "build", "unit": "atelier-a-s1-build@0.service"})
    );

    let spec = sample_spec().to_frame().unwrap();
    assert_eq!(spec.kind, FrameKind::Spec);
    assert_eq!(
        json_of(&spec),
        serde_json::json!({
            "v": 1, "door": "turn", "argv": ["claude", "--setting-sources", ""],
            "env": {"PATH": "/usr/bin", "_private": ""}, "hostNetns": "net:[4026531840]"
        })
    );

    let exit = ExitRecord::signaled("SIGKILL").to_frame().unwrap();
    assert_eq!(exit.kind, FrameKind::Exit);
    assert_eq!(
        json_of(&exit),
        serde_json::json!({"code": null, "signal": "SIGKILL"})
    );

    let event = sample_events()[1].to_frame().unwrap();
    assert_eq!(event.kind, FrameKind::Event);
    assert_eq!(
        json_of(&event),
        serde_json::json!({
            "event": "step_finished", "step": "build", "outcome": "timed_out",
            "code": null, "duration_ms": 120_000
        })
    );
}

#[test]
fn every_message_round_trips_through_a_frame() {
    for door in Door::ALL {
        let hello = Hello::new(door, "unit");
        assert_eq!(
            Hello::from_frame(&hello.to_frame().unwrap()).unwrap(),
            hello
        );
        let spec = Spec {
            door,
            ..sample_spec()
        };
        assert_eq!(Spec::from_frame(&spec.to_frame().unwrap()).unwrap(), spec);
    }
    for exit in [
        ExitRecord::exited(0),
        ExitRecord::exited(-1),
        ExitRecord::signaled("SIGTERM"),
        ExitRecord {
            code: None,
            signal: None,
        },
    ] {
        assert_eq!(
            ExitRecord::from_frame(&exit.to_frame().unwrap()).unwrap(),
            exit
        );
    }
    for event in sample_events() {
        assert_eq!(
            BuildEvent::from_frame(&event.to_frame().unwrap()).unwrap(),
            event
        );
    }
}

#[test]
fn door_names_parse_and_print() {
    for door in Door::ALL {
        assert_eq!(door.to_string().parse::<Door>().unwrap(), door);
    }
    let err = "Turn".parse::<Door>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown door \"Turn\": expected turn, build or git"
    );
}

#[test]
fn from_frame_refuses_a_frame_of_another_kind() {
    let hello_frame = Hello::new(Door::Git, "u").to_frame().unwrap();
    let err = Spec::from_frame(&hello_frame).unwrap_err();
    assert!(
        matches!(
            err,
            MessageError::WrongKind {
                expected: FrameKind::Spec,
                found: FrameKind::Hello
            }
        ),
        "{err}"
    );
    let as_event = Frame::new(FrameKind::Stdout, r#"{"event":"refused","reason":"r"}"#);
    assert!(matches!(
        BuildEvent::from_frame(&as_event).unwrap_err(),
        MessageError::WrongKind {
            expected: FrameKind::Event,
            found: FrameKind::Stdout
        }
    ));
}

#[test]
fn to_frame_refuses_an_invalid_or_oversize_message() {
    let mut spec = sample_spec();
    spec.env.insert("HOME".into(), "/root".into());
    let err = spec.to_frame().unwrap_err();
    assert_eq!(err.to_string(), "env sets the fixed env key HOME");

    let mut spec = sample_spec();
    spec.argv.push("x".repeat(FrameKind::Spec.max_len()));
    let err = spec.to_frame().unwrap_err();
    assert!(
        matches!(
            err,
            MessageError::Frame(FrameError::TooLarge {
                kind: FrameKind::Spec,
                ..
            })
        ),
        "{err}"
    );
}

#[test]
fn fixed_env_key_predicate() {
    for key in [
        "HOME",
        "BUN_RUNTIME_TRANSPILER_CACHE_PATH",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_NOSYSTEM",
        "DEDALO_",
        "DEDALO_DOOR",
        "ATELIER_",
        "ATELIER_SITE",
    ] {
        assert!(is_fixed_env_key(key), "{key}");
    }
    for key in [
        "PATH",
        "HOMEDIR",
        "home",
        "MY_HOME",
        "DEDALO",
        "dedalo_x",
        "ATELIER",
        "XATELIER_",
    ] {
        assert!(!is_fixed_env_key(key), "{key}");
    }
}

#[test]
fn env_key_names() {
    for key in ["A", "_", "_x9", "PATH", "a_B_1"] {
        assert!(is_valid_env_key(key), "{key}");
    }
    for key in ["", "1A", "A-B", "A B", "A=B", "Ä", "A\0", "$A"] {
        assert!(!is_valid_env_key(key), "{key:?}");
    }
}

/// What a refused case must produce.
enum Refusal {
    /// A shape error from serde: `MessageError::Json` whose text contains this.
    Shape(&'static str),
    /// A validation rule: any other `MessageError` whose text is exactly this.
    Rule(&'static str),
}

fn check_refusal(name: &str, result: Result<(), MessageError>, expected: &Refusal) {
    let err = match result {
        Ok(()) => panic!("{name}: accepted"),
        Err(err) => err,
    };
    let text = err.to_string();
    match expected {
        Refusal::Shape(part) => {
            assert!(
                matches!(err, MessageError::Json { .. }),
                "{name}: not a shape error: {text}"
            );
            assert!(text.contains(part), "{name}: {text:?} lacks {part:?}");
        }
        Refusal::Rule(exact) => {
            assert!(
                !matches!(err, MessageError::Json { .. }),
                "{name}: shape error: {text}"
            );
            assert_eq!(&text, exact, "{name}");
        }
    }
}

#[test]
fn hello_refusals() {
    use Refusal::*;
    let cases: &[(&str, &str, Refusal)] = &[
        (
            "unknown key",
            r#"{"v":1,"door":"turn","unit":"u","x":1}"#,
            Shape("unknown field `x`"),
        ),
        (
            "missing unit",
            r#"{"v":1,"door":"turn"}"#,
            Shape("missing field `unit`"),
        ),
        (
            "missing v",
            r#"{"door":"turn","unit":"u"}"#,
            Shape("missing field `v`"),
        ),
        (
            "unknown door",
            r#"{"v":1,"door":"shell","unit":"u"}"#,
            Shape("unknown variant `shell`"),
        ),
        (
            "uppercase door",
            r#"{"v":1,"door":"Turn","unit":"u"}"#,
            Shape("unknown variant `Turn`"),
        ),
        (
            "duplicate key",
            r#"{"v":1,"door":"turn","unit":"u","unit":"w"}"#,
            Shape("duplicate field `unit`"),
        ),
        (
            "v as string",
            r#"{"v":"1","door":"turn","unit":"u"}"#,
            Shape("invalid type"),
        ),
        (
            "array form",
            r#"[1,"turn","u"]"#,
            Shape("expected a JSON object"),
        ),
        (
            "array form after whitespace",
            " \n[1,\"turn\",\"u\"]",
            Shape("expected a JSON object"),
        ),
        ("empty payload", "", Shape("EOF while parsing")),
        (
            "trailing data",
            r#"{"v":1,"door":"turn","unit":"u"} x"#,
            Shape("trailing characters"),
        ),
        ("not JSON", "{v:1}", Shape("key must be a string")),
        (
            "version 2",
            r#"{"v":2,"door":"turn","unit":"u"}"#,
            Rule("hello has version 2, only version 1 is spoken"),
        ),
        (
            "version 0",
            r#"{"v":0,"door":"turn","unit":"u"}"#,
            Rule("hello has version 0, only version 1 is spoken"),
        ),
        (
            "empty unit",
            r#"{"v":1,"door":"turn","unit":""}"#,
            Rule("unit is empty"),
        ),
    ];
    for (name, json, expected) in cases {
        check_refusal(name, Hello::from_json(json.as_bytes()).map(drop), expected);
    }
    Hello::from_json(br#"{"unit":"u","door":"git","v":1}"#).unwrap();
}

#[test]
fn spec_refusals() {
    use Refusal::*;
    let base = serde_json::to_value(sample_spec()).unwrap();
    let with = |key: &str, value: serde_json::Value| {
        let mut json = base.clone();
        json[key] = value;
        json.to_string()
    };
    let env = |key: &str, value: &str| with("env", serde_json::json!({ key: value }));
    let cases: Vec<(&str, String, Refusal)> = vec![
        (
            "unknown key",
            with("extra", true.into()),
            Shape("unknown field `extra`"),
        ),
        (
            "snake_case hostNetns",
            {
                let mut json = base.clone();
                let netns = json.as_object_mut().unwrap().remove("hostNetns").unwrap();
                json["host_netns"] = netns;
                json.to_string()
            },
            Shape("unknown field `host_netns`"),
        ),
        (
            "missing env",
            {
                let mut json = base.clone();
                json.as_object_mut().unwrap().remove("env");
                json.to_string()
            },
            Shape("missing field `env`"),
        ),
        (
            "array form",
            serde_json::json!([1, "turn", ["ls"], {}, "net"]).to_string(),
            Shape("expected a JSON object"),
        ),
        (
            "argv not array",
            with("argv", "ls".into()),
            Shape("invalid type"),
        ),
        (
            "argv element not string",
            with("argv", serde_json::json!(["ls", 1])),
            Shape("invalid type"),
        ),
        (
            "env value not string",
            with("env", serde_json::json!({"A": 1})),
            Shape("invalid type"),
        ),
        (
            "env value null",
            with("env", serde_json::json!({"A": null})),
            Shape("invalid type"),
        ),
        (
            "duplicate env key",
            {
                let json = base.to_string();
                json.replace(r#""env":{"#, r#""env":{"PATH":"/evil","#)
            },
            Shape("duplicate env key `PATH`"),
        ),
        (
            "version 2",
            with("v", 2.into()),
            Rule("spec has version 2, only version 1 is spoken"),
        ),
        (
            "empty argv",
            with("argv", serde_json::json!([])),
            Rule("argv is empty"),
        ),
        (
            "empty program",
            with("argv", serde_json::json!(["", "x"])),
            Rule("argv[0] is empty"),
        ),
        (
            "NUL in argument",
            with("argv", serde_json::json!(["ls", "a\u{0}b"])),
            Rule("argv[1] contains a NUL byte"),
        ),
        (
            "empty env key",
            env("", "x"),
            Rule("env key \"\" is not a valid name"),
        ),
        (
            "env key with digit first",
            env("1PATH", "x"),
            Rule("env key \"1PATH\" is not a valid name"),
        ),
        (
            "env key with dash",
            env("MY-VAR", "x"),
            Rule("env key \"MY-VAR\" is not a valid name"),
        ),
        (
            "env key with equals",
            env("A=B", "x"),
            Rule("env key \"A=B\" is not a valid name"),
        ),
        (
            "fixed HOME",
            env("HOME", "/tmp"),
            Rule("env sets the fixed env key HOME"),
        ),
        (
            "fixed bun cache",
            env("BUN_RUNTIME_TRANSPILER_CACHE_PATH", "0"),
            Rule("env sets the fixed env key BUN_RUNTIME_TRANSPILER_CACHE_PATH"),
        ),
        (
            "fixed git global",
            env("GIT_CONFIG_GLOBAL", "/x"),
            Rule("env sets the fixed env key GIT_CONFIG_GLOBAL"),
        ),
        (
            "fixed git nosystem",
            env("GIT_CONFIG_NOSYSTEM", "0"),
            Rule("env sets the fixed env key GIT_CONFIG_NOSYSTEM"),
        ),
        (
            "fixed DEDALO_ prefix",
            env("DEDALO_DOOR", "git"),
            Rule("env sets the fixed env key DEDALO_DOOR"),
        ),
        (
            "fixed ATELIER_ prefix",
            env("ATELIER_UNIT", "x"),
            Rule("env sets the fixed env key ATELIER_UNIT"),
        ),
        (
            "NUL in env value",
            env("A", "x\u{0}"),
            Rule("env value of A contains a NUL byte"),
        ),
        (
            "empty hostNetns",
            with("hostNetns", "".into()),
            Rule("hostNetns is empty"),
        ),
    ];
    for (name, json, expected) in &cases {
        check_refusal(name, Spec::from_json(json.as_bytes()).map(drop), expected);
    }
    // Later argv elements may be empty, and env may be empty.
    let ok = with("argv", serde_json::json!(["claude", "", ""]));
    Spec::from_json(ok.as_bytes()).unwrap();
    Spec::from_json(with("env", serde_json::json!({})).as_bytes()).unwrap();
}

#[test]
fn exit_record_refusals() {
    use Refusal::*;
    let cases: &[(&str, &str, Refusal)] = &[
        ("array form", r#"[0,null]"#, Shape("expected a JSON object")),
        (
            "missing signal",
            r#"{"code":0}"#,
            Shape("missing field `signal`"),
        ),
        (
            "missing code",
            r#"{"signal":null}"#,
            Shape("missing field `code`"),
        ),
        (
            "unknown key",
            r#"{"code":0,"signal":null,"core":true}"#,
            Shape("unknown field `core`"),
        ),
        (
            "code not int",
            r#"{"code":1.5,"signal":null}"#,
            Shape("invalid type"),
        ),
        (
            "code over i32",
            r#"{"code":4294967296,"signal":null}"#,
            Shape("invalid value"),
        ),
        (
            "signal number",
            r#"{"code":null,"signal":9}"#,
            Shape("invalid type"),
        ),
        (
            "empty signal",
            r#"{"code":null,"signal":""}"#,
            Rule("signal is empty"),
        ),
    ];
    for (name, json, expected) in cases {
        check_refusal(
            name,
            ExitRecord::from_json(json.as_bytes()).map(drop),
            expected,
        );
    }
    assert_eq!(
        ExitRecord::from_json(br#"{"code":null,"signal":null}"#).unwrap(),
        ExitRecord {
            code: None,
            signal: None
        }
    );
}

#[test]
fn build_event_refusals() {
    use Refusal::*;
    let cases: &[(&str, &str, Refusal)] = &[
        (
            "array form",
            r#"["refused","r"]"#,
            Shape("expected a JSON object"),
        ),
        (
            "missing tag",
            r#"{"reason":"r"}"#,
            Shape("missing field `event`"),
        ),
        (
            "unknown tag",
            r#"{"event":"step_skipped"}"#,
            Shape("unknown variant `step_skipped`"),
        ),
        (
            "camelCase tag",
            r#"{"event":"stepStarted","step":"build","argv":["x"]}"#,
            Shape("unknown variant `stepStarted`"),
        ),
        (
            "unknown key",
            r#"{"event":"refused","reason":"r","extra":1}"#,
            Shape("unknown field `extra`"),
        ),
        (
            "key of another variant",
            r#"{"event":"refused","reason":"r","step":"build"}"#,
            Shape("unknown field `step`"),
        ),
        (
            "unknown step",
            r#"{"event":"step_started","step":"deploy","argv":["x"]}"#,
            Shape("unknown variant `deploy`"),
        ),
        (
            "unknown outcome",
            r#"{"event":"step_finished","step":"build","outcome":"crashed","code":null,"duration_ms":1}"#,
            Shape("unknown variant `crashed`"),
        ),
        (
            "missing code",
            r#"{"event":"step_finished","step":"build","outcome":"ok","duration_ms":1}"#,
            Shape("missing field `code`"),
        ),
        (
            "negative duration",
            r#"{"event":"step_finished","step":"build","outcome":"ok","code":0,"duration_ms":-1}"#,
            Shape("invalid value"),
        ),
        (
            "empty argv",
            r#"{"event":"step_started","step":"install","argv":[]}"#,
            Rule("argv is empty"),
        ),
        (
            "empty program",
            r#"{"event":"step_started","step":"install","argv":[""]}"#,
            Rule("argv[0] is empty"),
        ),
        (
            "empty output",
            r#"{"event":"output_verified","output":"","files":0,"bytes":0}"#,
            Rule("output is empty"),
        ),
        (
            "empty reason",
            r#"{"event":"refused","reason":""}"#,
            Rule("reason is empty"),
        ),
    ];
    for (name, json, expected) in cases {
        check_refusal(
            name,
            BuildEvent::from_json(json.as_bytes()).map(drop),
            expected,
        );
    }
}
