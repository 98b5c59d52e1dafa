#!/bin/sh
# Healthy: the node takes jobs and slurmrestd answers with the token the gateway uses.
set -e
sinfo -h -N -o %T | grep -qE '^(idle|mixed|allocated)'
token=$(cat /run/ignara-slurm/token)
curl -fsS -o /dev/null -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $token" \
  http://127.0.0.1:6820/slurm/v0.0.38/ping
