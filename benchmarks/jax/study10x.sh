#!/bin/bash
# The JAX study's 10x cells as run in issue 45's second session (docs/study.md, "Amendment before the first
# 10x record"): code frozen at STUDY_COMMIT in a detached worktree, paired chunks of 25 seeds task by task up
# to 100 seeds, then the task's 1x cells of the same arms re-run at the same commit; seeds 100-149 last.
# Each finished chunk's records are committed. Resumable: finished chunks are skipped.
#   STUDY_TREE=/tmp/study bash benchmarks/jax/study10x.sh     (needs a Python with jax + navix: $PY)
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
STUDY_COMMIT=${STUDY_COMMIT:-feda817}
S=${STUDY_TREE:-/tmp/study}
PY=${PY:-$REPO/.venv313/bin/python}
OUT=$REPO/benchmarks/results/jax_study
LOG=$OUT/run_log.txt
[ -d "$S" ] || git -C "$REPO" worktree add --detach "$S" "$STUDY_COMMIT"
commit_runs() {
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if git -C "$REPO" add benchmarks/results/jax_study/runs benchmarks/results/jax_study/run_log.txt && \
       git -C "$REPO" commit -q -m "jax study: $1 (records at $STUDY_COMMIT)" -- \
         benchmarks/results/jax_study/runs benchmarks/results/jax_study/run_log.txt; then
      return 0
    fi
    sleep 20  # another commit holds the index
  done
}
run() {  # task budget arm seeds chunk
  (cd "$S" && PYTHONPATH=$S/src $PY benchmarks/jax_study.py --tasks "$1" --budget "$2" --arms "$3" \
     --seeds "$4" --chunk "$5" --out "$OUT" 2>&1 | grep -v "^WARNING\|^W0\|^I0" | tee -a "$LOG")
  commit_runs "$1 $2 $3 up to seed $(($4 - 1))"
}
for task in fourrooms9 doorkey6 doorkey5; do
  for s in 25 50 75 100; do
    run $task 10x uniform $s 25
    run $task 10x defaults $s 25
  done
  run $task 1x uniform 100 50
  run $task 1x defaults 100 50
done
for task in fourrooms9 doorkey6 doorkey5; do
  for s in 125 150; do
    run $task 10x uniform $s 25
    run $task 10x defaults $s 25
  done
done
echo STUDY-DONE >> "$LOG"
