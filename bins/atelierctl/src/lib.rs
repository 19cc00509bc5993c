//! The operator's client for atelier-sited: pairs through /health, drives every route.
