#!/usr/bin/env bash
# Prints the manifests of one split run (deploy/kubernetes/split-run.yaml filled in).
#
#   deploy/kubernetes/render.sh [-n PARTS] [-i IMAGE] [-N NAME] -- TARGET [volley run flags...]
#
# Defaults: 2 parts, image volley:local, name volley. The parts run
#   volley run TARGET FLAGS... --progress never -o /results/part-{part}.json
# with VOLLEY_PARTS and VOLLEY_COORDINATOR from the manifest and JOB_COMPLETION_INDEX from
# Kubernetes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
parts=2 image=volley:local name=volley
while [ $# -gt 0 ]; do
    case "$1" in
        -n) parts="$2"; shift 2 ;;
        -i) image="$2"; shift 2 ;;
        -N) name="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "render: unknown option $1 (flags of volley run go after --)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "render: give the run's TARGET and flags after --" >&2; exit 2; }
case "$parts" in ''|*[!0-9]*|0) echo "render: -n wants a number of parts from 1" >&2; exit 2 ;; esac
# The run's arguments as a YAML flow sequence of double-quoted strings.
args='"run"'
for a in "$@" --progress never -o '/results/part-{part}.json'; do
    a="${a//\\/\\\\}"
    a="${a//\"/\\\"}"
    args="$args, \"$a\""
done
sed -e "s|@PARTS@|$parts|g" -e "s|@IMAGE@|$image|g" -e "s|@NAME@|$name|g" \
    -e "s|@RUN_ARGS@|${args//|/\\|}|" "$here/split-run.yaml"
