//! Runs a site's install and build steps as argv inside the build door, reporting step events as frames.
