//! What a model request's body may ask the provider to do on the agent's behalf. The gate
//! decides which hosts a turn reaches; a provider that runs a tool of its own (web search, web
//! fetch, code execution, an MCP server it connects to) or fetches a URL named in the
//! conversation would reach any host, with the operator's key and on the operator's bill,
//! around that decision. So the relay reads every POST body before it goes upstream and
//! refuses one that:
//!
//! - is not one JSON object (UTF-8, every string it holds valid), or whose `tools` (or legacy
//!   `functions`) is neither `null` nor an array of objects, or a tool's `type` not a string
//!   ([`BodyFinding::NotJson`]): what cannot be read cannot be vetted;
//! - declares a tool the provider would run itself ([`BodyFinding::ProviderTool`]): a `type`
//!   other than the agent's own functions ([`CLIENT_TOOL_TYPES`]) and the versioned
//!   provider-defined tools the agent runs or that reach nothing past the provider
//!   ([`CLIENT_TOOL_FAMILIES`], each `<family>_<8 digits>`); a tool with neither a `type` nor a
//!   `name` (a gateway reads a one-member tool such as `{"urlContext":{}}` as its provider's
//!   own); a tool member a gateway reads as a provider tool ([`TOOL_PROVIDER_MEMBERS`]);
//! - carries a top-level member that connects the provider to something or passes members on
//!   unread ([`PROVIDER_MEMBERS`]), unless it is `null` ([`BodyFinding::ProviderTool`]);
//! - holds a call the provider would make itself, a `server_tool_use` or `mcp_tool_use` block
//!   ([`PROVIDER_CALL_BLOCKS`], [`BodyFinding::ProviderTool`]);
//! - names a model other than the route's pinned one, when it has one
//!   ([`BodyFinding::OtherModel`]): a gateway's model name alone can switch on its provider's
//!   web search;
//! - on any route, lists further models for a gateway to fall back to ([`MODEL_LIST_MEMBERS`],
//!   unless `null`; [`BodyFinding::ModelList`]): a gateway tries them on any error, one the
//!   agent can cause at will (a prompt past the first model's context), so such a list would
//!   reach around a pinned model, and name a searching one on a route that pins none;
//! - names, anywhere in it, a URL for the provider to fetch ([`BodyFinding::ProviderFetch`]):
//!   a `source` object of type `url` or with a `url`; an `image_url` or a like member
//!   ([`URL_MEMBERS`]) that is not a `data:` URL; a file reference ([`FILE_MEMBERS`]) holding
//!   `://` (a file id or base64 never does).
//!
//! What the provider never acts on is read (so the whole body is valid JSON) but not looked
//! into ([`INERT_MEMBERS`]): a tool call's `input` (the agent's own data) and JSON schemas
//! (a tool's, a response format's), whose examples may name any URL.
//!
//! Member names are compared as the most lenient upstream reads them ([`fold`]): ignoring
//! case (ASCII, and the non-ASCII letters that fold onto ASCII ones), ligatures spelled out,
//! `_` and `-` dropped, so `"Tools"`, `"mcp_ſervers"` or `"mcpServers"` are read as what they
//! would be taken for. Every member of a name is vetted, so a repeated member hides nothing.
//! The body is walked once, without building a tree of it: a 32 MiB body costs its parse.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

#[cfg(test)]
mod tests;

/// Tool types the agent runs itself: its own functions (`custom` for Anthropic, `function`
/// and `custom` for an OpenAI-compatible API).
pub const CLIENT_TOOL_TYPES: [&str; 2] = ["custom", "function"];

/// Families of the versioned provider-defined tool types (`<family>_<8 digits>`) that the
/// agent runs itself (bash, text editor, computer, memory), or that only search or consult
/// within the request (tool search, advisor): none reaches past the provider.
pub const CLIENT_TOOL_FAMILIES: [&str; 7] = [
    "bash",
    "text_editor",
    "computer",
    "memory",
    "tool_search_tool_regex",
    "tool_search_tool_bm25",
    "advisor",
];

/// Members of a tool that a gateway reads as one of its provider's own tools (Gemini's search,
/// URL context and code execution through an OpenAI-compatible gateway, say).
pub const TOOL_PROVIDER_MEMBERS: [&str; 9] = [
    "google_search",
    "google_search_retrieval",
    "enterprise_web_search",
    "url_context",
    "code_execution",
    "retrieval",
    "web_search",
    "web_fetch",
    "file_search",
];

/// Top-level members that connect the provider to something of its own (Anthropic's MCP
/// connector and code-execution container; an OpenAI-compatible API's or a gateway's web
/// search and plugins) or that a gateway merges into the upstream request unread
/// (`extra_body`), refused unless `null`.
pub const PROVIDER_MEMBERS: [&str; 8] = [
    "mcp_servers",
    "container",
    "web_search_options",
    "plugins",
    "extra_body",
    "enable_search",
    "search_options",
    "search_parameters",
];

/// Top-level members listing further models a gateway routes to when the first fails, refused
/// unless `null` (the agents never send them).
pub const MODEL_LIST_MEMBERS: [&str; 2] = ["models", "fallbacks"];

/// Content block types of a call the provider makes itself. Only a server tool's answer holds
/// one, and the relay lets no server tool run, so a history holding one was written by the
/// agent: sent back unanswered (as a paused turn is), the provider would make the call.
pub const PROVIDER_CALL_BLOCKS: [&str; 2] = ["server_tool_use", "mcp_tool_use"];

/// Members whose value is a URL (or an object with a `url`) the provider fetches unless it is
/// a `data:` URL.
pub const URL_MEMBERS: [&str; 5] = [
    "image_url",
    "file_url",
    "document_url",
    "audio_url",
    "video_url",
];

/// Members naming a file the provider reads, which some gateways also take as a URL to fetch:
/// refused when the value holds `://` and is not a `data:` URL.
pub const FILE_MEMBERS: [&str; 4] = ["file_id", "file_data", "file_uri", "uri"];

/// Members whose value the provider never acts on, read but not looked into: a tool call's
/// input and JSON schemas.
pub const INERT_MEMBERS: [&str; 5] = [
    "input",
    "input_schema",
    "parameters",
    "schema",
    "json_schema",
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
    /// A model other than the one the route pins: the model named, quoted.
    OtherModel(String),
    /// A list of further models for a gateway to route to: the member's name, quoted.
    ModelList(String),
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
            BodyFinding::OtherModel(model) => {
                write!(f, "{model} is not the model declared for this API")
            }
            BodyFinding::ModelList(member) => {
                write!(
                    f,
                    "{member} lists models a gateway would route to, which the gate does not allow"
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

/// Vets a POST body (see the module documentation) to a route pinning `model`, if it does. No
/// I/O; every input is safe to give it.
pub fn inspect(body: &[u8], model: Option<&str>) -> Result<(), BodyFinding> {
    // JSON is UTF-8; the parser checks the strings it reads, not those it skips.
    let Ok(body) = std::str::from_utf8(body) else {
        return Err(BodyFinding::NotJson);
    };
    let mut finding = None;
    let mut reader = serde_json::Deserializer::from_str(body);
    let read = Top {
        finding: &mut finding,
        model,
    }
    .deserialize(&mut reader)
    .and_then(|()| reader.end());
    match (finding, read) {
        (Some(finding), _) => Err(finding),
        (None, Ok(())) => Ok(()),
        (None, Err(_)) => Err(BodyFinding::NotJson),
    }
}

/// `name` as the most lenient upstream reads it: `_` and `-` dropped (an upstream that
/// ignores them matches `mcpServers` to `mcp_servers`), ligatures spelled out, and lowercase,
/// with the non-ASCII letters whose case folds onto ASCII ones (`ſ`, the Kelvin sign, the
/// dotted and dotless i) as those. Compare only folded names with each other.
pub fn fold(name: &str) -> String {
    let mut folded = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '_' | '-' => {}
            '\u{017f}' => folded.push('s'),
            '\u{212a}' => folded.push('k'),
            '\u{0130}' | '\u{0131}' => folded.push('i'),
            '\u{fb00}' => folded.push_str("ff"),
            '\u{fb01}' => folded.push_str("fi"),
            '\u{fb02}' => folded.push_str("fl"),
            '\u{fb03}' => folded.push_str("ffi"),
            '\u{fb04}' => folded.push_str("ffl"),
            '\u{fb05}' | '\u{fb06}' => folded.push_str("st"),
            c => folded.push(c.to_ascii_lowercase()),
        }
    }
    folded
}

/// Returns true if and only if the folded name `folded` is one of `names` (each lowercase
/// ASCII with `_`, as the lists above are), compared as [`fold`] would fold them.
fn is_one_of(folded: &str, names: &[&str]) -> bool {
    names.iter().any(|name| {
        let name = name.bytes().filter(|&b| b != b'_');
        folded.bytes().eq(name)
    })
}

/// `text` quoted, at most [`QUOTED`] chars of it, escaped so a log line holds it as one line.
fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(QUOTED).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

/// Returns true if and only if a tool of `kind` is run by the agent, or reaches nothing past
/// the provider.
fn client_tool(kind: &str) -> bool {
    CLIENT_TOOL_TYPES.contains(&kind)
        || CLIENT_TOOL_FAMILIES.iter().any(|family| {
            kind.strip_prefix(family)
                .and_then(|rest| rest.strip_prefix('_'))
                .is_some_and(|version| {
                    version.len() == 8 && version.bytes().all(|b| b.is_ascii_digit())
                })
        })
}

/// Returns true if and only if a file reference `value` names nothing to fetch: no `://`
/// in it, or a `data:` URL.
fn no_file_url(value: &str) -> bool {
    !value.contains("://") || inline(value)
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

/// The body: one object, for a route pinning `model` if it does.
struct Top<'a> {
    finding: &'a mut Option<BodyFinding>,
    model: Option<&'a str>,
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
        let mut model_named = false;
        while let Some(name) = map.next_key::<String>()? {
            let folded = fold(&name);
            if let (Some(pinned), "model") = (self.model, folded.as_str()) {
                let named = map.next_value_seed(Walk {
                    finding: &mut *self.finding,
                    role: Role::Text,
                })?;
                if named.as_deref() != Some(pinned) {
                    let named = named.map_or_else(
                        || "a model that is not a string".into(),
                        |named| quoted(&named),
                    );
                    return Err(found(self.finding, BodyFinding::OtherModel(named)));
                }
                model_named = true;
            } else if folded == "tools" || folded == "functions" {
                map.next_value_seed(Tools {
                    finding: &mut *self.finding,
                })?;
            } else if is_one_of(&folded, &PROVIDER_MEMBERS) {
                if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                    return Err(found(
                        self.finding,
                        BodyFinding::ProviderTool(quoted(&name)),
                    ));
                }
            } else if is_one_of(&folded, &MODEL_LIST_MEMBERS) {
                if map.next_value::<Option<IgnoredAny>>()?.is_some() {
                    return Err(found(self.finding, BodyFinding::ModelList(quoted(&name))));
                }
            } else {
                map.next_value_seed(Walk::any(&mut *self.finding))?;
            }
        }
        // Left out, a gateway would pick its own default model.
        if self.model.is_some() && !model_named {
            return Err(found(
                self.finding,
                BodyFinding::OtherModel("no model".into()),
            ));
        }
        Ok(())
    }
}

/// The `tools` (or `functions`) member: an array of tool objects, or `null`.
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

/// One tool: an object with a `type` or a `name`, whose every `type` is a client tool's and
/// which has no member a gateway reads as a provider tool.
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
        let mut named = false;
        while let Some(name) = map.next_key::<String>()? {
            let folded = fold(&name);
            if folded == "type" {
                let kind = map.next_value::<String>()?;
                if !client_tool(&kind) {
                    return Err(found(
                        self.finding,
                        BodyFinding::ProviderTool(quoted(&kind)),
                    ));
                }
                named = true;
            } else if is_one_of(&folded, &TOOL_PROVIDER_MEMBERS) {
                return Err(found(
                    self.finding,
                    BodyFinding::ProviderTool(quoted(&name)),
                ));
            } else {
                named |= folded == "name";
                map.next_value_seed(Walk {
                    finding: &mut *self.finding,
                    role: Role::Any.of_member(&folded),
                })?;
            }
        }
        if !named {
            return Err(found(
                self.finding,
                BodyFinding::ProviderTool("a tool with neither a type nor a name".into()),
            ));
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
    /// A file reference ([`FILE_MEMBERS`]): a string holding `://` is fetched unless it is a
    /// `data:` URL.
    File,
    /// A value the provider never acts on ([`INERT_MEMBERS`]), and everything in it: nothing
    /// is looked for; it is read through all the same, so what is relayed is JSON throughout.
    Inert,
    /// A value that matters only as a string (a `url`, a `type`); any other value is walked
    /// as [`Role::Any`] (a JSON schema's `type` may be an array).
    Text,
}

impl Role {
    /// The role of the value of a member named `folded` (see [`fold`]) of an object in this
    /// role.
    fn of_member(self, folded: &str) -> Role {
        match folded {
            _ if self == Role::Inert => Role::Inert,
            name if is_one_of(name, &INERT_MEMBERS) => Role::Inert,
            "url" if matches!(self, Role::Source | Role::Url) => Role::Text,
            "type" => Role::Text,
            "source" => Role::Source,
            name if is_one_of(name, &URL_MEMBERS) => Role::Url,
            name if is_one_of(name, &FILE_MEMBERS) => Role::File,
            _ => Role::Any,
        }
    }
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
            Role::File if !no_file_url(text) => Err(found(
                self.finding,
                BodyFinding::ProviderFetch(quoted(text)),
            )),
            Role::Text => Ok(Some(text.to_owned())),
            Role::Any | Role::Source | Role::Inert | Role::File => Ok(None),
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
        while let Some(name) = map.next_key::<String>()? {
            let name = fold(&name);
            let role = self.role.of_member(&name);
            let text = map.next_value_seed(Walk {
                finding: &mut *self.finding,
                role,
            })?;
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
                ("type", Some(kind)) if is_one_of(&fold(&kind), &PROVIDER_CALL_BLOCKS) => {
                    return Err(found(
                        self.finding,
                        BodyFinding::ProviderTool(quoted(&kind)),
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
