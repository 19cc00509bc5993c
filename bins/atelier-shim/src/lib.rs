//! The door runs' shim: proves confinement, takes the spec, runs the argv, relays output as frames.
