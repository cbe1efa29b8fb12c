#!/usr/bin/env bash
# The runs behind docs/encoders.md's "Alone in a process" section: --compile encoders on fresh scifact slices,
# the code before this session's changes (a24db6e, in a worktree at $OLD) against the current tree, with and
# without the MKL shim. Usage: OLD=/tmp/old bash runs/encode-alone/run.sh   (from the repository root)
# Run at ac340bd, which padded --compile batches to a multiple of 8 tokens (the -pad8 logs) unless --pad-to 1
# (the -pad1 logs). That padding gave no consistent gain and was taken out in the next commit, so the -pad1 logs
# are the code after it; encode_alone.py has no --pad-to since, and this script runs only at ac340bd.
set -euo pipefail
OLD=${OLD:?a worktree of a24db6e}
out=runs/encode-alone
py=.venv/bin/python
shim=$($py -m retromae_ir.mkl_shim)
for preload in "" "$shim"; do
    tag=$([ -n "$preload" ] && echo "-shim" || echo "")
    for encoder in dupmae-minilm minilm-cls; do
        LD_PRELOAD=$preload PYTHONPATH=$OLD $py benchmarks/encode_alone.py --encoder $encoder --compile \
            > $out/$encoder-a24db6e$tag.log 2>&1
        LD_PRELOAD=$preload $py benchmarks/encode_alone.py --encoder $encoder --compile --pad-to 1 \
            > $out/$encoder-pad1$tag.log 2>&1
        LD_PRELOAD=$preload $py benchmarks/encode_alone.py --encoder $encoder --compile \
            > $out/$encoder-pad8$tag.log 2>&1
    done
done
