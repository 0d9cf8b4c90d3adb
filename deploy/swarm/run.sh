#!/usr/bin/env bash
# One split run on Docker Swarm: the coordinator as a replicated job of one task, the parts as
# a replicated job of N tasks, both on the host's network (this kernel may lack IPVS: no
# routing mesh), their results in OUT on the node that runs the coordinator.
#
#   PARTS=4 OUT=/srv/volley COORD=10.0.0.5:7300 deploy/swarm/run.sh udp://10.0.0.53 -Q 400000 -l 60s
#
# Environment:
#   IMAGE   volley's image, built locally on every node (deploy/build-image.sh) [volley:local]
#   PARTS   how many parts [2]
#   OUT     a directory on the nodes (bind-mounted at /out): parts write part-I.json, the
#           coordinator merged.json [required]
#   COORD   HOST:PORT the coordinator listens on and the parts join [127.0.0.1:7300]
#   NAME    prefix of the services [volley]
#   WAIT    how long to wait for the coordinator to finish, seconds [600]
#   DOCKER  the docker command [docker]
#   COORD_NODE  a placement constraint for the coordinator, e.g. node.role==manager: the node
#           whose address COORD is (with several nodes, the coordinator must run where COORD is)
#   PER_NODE    at most this many parts on one node (--replicas-max-per-node): 1 spreads N parts
#           over N nodes
#
# Swarm's own pitfalls, handled here: services are created with --no-resolve-image (no
# registry; start dockerd with DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 too), -d (a failing job
# with --restart-condition none would make `service create` wait forever) and polled; the part
# index is not taken from {{.Task.Slot}} (a job's slot 0 comes through as the node ID) but given
# by the coordinator as each part joins.
set -euo pipefail
image="${IMAGE:-volley:local}"
parts="${PARTS:-2}"
out="${OUT:?OUT: a directory for the results}"
coord="${COORD:-127.0.0.1:7300}"
name="${NAME:-volley}"
wait_s="${WAIT:-600}"
docker="${DOCKER:-docker}"
common=(-d --no-resolve-image --network host --restart-condition none
        --mount "type=bind,src=$out,dst=/out")

coord_place=()
[ -n "${COORD_NODE:-}" ] && coord_place=(--constraint "$COORD_NODE")
parts_place=()
[ -n "${PER_NODE:-}" ] && parts_place=(--replicas-max-per-node "$PER_NODE")

"$docker" service create "${common[@]}" "${coord_place[@]}" --name "$name-coordinate" --mode replicated-job --replicas 1 \
    "$image" coordinate --parts "$parts" --listen "$coord" -o /out/merged.json >/dev/null
"$docker" service create "${common[@]}" "${parts_place[@]}" --name "$name-parts" --mode replicated-job --replicas "$parts" \
    --env "VOLLEY_PARTS=$parts" --env "VOLLEY_COORDINATOR=$coord" \
    "$image" run "$@" --progress never -q -o '/out/part-{part}.json' >/dev/null

# Poll until the coordinator's task has ended (Complete, Failed...).
deadline=$((SECONDS + wait_s))
state=""
while [ $SECONDS -lt $deadline ]; do
    state="$("$docker" service ps "$name-coordinate" --format '{{.CurrentState}}' | head -1)"
    case "$state" in
        Complete*|Failed*|Rejected*|Shutdown*) break ;;
    esac
    sleep 0.5
done
"$docker" service logs --raw "$name-coordinate" >&2 || true
"$docker" service ps "$name-parts" --format '{{.Name}} {{.Node}} {{.CurrentState}} {{.Error}}' >&2 || true
"$docker" service rm "$name-coordinate" "$name-parts" >/dev/null
echo "coordinator: $state" >&2
case "$state" in Complete*) exit 0 ;; *) exit 1 ;; esac
