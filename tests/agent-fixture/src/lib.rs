//! TEST FIXTURE: a scripted coding agent that speaks Claude Code's stream-json and edits files.
