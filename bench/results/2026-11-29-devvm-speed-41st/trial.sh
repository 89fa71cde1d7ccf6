# trial.sh, sourced by run.sh and pools.sh: trial BASE PATCH... makes a
# scratch worktree of BASE (a commit) with each PATCH beside these scripts
# applied, cds into it and removes it when the script exits.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
trial() {
	local base=$1 p
	shift
	scratch=$(mktemp -d)
	git -C "$repo" worktree add --detach "$scratch/t" "$base" >/dev/null
	trap 'git -C "$repo" worktree remove --force "$scratch/t"; rm -rf "$scratch"' EXIT
	cd "$scratch/t"
	for p in "$@"; do
		git apply "$here/$p"
	done
	date -u
	go version
	git -C "$repo" log --oneline -1 "$base"
}
