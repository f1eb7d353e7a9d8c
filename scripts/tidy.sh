#!/usr/bin/env bash
# go mod tidy for every module of the repository: those go.work lists, and
# bench/ (outside the workspace, with replace directives it keeps).
#
# The nested modules require the repository's other modules at the
# placeholder version v0.0.0-00010101000000-000000000000: go.work resolves
# them to these directories for every go command, but go mod tidy ignores
# go.work, so this script gives each module replace directives to the
# others' directories for the tidy and drops them after (a go.mod with
# replace directives could not be installed with go install ...@version).
set -euo pipefail
cd "$(dirname "$0")/.."
root=github.com/sluicehq/sluice
mods=$(go work edit -json | python3 -c 'import json,sys; print("\n".join(u["DiskPath"] for u in json.load(sys.stdin)["Use"]))')
for m in $mods bench; do
	m=${m#./}
	[ "$m" = . ] && continue
	rel=$(python3 -c 'import os,sys; print(os.path.relpath(".", sys.argv[1]))' "$m")
	reps=()
	for o in $mods; do
		o=${o#./}
		[ "$o" = "$m" ] && continue
		path=$root
		[ "$o" != . ] && path=$root/$o
		reps+=("-replace=$path=$rel/$o")
	done
	(cd "$m" && go mod edit "${reps[@]}" && GOWORK=off go mod tidy)
	if [ "$m" != bench ]; then
		(cd "$m" && go mod edit $(printf -- '-dropreplace=%s ' $(go mod edit -json | python3 -c 'import json,sys; print(" ".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or []))')))
	fi
	echo "tidied $m"
done
GOWORK=off go mod tidy
echo "tidied ."
