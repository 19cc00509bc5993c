//! atelier-chatd: the CMS editor's AI chat runtime. This part holds the conversation store;
//! the HTTP surface, the tool loop and the browser bridge build on it.

pub mod store;
