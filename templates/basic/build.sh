#!/bin/sh
# The whole build of the basic template: copy the static site in src/ to dist/.
# It needs no network and no package manager; replace it when the site needs a real build.
set -eu
rm -rf dist
cp -R src dist
