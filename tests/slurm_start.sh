#!/usr/bin/env bash
# ctest fixture for the Slurm tests: starts scripts/slurm_local.sh's cluster (a no-op when it is
# up). Where it cannot start: exit 77 (skipped), or a failure when SWAVG_REQUIRE_SLURM=1.
"$(dirname "$0")/../scripts/slurm_local.sh" start && exit 0
if [ "${SWAVG_REQUIRE_SLURM:-0}" = 1 ]; then
  echo "slurm_start: SWAVG_REQUIRE_SLURM=1 and Slurm did not start" >&2
  exit 1
fi
echo "slurm_start: Slurm cannot start here; the slurm tests are skipped (ctest -LE slurm leaves them out)" >&2
exit 77
