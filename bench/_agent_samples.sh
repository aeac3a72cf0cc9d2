# shellcheck shell=sh source-path=SCRIPTDIR
# N of the agent's S samples of PID back to back, without sleeping, output to /dev/null: the
# agent side of bench/agent_overhead. It sources the agent as a library (ORCH_AGENT_LIB=1,
# docs/agent-protocol.md "Source-only mode"), sets up what the supervisor sets up before its
# first sample (the sensors and power sources it finds once per job), and calls `sample`, the
# agent's own function, N times.
# Usage: SHELL bench/_agent_samples.sh AGENT N PID (no #! line: bench/agent_overhead runs it
# under each shell in turn).
# The agent's functions use lower-case names as scratch (`n`, `i`, ...): ours are BENCH_*.
BENCH_AGENT=$1 BENCH_N=$2 BENCH_PID=$3
# shellcheck source=../agent/orch-agent.sh
ORCH_AGENT_LIB=1 . "$BENCH_AGENT"
EPID=$BENCH_PID START0='' GONE=''
list_zones
battery_paths
list_freqs
power_paths
now_ms; UP0=$NOW
BENCH_I=0
while [ "$BENCH_I" -lt "$BENCH_N" ]; do sample; BENCH_I=$((BENCH_I + 1)); done >/dev/null
