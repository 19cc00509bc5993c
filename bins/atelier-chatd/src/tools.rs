//! The tool catalogues as data: one [`ToolSpec`] per tool with its scope,
//! where it runs, whether it changes anything, the capabilities it needs and its one JSON
//! Schema — offered to providers and enforced before a call runs, from the same value.
//!
//! Parts: [`schema`] (builders and the validator), [`site`] and [`content`] (the specs),
//! [`css`] and [`html`] (payload checks before the bridge), [`snapshot`] (the editor's
//! posted state) and [`tokens`] (the design tokens derived from it), [`site_reads`] and
//! [`content_reads`] (the server-side tools), with [`base_modules`] and [`loop_sources`] (the
//! CMS's built-in modules and loop sources).

pub mod base_modules;
pub mod content;
pub mod content_reads;
pub mod css;
pub mod html;
pub mod loop_sources;
pub mod schema;
pub mod site;
pub mod site_reads;
pub mod snapshot;
pub mod tokens;

use atelier_llm::ToolDefinition;
use serde_json::Value;

use crate::caller::{Caller, Capability};
use crate::store::Scope;

/// Where a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Execution {
    /// In chatd, from the snapshot or the CMS's read routes.
    Server,
    /// In the editor, through the bridge.
    Browser,
}

/// One tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name.
    pub name: &'static str,
    /// The workspace that offers it.
    pub scope: Scope,
    /// Where it runs.
    pub execution: Execution,
    /// Whether it changes the site or content (then `ai.tools.write` is needed).
    pub mutates: bool,
    /// Any one of these is needed; none listed means none.
    pub capabilities: &'static [&'static str],
    /// What the model reads about it.
    pub description: &'static str,
    /// Its input's JSON Schema; the root is always a plain object.
    pub input_schema: Value,
}

impl ToolSpec {
    /// The tool as a provider is offered it.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.to_owned(),
            description: self.description.to_owned(),
            input_schema: self.input_schema.clone(),
        }
    }

    /// Returns true if and only if `caller` may run the tool: a mutating tool needs
    /// `ai.tools.write`, and a tool listing capabilities needs any one of them.
    pub fn allowed_for(&self, caller: &Caller) -> bool {
        if self.mutates && !caller.has(Capability::ToolsWrite) {
            return false;
        }
        self.capabilities.is_empty()
            || self
                .capabilities
                .iter()
                .any(|capability| caller.capabilities.contains(*capability))
    }
}

/// Every tool of every scope: the site's 35, then the content workspace's 15.
pub fn catalogue() -> Vec<ToolSpec> {
    let mut all = site::tools();
    all.extend(content::tools());
    all
}

/// The tools `scope` offers `caller`, in offer order. A browser tool's result is posted with
/// `ai.tools.write`, so without it no browser tool is offered at all — the original offered its
/// read-only ones and the result post was refused.
pub fn offered(catalogue: &[ToolSpec], scope: Scope, caller: &Caller) -> Vec<ToolSpec> {
    catalogue
        .iter()
        .filter(|tool| tool.scope == scope && tool.allowed_for(caller))
        .filter(|tool| tool.execution == Execution::Server || caller.has(Capability::ToolsWrite))
        .cloned()
        .collect()
}
