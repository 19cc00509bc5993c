//! Expectations as data: a [`Property`] names a D-Bus interface and a property, an
//! [`Expected`] says what its loaded [`Value`] must be, and [`check`] finds the first property
//! of a [`LoadedUnit`] that differs, as a [`Nonconformant`] naming it.

use std::collections::BTreeMap;
use std::fmt;

use crate::value::Value;

/// The systemd D-Bus interfaces a unit's properties live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Interface {
    /// `org.freedesktop.systemd1.Unit`: every unit's dependencies and states.
    Unit,
    /// `org.freedesktop.systemd1.Service`: execution, sandboxing and resource properties.
    Service,
    /// `org.freedesktop.systemd1.Socket`: listeners and socket options.
    Socket,
}

// === impl Interface ===

impl Interface {
    /// The interface's D-Bus name.
    pub fn dbus_name(self) -> &'static str {
        match self {
            Interface::Unit => "org.freedesktop.systemd1.Unit",
            Interface::Service => "org.freedesktop.systemd1.Service",
            Interface::Socket => "org.freedesktop.systemd1.Socket",
        }
    }
}

/// The kinds of unit Atelier reads properties of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnitKind {
    /// A `.service`.
    Service,
    /// A `.socket`.
    Socket,
    /// A `.target` (its own interface carries no properties).
    Target,
}

// === impl UnitKind ===

impl UnitKind {
    /// The kind a unit name's suffix says, if it is one of these.
    pub fn of(unit: &str) -> Option<Self> {
        match unit.rsplit_once('.')?.1 {
            "service" => Some(UnitKind::Service),
            "socket" => Some(UnitKind::Socket),
            "target" => Some(UnitKind::Target),
            _ => None,
        }
    }

    /// The unit name suffix, without the dot.
    pub fn suffix(self) -> &'static str {
        match self {
            UnitKind::Service => "service",
            UnitKind::Socket => "socket",
            UnitKind::Target => "target",
        }
    }

    /// The interfaces whose properties a unit of this kind has.
    pub fn interfaces(self) -> &'static [Interface] {
        match self {
            UnitKind::Service => &[Interface::Unit, Interface::Service],
            UnitKind::Socket => &[Interface::Unit, Interface::Socket],
            UnitKind::Target => &[Interface::Unit],
        }
    }
}

/// A property PID 1 reports: its interface and its D-Bus name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Property {
    /// The interface it lives on.
    pub interface: Interface,
    /// Its D-Bus name, e.g. `PrivateNetwork` (the directive's name, or its D-Bus form such as
    /// `RuntimeMaxUSec` for `RuntimeMaxSec=`).
    pub name: &'static str,
}

// === impl Property ===

impl Property {
    /// A property of the Unit interface.
    pub const fn unit(name: &'static str) -> Self {
        Self {
            interface: Interface::Unit,
            name,
        }
    }

    /// A property of the Service interface.
    pub const fn service(name: &'static str) -> Self {
        Self {
            interface: Interface::Service,
            name,
        }
    }

    /// A property of the Socket interface.
    pub const fn socket(name: &'static str) -> Self {
        Self {
            interface: Interface::Socket,
            name,
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// What a property's loaded value must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Exactly this value (lists in this order).
    Is(Value),
    /// A list holding exactly these items, in any order.
    SameSet(Value),
    /// A list holding at least these items (systemd adds implicit dependencies).
    Includes(Vec<String>),
    /// Empty or unset; a property this PID 1 does not know counts as unset, since no unit
    /// file can set it either.
    Empty,
    /// A non-empty allow list (its first item unmarked by `~`) holding none of these items:
    /// a syscall filter, whose groups PID 1 expands by its own release's tables, so only what
    /// must never be in it can be named.
    AllowListWithout(Vec<String>),
}

// === impl Expected ===

impl Expected {
    /// Returns true if and only if `loaded` (`None`: PID 1 reports no such property) meets
    /// the expectation.
    pub fn is_met_by(&self, loaded: Option<&Value>) -> bool {
        match (self, loaded) {
            (Expected::Empty, None) => true,
            (Expected::Empty, Some(value)) => value.is_empty(),
            (Expected::Includes(items), None) => items.is_empty(),
            (Expected::AllowListWithout(_), None) => false,
            (_, None) => false,
            (Expected::Is(expected), Some(value)) => expected == value,
            (Expected::SameSet(expected), Some(value)) => {
                value.items().is_some() && expected.sorted() == value.sorted()
            }
            (Expected::Includes(items), Some(value)) => value
                .items()
                .is_some_and(|have| items.iter().all(|item| have.contains(item))),
            (Expected::AllowListWithout(banned), Some(value)) => {
                value.items().is_some_and(|have| {
                    have.first().is_some_and(|first| !first.starts_with('~'))
                        && !have.iter().any(|item| banned.contains(item))
                })
            }
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Is(value) => write!(f, "{value}"),
            Expected::SameSet(value) => write!(f, "exactly {value} in any order"),
            Expected::Includes(items) => write!(f, "at least [{}]", items.join(", ")),
            Expected::Empty => f.write_str("empty"),
            Expected::AllowListWithout(banned) => {
                write!(f, "an allow list without [{}]", banned.join(", "))
            }
        }
    }
}

/// One unit's expectations, in the order they are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitExpectations {
    /// The unit to read (a template is read through an instance of it).
    pub unit: String,
    /// What it is.
    pub kind: UnitKind,
    /// Property by property, what PID 1 must have loaded.
    pub expected: Vec<(Property, Expected)>,
}

/// The properties PID 1 loaded for one unit, normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedUnit {
    /// The unit's name.
    pub unit: String,
    /// What it is.
    pub kind: UnitKind,
    /// Every property read, by interface and name.
    pub properties: BTreeMap<(Interface, String), Value>,
}

// === impl LoadedUnit ===

impl LoadedUnit {
    /// An empty set of properties for `unit`.
    pub fn new(unit: impl Into<String>, kind: UnitKind) -> Self {
        Self {
            unit: unit.into(),
            kind,
            properties: BTreeMap::new(),
        }
    }

    /// The loaded value of `property`, if PID 1 reported it.
    pub fn get(&self, property: &Property) -> Option<&Value> {
        self.properties
            .get(&(property.interface, property.name.to_owned()))
    }

    /// Records `value` for `property`.
    pub fn set(&mut self, property: Property, value: Value) {
        self.properties
            .insert((property.interface, property.name.to_owned()), value);
    }
}

/// A property PID 1 loaded differently from what Atelier expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{unit}: {property} is {}, expected {expected}", display_loaded(.expected, .loaded))]
pub struct Nonconformant {
    /// The unit read.
    pub unit: String,
    /// The first property that differs.
    pub property: Property,
    /// What was expected.
    pub expected: Expected,
    /// What PID 1 loaded; `None` when it reports no such property (a directive this systemd
    /// does not know, silently ignored in the unit file).
    pub loaded: Option<Value>,
}

fn display_loaded(expected: &Expected, loaded: &Option<Value>) -> String {
    match (expected, loaded) {
        // A syscall filter is hundreds of names: only what breaks the expectation is shown.
        (Expected::AllowListWithout(banned), Some(value)) => match value.items() {
            Some(items) if items.is_empty() => "empty".to_owned(),
            Some(items) if items[0].starts_with('~') => "a deny list".to_owned(),
            Some(items) => {
                let allowed: Vec<&str> = items
                    .iter()
                    .filter(|item| banned.contains(item))
                    .map(String::as_str)
                    .collect();
                format!("an allow list with [{}]", allowed.join(", "))
            }
            None => value.to_string(),
        },
        (_, Some(value)) => value.to_string(),
        (_, None) => "not known to this PID 1".to_owned(),
    }
}

/// The first of `expected` that `loaded` does not meet, in order.
pub fn check(loaded: &LoadedUnit, expected: &[(Property, Expected)]) -> Result<(), Nonconformant> {
    for (property, expectation) in expected {
        let value = loaded.get(property);
        if !expectation.is_met_by(value) {
            return Err(Nonconformant {
                unit: loaded.unit.clone(),
                property: *property,
                expected: expectation.clone(),
                loaded: value.cloned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NETWORK: Property = Property::service("PrivateNetwork");
    const USER: Property = Property::service("User");
    const AFTER: Property = Property::unit("After");
    const PATHS: Property = Property::service("ReadWritePaths");
    const PRE: Property = Property::service("ExecStartPre");

    fn unit() -> LoadedUnit {
        let mut loaded = LoadedUnit::new("x@probe.service", UnitKind::Service);
        loaded.set(NETWORK, Value::Bool(true));
        loaded.set(USER, Value::str("atelier-a-example_1"));
        loaded.set(
            AFTER,
            Value::list(["sysinit.target", "a.target", "b.service"]),
        );
        loaded.set(PATHS, Value::list(["/w", "/v"]));
        loaded
    }

    #[test]
    fn named_cases() {
        let cases: Vec<(&str, (Property, Expected), bool)> = vec![
            (
                "equal bool",
                (NETWORK, Expected::Is(Value::Bool(true))),
                true,
            ),
            (
                "different bool",
                (NETWORK, Expected::Is(Value::Bool(false))),
                false,
            ),
            (
                "same type other string",
                (USER, Expected::Is(Value::str("root"))),
                false,
            ),
            (
                "bool where a string is expected",
                (NETWORK, Expected::Is(Value::str("yes"))),
                false,
            ),
            (
                "includes a subset",
                (
                    AFTER,
                    Expected::Includes(vec!["a.target".into(), "b.service".into()]),
                ),
                true,
            ),
            (
                "includes a missing item",
                (AFTER, Expected::Includes(vec!["c.service".into()])),
                false,
            ),
            (
                "same set in another order",
                (PATHS, Expected::SameSet(Value::list(["/v", "/w"]))),
                true,
            ),
            (
                "same set with one more",
                (PATHS, Expected::SameSet(Value::list(["/v", "/w", "/x"]))),
                false,
            ),
            (
                "list order matters for Is",
                (PATHS, Expected::Is(Value::list(["/v", "/w"]))),
                false,
            ),
            (
                "unknown property counts as empty",
                (PRE, Expected::Empty),
                true,
            ),
            ("a set list is not empty", (PATHS, Expected::Empty), false),
            (
                "unknown property fails an equality",
                (
                    Property::service("PrivatePIDs"),
                    Expected::Is(Value::Bool(true)),
                ),
                false,
            ),
            (
                "set semantics need a list",
                (NETWORK, Expected::SameSet(Value::list(["yes"]))),
                false,
            ),
        ];
        let loaded = unit();
        for (name, (property, expected), ok) in cases {
            let result = check(&loaded, &[(property, expected.clone())]);
            assert_eq!(result.is_ok(), ok, "{name}: {result:?}");
            if let Err(refusal) = result {
                assert_eq!(refusal.property, property, "{name}");
                assert_eq!(refusal.expected, expected, "{name}");
            }
        }
    }

    #[test]
    fn first_mismatch_is_named_in_order() {
        let refusal = check(
            &unit(),
            &[
                (NETWORK, Expected::Is(Value::Bool(true))),
                (USER, Expected::Is(Value::str("nobody"))),
                (PATHS, Expected::Empty),
            ],
        )
        .unwrap_err();
        assert_eq!(refusal.property.name, "User");
        assert_eq!(refusal.loaded, Some(Value::str("atelier-a-example_1")));
        assert_eq!(
            refusal.to_string(),
            "x@probe.service: User is \"atelier-a-example_1\", expected \"nobody\""
        );
        let missing = check(
            &unit(),
            &[(
                Property::service("PrivateIPC"),
                Expected::Is(Value::Bool(true)),
            )],
        )
        .unwrap_err();
        assert_eq!(
            missing.to_string(),
            "x@probe.service: PrivateIPC is not known to this PID 1, expected yes"
        );
    }

    #[test]
    fn kinds_from_names() {
        assert_eq!(UnitKind::of("a-b@1-2-3.service"), Some(UnitKind::Service));
        assert_eq!(UnitKind::of("a.socket"), Some(UnitKind::Socket));
        assert_eq!(UnitKind::of("a.target"), Some(UnitKind::Target));
        assert_eq!(UnitKind::of("a.mount"), None);
        assert_eq!(UnitKind::of("service"), None);
    }
}
