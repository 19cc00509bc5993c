//! The unit environment table: doors, workdirs, forwards and the keys handed to the program.

use super::*;

/// A unit environment as written in a table.
type Env<'a> = &'a [(&'a str, &'a str)];

fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

const SERVICE_CGROUP: &str = "0::/system.slice/atelier-example-s1-turn@3-1234-0.service\n";

#[test]
fn a_missing_or_unknown_door_or_workdir_is_no_door() {
    let cases: [(&str, Env<'_>, &str); 6] = [
        ("nothing stated", &[], "ATELIER_DOOR is not set"),
        (
            "no door",
            &[("ATELIER_UNIT_WORKDIR", "/w")],
            "ATELIER_DOOR is not set",
        ),
        (
            "unknown door",
            &[("ATELIER_DOOR", "deploy"), ("ATELIER_UNIT_WORKDIR", "/w")],
            "ATELIER_DOOR=\"deploy\" is not turn, build or git",
        ),
        (
            "door in capitals",
            &[("ATELIER_DOOR", "TURN"), ("ATELIER_UNIT_WORKDIR", "/w")],
            "is not turn, build or git",
        ),
        (
            "no workdir",
            &[("ATELIER_DOOR", "git")],
            "ATELIER_UNIT_WORKDIR is not set",
        ),
        (
            "relative workdir",
            &[("ATELIER_DOOR", "git"), ("ATELIER_UNIT_WORKDIR", "sites/a")],
            "is not an absolute path",
        ),
    ];
    for (name, env, says) in cases {
        match Settings::from_env(vars(env), false, None) {
            Err(ShimError::NoDoor(why)) => assert!(why.contains(says), "{name}: {why}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn forwards_follow_the_door_and_the_units_sockets() {
    let all = [
        ("ATELIER_UNIT_WORKDIR", "/w"),
        ("ATELIER_GATE_SOCKET", "/run/atelier-egress/x.sock"),
        ("ATELIER_MCP_SOCKET", "/run/atelier-egress/mcp.sock"),
    ];
    let proxy = Forward {
        name: "proxy",
        listen: "127.0.0.1:3128".parse().unwrap(),
        target: "/run/atelier-egress/x.sock".into(),
    };
    let mcp = Forward {
        name: "mcp",
        listen: "127.0.0.1:3129".parse().unwrap(),
        target: "/run/atelier-egress/mcp.sock".into(),
    };
    let mcp_only = [all[0], all[2]];
    let cases: Vec<(&str, &str, Env<'_>, Vec<Forward>)> = vec![
        (
            "turn with both sockets",
            "turn",
            &all,
            vec![proxy.clone(), mcp.clone()],
        ),
        (
            "turn with the gate only",
            "turn",
            &all[..2],
            vec![proxy.clone()],
        ),
        (
            "turn with the MCP socket only",
            "turn",
            &mcp_only,
            vec![mcp.clone()],
        ),
        (
            "build ignores the MCP socket",
            "build",
            &all,
            vec![proxy.clone()],
        ),
        ("git has no way out", "git", &all, vec![]),
        ("turn without sockets", "turn", &all[..1], vec![]),
    ];
    for (name, door, env, want) in cases {
        let mut env = vars(env);
        env.push(("ATELIER_DOOR".into(), door.into()));
        let settings = Settings::from_env(env, false, None).unwrap();
        assert_eq!(
            settings.confinement,
            Confinement::Confined { forwards: want },
            "{name}"
        );
    }
}

#[test]
fn unconfined_has_no_proof_no_forwards_and_says_unconfined() {
    let env = vars(&[
        ("ATELIER_DOOR", "turn"),
        ("ATELIER_UNIT_WORKDIR", "/w"),
        ("ATELIER_GATE_SOCKET", "/g.sock"),
    ]);
    let settings = Settings::from_env(env, true, Some(SERVICE_CGROUP)).unwrap();
    assert_eq!(settings.confinement, Confinement::Unconfined);
    assert_eq!(settings.unit, "unconfined");
}

#[test]
fn the_unit_name_comes_from_the_service_cgroup() {
    let env = || vars(&[("ATELIER_DOOR", "turn"), ("ATELIER_UNIT_WORKDIR", "/w")]);
    let settings = Settings::from_env(env(), false, Some(SERVICE_CGROUP)).unwrap();
    assert_eq!(settings.unit, "atelier-example-s1-turn@3-1234-0.service");
    let outside =
        Settings::from_env(env(), false, Some("0::/user.slice/session-1.scope\n")).unwrap();
    assert_eq!(outside.unit, "unconfined");
    let unreadable = Settings::from_env(env(), false, None).unwrap();
    assert_eq!(unreadable.unit, "unconfined");
}

#[test]
fn only_the_keys_the_unit_fixes_are_handed_to_the_program() {
    let unit = [
        ("ATELIER_DOOR", "turn"),
        ("ATELIER_UNIT_WORKDIR", "/w"),
        ("ATELIER_GATE_SOCKET", "/g.sock"),
        ("DEDALO_DOOR", "turn"),
        ("HOME", "/var/lib/atelier/example/agents/s1/turn"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("BUN_RUNTIME_TRANSPILER_CACHE_PATH", "/c"),
        ("XDG_CONFIG_HOME", "/x"),
        ("CLAUDE_CONFIG_DIR", "/cl"),
        ("PATH", "/usr/bin"),
        ("INVOCATION_ID", "abc"),
        ("JOURNAL_STREAM", "8:123"),
    ];
    let passed = |door: &str| {
        let mut env = vars(&unit);
        env[0].1 = door.into();
        let settings = Settings::from_env(env, false, None).unwrap();
        settings
            .unit_env
            .iter()
            .map(|(k, _)| k.to_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        passed("turn"),
        [
            "HOME",
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_NOSYSTEM",
            "BUN_RUNTIME_TRANSPILER_CACHE_PATH",
            "XDG_CONFIG_HOME",
            "CLAUDE_CONFIG_DIR"
        ]
    );
    assert_eq!(
        passed("build"),
        [
            "HOME",
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_NOSYSTEM",
            "BUN_RUNTIME_TRANSPILER_CACHE_PATH"
        ]
    );
}

#[test]
fn fixed_keys_by_door() {
    let cases = [
        (Door::Turn, "HOME", true),
        (Door::Git, "HOME", true),
        (Door::Build, "GIT_CONFIG_GLOBAL", true),
        (Door::Build, "ATELIER_ANYTHING", true),
        (Door::Build, "DEDALO_ANYTHING", true),
        (Door::Turn, "XDG_CONFIG_HOME", true),
        (Door::Turn, "CLAUDE_CONFIG_DIR", true),
        (Door::Turn, "XDG_DATA_HOME", true),
        (Door::Turn, "XDG_STATE_HOME", true),
        (Door::Turn, "XDG_CACHE_HOME", true),
        (Door::Build, "XDG_CONFIG_HOME", false),
        (Door::Git, "CLAUDE_CONFIG_DIR", false),
        (Door::Turn, "PATH", false),
        (Door::Turn, "XDG_RUNTIME_DIR", false),
        (Door::Turn, "home", false),
    ];
    for (door, key, want) in cases {
        assert_eq!(is_door_fixed_env_key(door, key), want, "{door} {key}");
    }
}
