//! Cross-binary end-to-end tests: sited, the shim, atelier-build and the test agent driven with
//! atelierctl over real sockets, served by a real nginx.
