//! The templates in `units/`, `tmpfiles/` and `polkit/`, and the one way they are filled:
//! every `@NAME@` (uppercase letters and `_`) is replaced by its value, in a single pass, so a
//! value is never itself scanned for placeholders.

use super::RenderError;

/// A template: its file name (for errors) and its text.
#[derive(Debug, Clone, Copy)]
pub struct Template {
    /// The file it was read from.
    pub name: &'static str,
    /// Its text.
    pub text: &'static str,
}

macro_rules! template {
    ($const:ident, $dir:literal, $file:literal) => {
        #[doc = concat!("The template `", $dir, "/", $file, "`.")]
        pub const $const: Template = Template {
            name: $file,
            text: include_str!(concat!("../../../../", $dir, "/", $file)),
        };
    };
}

template!(SITED_SOCKET, "units", "atelier-sited.socket.in");
template!(SITED_SERVICE, "units", "atelier-sited.service.in");
template!(DOOR_SOCKET, "units", "atelier-door.socket.in");
template!(DOOR_TARGET, "units", "atelier-door.target.in");
template!(DOOR_SERVICE, "units", "atelier-door@.service.in");
template!(GATE_SOCKET, "units", "atelier-gate.socket.in");
template!(GATE_SERVICE, "units", "atelier-gate.service.in");
template!(
    GATE_DECISIONS_SOCKET,
    "units",
    "atelier-gate-decisions.socket.in"
);
template!(CHATD_SOCKET, "units", "atelier-chatd.socket.in");
template!(CHATD_SERVICE, "units", "atelier-chatd.service.in");
template!(CHATD_PURGE_TIMER, "units", "atelier-chatd-purge.timer.in");
template!(
    CHATD_PURGE_SERVICE,
    "units",
    "atelier-chatd-purge.service.in"
);
template!(METRICS_SOCKET, "units", "atelier-metrics.socket.in");
template!(TMPFILES, "tmpfiles", "atelier.conf.in");
template!(POLKIT_RULE, "polkit", "atelier.rules.in");

/// Every template, for the test that each one's placeholders are filled.
pub const ALL: [Template; 15] = [
    SITED_SOCKET,
    SITED_SERVICE,
    DOOR_SOCKET,
    DOOR_TARGET,
    DOOR_SERVICE,
    GATE_SOCKET,
    GATE_SERVICE,
    GATE_DECISIONS_SOCKET,
    CHATD_SOCKET,
    CHATD_SERVICE,
    CHATD_PURGE_TIMER,
    CHATD_PURGE_SERVICE,
    METRICS_SOCKET,
    TMPFILES,
    POLKIT_RULE,
];

/// Fills `template` with `values`; a placeholder without a value is an error.
pub fn fill(template: Template, values: &[(&str, String)]) -> Result<String, RenderError> {
    let text = template.text;
    let mut out = String::with_capacity(text.len() * 2);
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let name_len = after
            .bytes()
            .take_while(|b| b.is_ascii_uppercase() || *b == b'_')
            .count();
        if name_len > 0 && after.as_bytes().get(name_len) == Some(&b'@') {
            let name = &after[..name_len];
            let value = values.iter().find(|(key, _)| *key == name).ok_or_else(|| {
                RenderError::UnfilledPlaceholder {
                    template: template.name,
                    name: name.to_owned(),
                }
            })?;
            out.push_str(&value.1);
            rest = &after[name_len + 1..];
        } else {
            out.push('@');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The placeholders a template names, in order of first appearance.
pub fn placeholders(template: Template) -> Vec<&'static str> {
    let text = template.text;
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let after = &rest[at + 1..];
        let name_len = after
            .bytes()
            .take_while(|b| b.is_ascii_uppercase() || *b == b'_')
            .count();
        if name_len > 0 && after.as_bytes().get(name_len) == Some(&b'@') {
            let name = &after[..name_len];
            if !names.contains(&name) {
                names.push(name);
            }
            rest = &after[name_len + 1..];
        } else {
            rest = after;
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_once_and_refuses_a_missing_value() {
        let t = Template {
            name: "t",
            text: "a=@A@ keep=@system-service b=@B@ mail@host\n",
        };
        let filled = fill(t, &[("A", "@B@".into()), ("B", "2".into())]).unwrap();
        assert_eq!(filled, "a=@B@ keep=@system-service b=2 mail@host\n");
        assert_eq!(placeholders(t), ["A", "B"]);
        let err = fill(t, &[("A", "1".into())]).unwrap_err();
        assert_eq!(
            err,
            RenderError::UnfilledPlaceholder {
                template: "t",
                name: "B".into()
            }
        );
    }
}
