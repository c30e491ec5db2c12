#!/usr/bin/env bash
# chorus-doctor on two local ranks (chorusrun): a healthy run exits 0, names nothing, measures the pair and checks
# every collective, and writes its JSON report and PNG heatmap.
# Usage: doctor_local_test.sh <chorusrun> <chorus-doctor>
set -u
run=${1:?usage: doctor_local_test.sh <chorusrun> <chorus-doctor>}
doctor=${2:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$run" -n 2 "$doctor" --bytes 65536 --json "$work/r.json" --png "$work/r.png" >"$work/out" 2>"$work/err"
rc=$?
cat "$work/out"
status=0
[ "$rc" = 0 ] || { echo "FAIL: exit $rc"; cat "$work/err"; status=1; }
grep -q "Findings: nothing wrong" "$work/out" || { echo "FAIL: a healthy run named a problem"; status=1; }
grep -q "every collective checked, all values right" "$work/out" || { echo "FAIL: collectives not checked"; status=1; }
grep -q '"a": 0, "b": 1' "$work/r.json" || { echo "FAIL: the pair is missing from the JSON report"; status=1; }
head -c 8 "$work/r.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" || { echo "FAIL: no PNG heatmap"; status=1; }
exit $status
