//! What a model request's body may ask the provider to do on the agent's behalf. The gate
//! decides which hosts a turn reaches; a provider that runs a tool of its own (web search, web
//! fetch, code execution, an MCP server it connects to) or fetches a URL named in the
//! conversation would reach any host, with the operator's key and on the operator's bill,
//! around that decision. So the relay reads every POST body before it goes upstream and
//! refuses one that:
//!
//! - is not one JSON object, or whose `tools` is not an array of objects, or a tool's `type`
//!   not a string ([`BodyFinding::NotJson`]): what cannot be read cannot be vetted;
//! - declares a tool whose `type` is none of the client tools ([`CLIENT_TOOL_TYPES`],
//!   [`CLIENT_TOOL_TYPE_PREFIXES`]: the agent's own functions, and the provider-defined tools
//!   the agent runs itself), or carries a top-level member that connects the provider to
//!   something ([`PROVIDER_MEMBERS`]) ([`BodyFinding::ProviderTool`]);
//! - names, anywhere in it, a URL for the provider to fetch: a `source` object of type `url`
//!   or with a `url`, or an `image_url` (or a like member, [`URL_MEMBERS`]) that is not a
//!   `data:` URL ([`BodyFinding::ProviderFetch`]). A tool call's `input` is the agent's own
//!   data, never fetched: it is read (the whole body must be JSON, every string in it valid),
//!   but nothing is looked for in it.
//!
//! Member names are compared as an upstream that ignores their case would: ASCII case folded,
//! and the two non-ASCII letters that fold onto ASCII ones (`ſ`, the Kelvin sign) with them,
//! so `"Tools"` or `"mcp_ſervers"` are read as what they would be taken for. Every member of a
//! name is vetted, so a repeated member hides nothing. The body is walked once, without
//! building a tree of it: a 32 MiB body costs its parse and no copy.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

#[cfg(test)]
mod tests;

/// Tool types the agent runs itself: its own functions (`custom` for Anthropic, `function`
/// and `custom` for an OpenAI-compatible API).
pub const CLIENT_TOOL_TYPES: [&str; 2] = ["custom", "function"];

/// Prefixes of the versioned provider-defined tool types that are still run by the agent
/// (bash, text editor, computer, memory), or that only search or consult within the request
/// (tool search, advisor): none reaches past the provider.
pub const CLIENT_TOOL_TYPE_PREFIXES: [&str; 6] = [
    "bash_",
    "text_editor_",
    "computer_",
    "memory_",
    "tool_search_tool_",
    "advisor_",
];

/// Top-level members that connect the provider to something of its own (Anthropic's MCP
/// connector and code-execution container, an OpenAI-compatible API's web search and a
/// gateway's plugins), refused unless `null`.
pub const PROVIDER_MEMBERS: [&str; 4] =
    ["mcp_servers", "container", "web_search_options", "plugins"];

/// Members whose value is a URL (or an object with a `url`) the provider fetches unless it is
/// a `data:` URL.
pub const URL_MEMBERS: [&str; 5] = [
    "image_url",
    "file_url",
    "document_url",
    "audio_url",
    "video_url",
];

/// The longest part of the body a finding quotes (a tool type or a URL's start), in chars.
const QUOTED: usize = 64;

/// Why a body is not relayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFinding {
    /// Not one JSON object, or a shape the relay cannot vet.
    NotJson,
    /// A tool the provider would run itself, or a member connecting it to something: the tool
    /// type or the member's name, quoted.
    ProviderTool(String),
    /// A URL the provider would fetch: its start, quoted.
    ProviderFetch(String),
}

impl fmt::Display for BodyFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyFinding::NotJson => f.write_str("the body is not a JSON object the relay can vet"),
            BodyFinding::ProviderTool(what) => {
                write!(
                    f,
                    "the provider would run {what} itself, which the gate does not allow"
                )
            }
            BodyFinding::ProviderFetch(url) => {
                write!(
                    f,
                    "the provider would fetch {url}, which the gate does not allow"
                )
            }
        }
    }
}

/// Vets a POST body (see the module documentation). No I/O; every input is safe to give it.
pub fn inspect(body: &[u8]) -> Result<(), BodyFinding> {
    // JSON is UTF-8; the parser checks the strings it reads, not those it skips.
    let Ok(body) = std::str::from_utf8(body) else {
        return Err(BodyFinding::NotJson);
    };
    let mut finding = None;
    let mut reader = serde_json::Deserializer::from_str(body);
    let read = Top {
        finding: &mut finding,
    }
    .deserialize(&mut reader)
    .and_then(|()| reader.end());
    match (finding, read) {
        (Some(finding), _) => Err(finding),
        (None, Ok(())) => Ok(()),
        (None, Err(_)) => Err(BodyFinding::NotJson),
    }
}

/// `name` as an upstream ignoring case would read it: ASCII lowercase, `ſ` as `s` and the
/// Kelvin sign as `k`, the only non-ASCII letters whose case folds onto ASCII ones.
fn fold(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '\u{017f}' => 's',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// `text` quoted, at most [`QUOTED`] chars of it, escaped so a log line holds it as one line.
fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(QUOTED).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

/// Returns true if and only if a tool of `kind` is run by the agent.
fn client_tool(kind: &str) -> bool {
    CLIENT_TOOL_TYPES.contains(&kind)
        || CLIENT_TOOL_TYPE_PREFIXES.iter().any(|prefix| {
            kind.strip_prefix(prefix)
                .is_some_and(|rest| !rest.is_empty())
        })
}

/// Returns true if and only if `url` is one the provider would not fetch: a `data:` URL.
fn inline(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// Stops the walk: the first finding is the one reported, and the error it raises only ends
/// the parse.
fn found<E: de::Error>(slot: &mut Option<BodyFinding>, finding: BodyFinding) -> E {
    slot.get_or_insert(finding);
    E::custom("refused")
}

/// The body: one object.
struct Top<'a> {
    finding: &'a mut Option<BodyFinding>,
}

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            let name = fold(&name);
            if name == "tools" {
                map.next_value_seed(Tools {
                    finding: &mut *self.finding,
                })?;
            } else if PROVIDER_MEMBERS.contains(&name.as_str()) {
                if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                    return Err(found(
                        self.finding,
                        BodyFinding::ProviderTool(quoted(&name)),
                    ));
                }
            } else {
                map.next_value_seed(Walk::any(&mut *self.finding))?;
            }
        }
        Ok(())
    }
}

/// The `tools` member: an array of tool objects, or `null`.
struct Tools<'a> {
    finding: &'a mut Option<BodyFinding>,
}

impl<'de> DeserializeSeed<'de> for Tools<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tools<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tools")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut tools: A) -> Result<(), A::Error> {
        while tools
            .next_element_seed(Tool {
                finding: &mut *self.finding,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// One tool: an object whose every `type` member is a client tool's.
struct Tool<'a> {
    finding: &'a mut Option<BodyFinding>,
}

impl<'de> DeserializeSeed<'de> for Tool<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Tool<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            if fold(&name) == "type" {
                let kind = map.next_value::<String>()?;
                if !client_tool(&kind) {
                    return Err(found(
                        self.finding,
                        BodyFinding::ProviderTool(quoted(&kind)),
                    ));
                }
            } else {
                map.next_value_seed(Walk::any(&mut *self.finding))?;
            }
        }
        Ok(())
    }
}

/// What a value is to the walk: the place it holds decides what is looked for in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Any value: looked into for the members below.
    Any,
    /// A `source` member's value: an object of type `url`, or with a `url`, is fetched; a
    /// string is a citation, not fetched.
    Source,
    /// An `image_url` (or like) member's value: a URL, or an object whose `url` is one.
    Url,
    /// A tool call's `input`: the agent's own data, never fetched, so nothing in it is looked
    /// for; it is read through all the same, so what is relayed is JSON throughout.
    Inert,
    /// A value that matters only as a string (a `url`, a source's `type`); any other value is
    /// walked as [`Role::Any`] (a JSON schema's `type` may be an array).
    Text,
}

/// A value in its [`Role`]; yields the string a [`Role::Text`] value is, if it is one.
struct Walk<'a> {
    finding: &'a mut Option<BodyFinding>,
    role: Role,
}

impl<'a> Walk<'a> {
    fn any(finding: &'a mut Option<BodyFinding>) -> Walk<'a> {
        Walk {
            finding,
            role: Role::Any,
        }
    }

    /// Refuses `url` unless it is a `data:` URL.
    fn fetched<E: de::Error>(finding: &mut Option<BodyFinding>, url: &str) -> Result<(), E> {
        match inline(url) {
            true => Ok(()),
            false => Err(found(finding, BodyFinding::ProviderFetch(quoted(url)))),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        match self.role {
            Role::Url => Walk::fetched(self.finding, text).map(|()| None),
            Role::Text => Ok(Some(text.to_owned())),
            Role::Any | Role::Source | Role::Inert => Ok(None),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        let role = match self.role {
            Role::Inert => Role::Inert,
            _ => Role::Any,
        };
        while items
            .next_element_seed(Walk {
                finding: &mut *self.finding,
                role,
            })?
            .is_some()
        {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let fetches = matches!(self.role, Role::Source | Role::Url);
        while let Some(name) = map.next_key::<String>()? {
            let name = fold(&name);
            let finding = &mut *self.finding;
            let role = match name.as_str() {
                _ if self.role == Role::Inert => Role::Inert,
                "input" => Role::Inert,
                "url" | "type" if fetches => Role::Text,
                "source" => Role::Source,
                name if URL_MEMBERS.contains(&name) => Role::Url,
                _ => Role::Any,
            };
            let text = map.next_value_seed(Walk { finding, role })?;
            match (name.as_str(), text) {
                ("url", Some(url)) => Walk::fetched(&mut *self.finding, &url)?,
                ("type", Some(kind))
                    if self.role == Role::Source && kind.eq_ignore_ascii_case("url") =>
                {
                    return Err(found(
                        self.finding,
                        BodyFinding::ProviderFetch("a source URL".into()),
                    ));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}
