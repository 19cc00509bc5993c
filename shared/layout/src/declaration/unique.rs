//! The declaration's text read into a JSON tree as serde_json reads it, except that an object
//! naming one key twice is refused. serde_json keeps the last of two equal keys; the checks
//! would then see one value while the file an operator keeps (and the provisioner copies
//! beside the instance, world-readable) holds both, a pasted key among them.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a text is no declaration tree.
#[derive(Debug)]
pub(crate) enum Unreadable {
    /// Not JSON; serde_json's message names a line and column.
    Malformed(serde_json::Error),
    /// An object names `key` twice; `error` says where.
    DuplicateKey {
        key: String,
        error: serde_json::Error,
    },
}

/// Reads `text` as one JSON document whose objects each name a key at most once.
pub(crate) fn parse(text: &str) -> Result<Value, Unreadable> {
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_str(text);
    let read = Tree {
        duplicate: &duplicate,
    }
    .deserialize(&mut reader)
    .and_then(|value| reader.end().map(|()| value));
    read.map_err(|error| match duplicate.into_inner() {
        Some(key) => Unreadable::DuplicateKey { key, error },
        None => Unreadable::Malformed(error),
    })
}

/// A JSON value; the first key found twice in an object is recorded in `duplicate`.
#[derive(Clone, Copy)]
struct Tree<'a> {
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Tree<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tree<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut array = Vec::new();
        while let Some(item) = items.next_element_seed(self)? {
            array.push(item);
        }
        Ok(Value::Array(array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = members.next_key::<String>()? {
            if object.contains_key(&key) {
                let error = A::Error::custom(format_args!("the key {key:?} is named twice"));
                *self.duplicate.borrow_mut() = Some(key);
                return Err(error);
            }
            let value = members.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": "\u00e9"}"#,
            "[]",
            "  17 ",
            r#"{"a": {"k": 1}, "b": {"k": 2}}"#,
        ] {
            let ours = parse(text).unwrap();
            assert_eq!(ours, serde_json::from_str::<Value>(text).unwrap(), "{text}");
        }
    }

    #[test]
    fn a_key_named_twice_is_refused_at_any_depth() {
        for (name, text, key) in [
            ("top level", r#"{"a": 1, "a": 2}"#, "a"),
            (
                "a secret pasted, then its path",
                r#"{"secrets": {"K": "sk-x", "K": "/etc/k"}}"#,
                "K",
            ),
            ("inside an array", r#"[{"x": {"y": 1, "y": 1}}]"#, "y"),
            ("the same after escapes", r#"{"ab": 1, "a\u0062": 2}"#, "ab"),
        ] {
            match parse(text) {
                Err(Unreadable::DuplicateKey { key: found, error }) => {
                    assert_eq!(found, key, "{name}");
                    assert!(error.to_string().contains("line 1"), "{name}: {error}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_is_not_json_stays_malformed() {
        for text in ["{", r#"{"a": 1} x"#, "", r#"{"a" 1}"#] {
            assert!(
                matches!(parse(text), Err(Unreadable::Malformed(_))),
                "{text}"
            );
        }
    }
}
