//! The coding-agent CLI drivers: argv, child environment, and parsers from their output to session events.
