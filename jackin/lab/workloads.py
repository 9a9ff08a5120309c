"""Workloads the lab runs inside agents' containers to prove what a snapshot holds (shell text only).

``BUSY_WRITER`` writes as a build and a coding agent do, as fast as it can, in ``/workspace/churn``:
8 temporary files written, one renamed, all deleted; ``n`` appended to ``z-log``, then written to
``a-counter`` (by rename); everything committed to a git repository. At every instant ``a-counter``
<= the log's last line <= ``a-counter`` + 1, and the repository passes ``git fsck --strict``: a copy
read file by file while it runs, or a filesystem snapshot taken while it writes, breaks one or both.
It ends, after a whole round, once ``/workspace/stop-writer`` exists (``STOP_WRITER``, run as the agent).

``CHECK_COPY`` defines ``check <dir>``: it checks one copy of it under ``<dir>`` (a restored snapshot) and
prints ``OK <dir> <counter>`` or ``BAD <dir>: <why>``; ``CHECK`` checks every copy under ``/r/*``. Both need
git: run them in the agent's own image (lab hosts have none).
"""

BUSY_WRITER = r"""set -e
cd /workspace && mkdir -p churn && cd churn
git init -q . && git config user.email w@lab && git config user.name writer
n=0
while [ ! -e /workspace/stop-writer ]; do
  n=$((n + 1))
  for j in 1 2 3 4 5 6 7 8; do echo "$n" > "t.$j"; done
  mv t.1 t.moved && rm -f t.*
  echo "$n" >> z-log
  echo "$n" > a-counter.tmp && mv a-counter.tmp a-counter
  git add -A && git commit -q -m "c$n"
done
"""

STOP_WRITER = "touch /workspace/stop-writer"

CHECK_COPY = r"""check() {
  d=$1
  w=$(find "$d" -type d -name churn | head -n 1)
  [ -n "$w" ] || { echo "BAD $d: no churn dir"; return 0; }
  c=$(cat "$w/a-counter" 2>/dev/null || echo 0); l=$(tail -n 1 "$w/z-log" 2>/dev/null || echo 0)
  if [ "$l" -lt "$c" ] || [ "$l" -gt $((c + 1)) ]; then echo "BAD $d: counter $c, log $l"; fi
  git -c safe.directory='*' -C "$w" fsck --strict --no-progress >/dev/null 2>"$d.fsck" || { echo "BAD $d: fsck"; cat "$d.fsck"; }
  echo "OK $d $c"
}
"""

CHECK = (
    CHECK_COPY
    + r"""for d in /r/*; do
  [ -d "$d" ] || continue
  check "$d"
done
"""
)
