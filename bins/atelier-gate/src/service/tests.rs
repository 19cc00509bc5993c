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
            Err(SettingsError::BenchmarkRangeInProduction),
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
            Err(SettingsError::NoPlan),
        ),
    ];
    for (what, settings, want) in cases {
        assert_eq!(settings.check(), want, "{what}");
    }
    assert!(SettingsError::BenchmarkRangeInProduction
        .to_string()
        .starts_with("benchmark_range_in_production: "));
}
