#!/bin/sh
# A stand-in for bmoe-cli used by the end-to-end tests: it takes bmoe's flags, records what it
# received, and writes a per-token CSV and summary lines in bmoe's formats, a row at a time.
#   --record FILE   write the -p prompt there, byte-exact
#   --fail-if FILE  exit 7 (after 2 tokens) when FILE exists
#   --delay S       seconds per token (default 0.05)
#   --hang          never finish (for timeouts)
#   --slowdown FILE each run counts itself in FILE and is 20 ms/token slower than the last
#   --memhog CGROUP join that memory cgroup, then allocate until the kernel kills us
prompt=""; n=8; csv=/dev/null; record=""; fail=""; delay=0.05; hang=""; slow=0; memhog=""
while [ $# -gt 0 ]; do
  case $1 in
    -p) prompt=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --record) record=$2; shift 2 ;;
    --fail-if) fail=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --hang) hang=1; shift ;;
    --slowdown) c=0; [ -f "$2" ] && read -r c < "$2"; c=$((c + 1)); echo "$c" > "$2"
                slow=$((c * 20)); shift 2 ;;
    --memhog) memhog=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -n "$record" ] && printf %s "$prompt" > "$record"
echo "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms" > "$csv"
if [ -n "$memhog" ]; then
  echo "1,$n,100.0,0.0,100.0,0,-1.00,0.0,0.0" >> "$csv"
  echo $$ > "$memhog/cgroup.procs"
  exec python3 -c "
import time
hog = []
while True:
    hog.append(bytearray(8 << 20))
    time.sleep(0.02)"
fi
i=1
while [ "$i" -le "$n" ] || [ -n "$hang" ]; do
  echo "$i,$n,$((90 + i + slow)).500,40.000,$((50 + i + slow)).500,1048576,-1.00,40.000,0.000" >> "$csv"
  if [ -n "$fail" ] && [ -e "$fail" ] && [ "$i" -ge 2 ]; then
    echo "fake_bmoe: failing on purpose" >&2
    exit 7
  fi
  sleep "$delay"
  i=$((i + 1))
done
echo "# summary tokens=$n s/tok=0.100 tok/s=10.000 read_MiB=$n.0 io_s=0.04 compute_s/tok=0.060 io_s/tok=0.040 cache_hit_pct=-1.0 n_prompt=3 load_s=0.100 prefill_s=0.200 prefill_tps=15.00" >> "$csv"
echo "the quick brown fox"
echo "generation: $n tokens, 0.100 s/token (10.000 tok/s)"
echo "prefill: 3 tokens, 0.200 s (15.0 tok/s) | model load 0.100 s | TTFT 0.300 s"
