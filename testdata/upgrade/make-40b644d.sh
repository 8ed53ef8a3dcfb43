#!/bin/bash
# Builds the fixture of the release of 2026-12-06 at commit 40b644d, the last
# of store format 1 (its catalog and decision records know a coupon by its
# id alone): make-8407ba5.sh's steps and outputs, usage
# make-40b644d.sh COUPOND_BINARY DIR PORT CONSOLE_PORT, but for its check that
# the history reload took the abuse guard's first step, which this release
# does not take for events resent as duplicates.
set -eu
sed '/admin abuse show/d' "$(dirname "$0")/make-8407ba5.sh" | bash -s -- "$@"
