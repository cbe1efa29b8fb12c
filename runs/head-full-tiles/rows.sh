#!/usr/bin/env bash
# Full-height tiles' row count: the head alone at 256 (CPU_ROWS), 384 and 512 rows, alternating, twice.
# Usage: bash runs/head-full-tiles/rows.sh   (from the repository root; about 4 minutes)
set -euo pipefail
for round in 1 2; do
    for rows in 256 384 512; do
        .venv/bin/python runs/head-full-tiles/head_alone.py --rows $rows 2>&1 | grep -v Warning \
            > runs/head-full-tiles/head-alone-rows-$rows-$round.log
    done
done
