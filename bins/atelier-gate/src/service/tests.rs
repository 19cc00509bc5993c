//! The `--plan` argument.

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
