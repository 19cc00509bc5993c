//! atelier-provision: one declaration (`instance.json`) rendered into every host artifact, and
//! the verbs that plan, apply, check, verify and remove them.
//!
//! Parts:
//! - [`artifact`]: the rendered file type and its stamp (instance, kind, sha256 of the body).

pub mod artifact;
