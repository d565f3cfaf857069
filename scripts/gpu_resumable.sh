#!/usr/bin/env bash
# A bounded step of a long GPU job that resumes (a bench with --resume), for machines lent one call
# at a time: restore the job's directory from the archive a previous call brought back, run the
# command until SECONDS have passed (then SIGINT, and SIGKILL KILL_AFTER s later), and archive the directory
# again (without *.pt files) as $OUT/state.tgz for the next call to carry.
#
#   scripts/gpu_resumable.sh SECONDS DIR ARCHIVE -- COMMAND [ARGS...]
#
# ARCHIVE: where the previous call's state.tgz was put in this checkout (a path the call carries);
# it is used only when DIR does not exist (a fresh machine). KILL_AFTER (seconds, default 60): how long
# the command may take to stop after the SIGINT (a bench judges the evaluations in flight first).
# Exit status: the command's.
set -u
if [ $# -lt 5 ] || [ "$4" != "--" ]; then
    echo "usage: $0 SECONDS DIR ARCHIVE -- COMMAND [ARGS...]" >&2
    exit 2
fi
seconds=$1 dir=$2 archive=$3
shift 4
if [ ! -d "$dir" ] && [ -f "$archive" ]; then
    tar xzf "$archive" && echo "restored $dir from $archive" >&2
fi
timeout -k "${KILL_AFTER:-60}" -s INT "$seconds" "$@"
status=$?
# workers run in sessions of their own: none may outlive a killed command and disturb the next one's timings
pkill -9 -f "kfoundry.sandbox.start|kfoundry.evaluate.worker" 2>/dev/null || true
if [ -n "${OUT:-}" ] && [ -d "$dir" ]; then
    tar czf "$OUT/state.tgz" --exclude='*.pt' "$dir" && echo "archived $dir to \$OUT/state.tgz" >&2
fi
exit $status
