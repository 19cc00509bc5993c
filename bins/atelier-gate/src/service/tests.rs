//! The `--plan` argument, the deployment, and the settings the gate refuses to start with.

use super::*;

#[test]
fn a_plan_argument_is_a_door_and_a_path() {
    assert_eq!(
        parse_plan_arg("turn=/etc/atelier/example/gate/s1-turn.json"),
        Ok((
            "turn".to_owned(),
            PathBuf::from("/etc/atelier/example/gate/s1-turn.json")
        ))
    );
    for bad in ["turn", "=/x", "turn=", ""] {
        assert!(parse_plan_arg(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn deployments_parse_strictly() {
    assert_eq!(Deployment::parse("production"), Ok(Deployment::Production));
    assert_eq!(
        Deployment::parse("development"),
        Ok(Deployment::Development)
    );
    for bad in ["", "Production", "dev", "production "] {
        assert_eq!(
            Deployment::parse(bad),
            Err(SettingsError::UnknownDeployment(bad.to_owned()))
        );
    }
}

fn settings(allow_benchmark_range: bool, deployment: Deployment) -> Settings {
    Settings {
        instance: "example".to_owned(),
        site: 1,
        plans: vec![("turn".to_owned(), PathBuf::from("/x/s1-turn.json"))],
        allow_benchmark_range,
        deployment,
    }
}

#[test]
fn the_benchmark_range_is_refused_in_production_and_allowed_in_development() {
    let cases = [
        (
            "production, flag",
            settings(true, Deployment::Production),
            Err(vec![SettingsError::BenchmarkRangeInProduction]),
        ),
        (
            "production, no flag",
            settings(false, Deployment::Production),
            Ok(Policy::default()),
        ),
        (
            "development, flag",
            settings(true, Deployment::Development),
            Ok(Policy {
                allow_benchmark_range: true,
            }),
        ),
        (
            "development, no flag",
            settings(false, Deployment::Development),
            Ok(Policy::default()),
        ),
        (
            "no plan",
            Settings {
                plans: vec![],
                ..settings(false, Deployment::Development)
            },
            Err(vec![SettingsError::NoPlan]),
        ),
        (
            "no plan, flag in production",
            Settings {
                plans: vec![],
                ..settings(true, Deployment::Production)
            },
            Err(vec![
                SettingsError::NoPlan,
                SettingsError::BenchmarkRangeInProduction,
            ]),
        ),
    ];
    for (what, settings, want) in cases {
        let got = settings.check().map_err(Problems::into_vec);
        assert_eq!(got, want, "{what}");
    }
    assert!(SettingsError::BenchmarkRangeInProduction
        .to_string()
        .starts_with("benchmark_range_in_production: "));
}

#[test]
fn the_status_counts_the_tunnels_open_per_door() {
    for (name, open, status) in [
        (
            "none open",
            vec![(DoorName::Turn, 0), (DoorName::Build, 0)],
            "idle; serving turn, build",
        ),
        (
            "one",
            vec![(DoorName::Turn, 1), (DoorName::Build, 0)],
            "1 tunnel open (turn 1, build 0); serving turn, build",
        ),
        (
            "several across doors",
            vec![(DoorName::Turn, 2), (DoorName::Build, 1)],
            "3 tunnels open (turn 2, build 1); serving turn, build",
        ),
        (
            "one door",
            vec![(DoorName::Build, 4)],
            "4 tunnels open (build 4); serving build",
        ),
    ] {
        assert_eq!(live_status(&open), status, "{name}");
    }
}
