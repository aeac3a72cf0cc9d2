#!/bin/sh
# orch-agent.sh: the device side of orch. Spec: docs/agent-protocol.md (protocol v1).
#
# One POSIX sh file that runs unchanged under mksh with a toybox-only PATH (stock Android),
# dash and bash. Hence: no awk/dd/tr/expr/bc (toybox lacks them), no python, no arrays, and
# no `printf` in hot paths (it is not a builtin in mksh). The sampling loop forks nothing
# but one `sleep` per interval: a fork per value costs ~10x more CPU on the measured device.
#
# Results: a function hands back what it found in its exit status or in the UPPER-CASE
# variable(s) its comment names (NOW, ZONES, STATE, ...), never by printing it: a caller
# would need a command substitution, a fork, which the sampling path must not make. POSIX sh
# has no `local`, so lower-case names are scratch that any function may overwrite.
#
# `ORCH_AGENT_LIB=1 . ./orch-agent.sh` defines the functions and returns without running a
# command (the unit tests, tests/test_agent_units.py; docs/agent-protocol.md).
#
# The parts, each under a banner:
#   1. Settings and output        paths, TAB, say, die, the clock
#   2. Processes and jobs         alive, pid + start time, job_state, live_jobs
#   3. The job tag                ORCH_JOB in /proc/PID/environ: tagged, kill_tagged
#   4. Sensors and power          what a job reads, found once: zones, cores, battery, power
#   5. The sample                 one S line, builtins only
#   6. Engine output              the O, E and C lines
#   7. Supervisor: setup          supervise (the steps in order), meta, pid files, H line
#   8. Supervisor: engine start   argv, the watcher, the engine's exec
#   9. Supervisor: sampling loop  sample_step, timeout, thermal ceiling, the interval's sleep
#  10. Supervisor: the end        the engine's status, strays, last output, OOM, the X line
#  10b. Session feeder            a session's requests on the engine's stdin, T lines
#  11. Process groups, OOM        group members and their cleanup, the kernel log's evidence
#  12. Cooldown                   the `cooldown` command
#  13. Commands                   attach, kill, reap, facts, start
#  14. The command line           main, and the source-only mode
AGENT_VERSION=1.5.2

# ==============================================================================================
# 1. Settings and output
#    Paths (overridable), TAB and NL without a fork, say (one line out, verbatim), die,
#    and the clock: now_ms from /proc/uptime, ms_secs for sleep.
# ==============================================================================================

# Paths are overridable for tests and unusual devices.
MEMINFO=${ORCH_MEMINFO:-/proc/meminfo}
THERMAL_DIR=${ORCH_THERMAL_DIR:-/sys/class/thermal}
BATTERY_DIR=${ORCH_BATTERY_DIR:-/sys/class/power_supply/battery}
CPUINFO=${ORCH_CPUINFO:-/proc/cpuinfo}
CPU_DIR=${ORCH_CPU_DIR:-/sys/devices/system/cpu}
LOADAVG=${ORCH_LOADAVG:-/proc/loadavg}
UPTIME=${ORCH_UPTIME:-/proc/uptime}
# Power sources (power_paths): RAPL counters, hwmon power sensors, and where a battery's
# files are not in BATTERY_DIR (a laptop's BAT0), the power_supply class to search.
POWERCAP_DIR=${ORCH_POWERCAP_DIR:-/sys/class/powercap}
HWMON_DIR=${ORCH_HWMON_DIR:-/sys/class/hwmon}
SUPPLY_DIR=${ORCH_POWER_SUPPLY_DIR:-/sys/class/power_supply}
# A TAB without forking (printf is no builtin in mksh): the middle of the startup IFS,
# which every shell sets to <space><tab><newline> whatever the environment says.
TAB=${IFS#?}
TAB=${TAB%?}
NL=${IFS#??}

# say LINE: write LINE verbatim plus a newline, as one builtin. `echo` is unusable (dash and
# mksh expand backslashes); printf is a builtin in dash/bash, `print -r` in mksh.
if [ "$(command -v printf)" = printf ]; then
  say() { printf '%s\n' "$1"; }
elif [ "$(command -v print)" = print ]; then
  say() { print -r -- "$1"; }
else
  say() { printf '%s\n' "$1"; }
fi

die() { say "orch-agent: $*" >&2; exit 2; }

# now_ms: NOW = uptime in ms from /proc/uptime ("12345.67 ..."); no `date` fork.
now_ms() {
  read -r up rest <"$UPTIME"
  case $up in
    *.*) s=${up%%.*}; f=${up#*.}00; f=${f%"${f#??}"}; f=${f#0} ;;  # keep 2 digits, no octal
    *) s=$up; f=0 ;;
  esac
  NOW=$((s * 1000 + f * 10))
}

# ms_secs MS: SECS = MS milliseconds as seconds with three decimals (what sleep takes)
ms_secs() {
  SECS=$(($1 % 1000))
  case ${#SECS} in 1) SECS=00$SECS ;; 2) SECS=0$SECS ;; esac
  SECS=$(($1 / 1000)).$SECS
}

# ==============================================================================================
# 2. Processes and jobs
#    Is a process alive, is it still the one a job recorded (pid + start time), and the
#    state of one job or of every job under a runs directory (status, jobs, start's busy check).
# ==============================================================================================

# alive PID: the process exists and is not a zombie. `kill -0` alone is not enough: a zombie
# answers it (dash keeps children unreaped; a container's pid 1 may never reap orphans).
alive() {
  st=''
  while read -r k v rest; do
    case $k in State:) st=$v; break ;; esac
  done 2>/dev/null <"/proc/$1/status"
  case $st in ''|Z|X) return 1 ;; esac
  return 0
}

# sup_alive: the supervisor recorded in JOBDIR/pid is running; SPID = its pid.
sup_alive() {
  SPID=''
  read -r SPID 2>/dev/null <"$JOBDIR/pid"
  case $SPID in ''|*[!0-9]*) return 1 ;; esac
  alive "$SPID" && same_start "$SPID" "$JOBDIR/sup.start"
}

# same_start PID FILE: PID's start time is the one FILE recorded (no FILE yet: a job just
# started, or one of an older agent; then alive is all there is to know).
same_start() {
  want=''
  read -r want 2>/dev/null <"$2" || return 0
  st=''
  read -r st 2>/dev/null <"/proc/$1/stat"
  proc_start "$st"
  [ -z "$want" ] || [ "$PSTART" = "$want" ]
}

# proc_start STAT: PSTART = the start time (field 22) of a /proc/PID/stat line; with the pid
# it names one process for good (a pid is reused, a pid with its start time is not).
proc_start() {
  PSTART=''
  case $1 in *') '*) ;; *) return ;; esac
  # Split on purpose, as in `sample`: a state letter and numbers, nothing a glob expands.
  # shellcheck disable=SC2086
  stat_fields ${1##*) }
  PSTART=$START
}

# ppid_of STAT: PPID_OF = the parent pid (field 4) of a /proc/PID/stat line.
ppid_of() {
  PPID_OF=''
  case $1 in *') '*) ;; *) return ;; esac
  # Split on purpose, as in `sample`: a state letter and numbers, nothing a glob expands.
  # shellcheck disable=SC2086
  set -- ${1##*) }
  PPID_OF=$2
}

# engine_alive: the engine recorded in JOBDIR/engine.pid still runs (EP = its pid).
engine_alive() {
  EP=''
  read -r EP 2>/dev/null <"$JOBDIR/engine.pid"
  case $EP in ''|*[!0-9]*) return 1 ;; esac
  alive "$EP" && same_start "$EP" "$JOBDIR/engine.start"
}

# job_state: STATE = full | done | running PID | orphan PID | dead | absent for JOBDIR. `full`:
# the job ended but its spool could not take the X line (the device's storage was full). `orphan`:
# the supervisor is gone but the engine runs on (nobody spools it). `dead` needs evidence:
# neither runs, and the spool's last line is no X line (then it is `done`).
job_state() {
  if [ -f "$JOBDIR/spool-full" ]; then STATE='full'
  elif sup_alive; then STATE="running $SPID"
  elif engine_alive; then STATE="orphan $EP"
  elif [ -e "$JOBDIR/pid" ] || [ -e "$JOBDIR/spool" ]; then
    last=''
    [ -s "$JOBDIR/spool" ] && last=$(tail -n 1 "$JOBDIR/spool" 2>/dev/null)
    # `done` alone is no evidence (anyone can create it): the spool's last line must be the
    # X line the supervisor wrote into it (end_proven).
    case $last in "X$TAB"*) end_proven "$last" && STATE='done' || STATE='dead' ;;
      *) STATE='dead' ;; esac
  else STATE='absent'
  fi
}

# end_proven LINE: LINE, an X line read from the spool, is the supervisor's own end. The
# spool is the supervisor's stdout, but the engine (and anything it starts) runs as the same
# user and is told its job directory: it can append an X line to the spool, and create a
# `done` file, at any time. What it cannot fake without killing or rewriting the agent's own
# bookkeeping is the proof checked here: the supervisor recorded in `pid` + `sup.start` is
# gone, the engine recorded in `engine.pid` + `engine.start` is gone, and `done`, which the
# supervisor writes after its X line and just before it exits, holds this very line. (A
# per-job secret was the alternative: the engine can read every file of its job and the
# supervisor's environment, and the controller's transports give a command no private
# channel on every device, so a secret would be no stronger than this and much more code.)
# The caller also checks that nothing follows LINE in the spool: the supervisor writes
# nothing after its X line (docs/agent-protocol.md, "The end is the supervisor's").
end_proven() {
  sup_alive && return 1
  engine_alive && return 1
  d=''
  IFS= read -r d 2>/dev/null <"$JOBDIR/done"
  [ -n "$d" ] && [ "$d" = "$1" ]
}

# live_jobs RUNSDIR [EXCEPT]: LIVE = one "running|orphan<TAB>DIR<TAB>PID" line per job dir
# under RUNSDIR whose supervisor or engine still runs (any session's), EXCEPT left out; then
# one "stray<TAB>NAME<TAB>PID" line per process that carries the tag of a job of RUNSDIR,
# RUNSDIR/NAME/ exactly (tagged -j: not a job of a workdir nested inside), but belongs to no
# live job: a daemon an engine left, or a job whose directory was
# removed. Job directories alone cannot see those.
live_jobs() {
  LIVE=''
  runs=$1 except=$2
  tagged "$runs" -j
  left=" $TPIDS "
  for d in "$runs"/*; do
    # not skipped for a `done` file: anyone can create one (end_proven); sup_alive decides
    [ "$d" = "$except" ] || [ -f "$d/pid" ] || continue
    JOBDIR=$d
    if [ "$d" = "$except" ]; then :
    elif sup_alive; then LIVE="$LIVE${LIVE:+
}running$TAB$d$TAB$SPID"
    elif engine_alive; then LIVE="$LIVE${LIVE:+
}orphan$TAB$d$TAB$EP"
    else continue
    fi
    [ "$left" = '  ' ] && continue
    tagged "$d/" -x
    for p in $TPIDS; do
      case $left in *" $p "*) left="${left%%" $p "*} ${left#*" $p "}" ;; esac
    done
  done
  for p in $left; do
    proc_name "$p" || continue
    LIVE="$LIVE${LIVE:+
}stray$TAB$PNAME$TAB$p"
  done
}

# proc_name PID: PNAME = the process's name (comm) when it lives and is no zombie.
proc_name() {
  PNAME='' st=''
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  case $st in *') '*) ;; *) return 1 ;; esac
  PNAME=${st#*\(}
  PNAME=${PNAME%\)*}
  # Split on purpose, as in `sample`: a state letter and numbers, nothing a glob expands.
  # shellcheck disable=SC2086
  set -- ${st##*) }
  [ "$1" != Z ]
}

# ==============================================================================================
# 3. The job tag
#    Every process of a job carries ORCH_JOB=JOBDIR/ (exec_engine sets it), found in
#    /proc/PID/environ whatever it did to its process group (docs/agent-protocol.md,
#    "Process groups and the job tag").
# ==============================================================================================

# tagged VALUE -x|-j: TPIDS = "PID ..." and TAGGED = "PID(comm) ..." of the live processes
# whose environment holds ORCH_JOB=VALUE exactly (-x), or, with -j, ORCH_JOB=VALUE/NAME/ for
# any NAME without a slash: every job of the runs directory VALUE and nothing else. Never a
# prefix: another device's workdir may lie inside this one's runs directory (or share the
# start of its path), and its live jobs' tags start with VALUE/ too (docs/reliability.md,
# "Overlapping workdirs"). exec_engine gives the engine ORCH_JOB=JOBDIR/ and every descendant
# inherits it: /proc/PID/environ is the environment a process started with, readable by the
# same uid without root (also on a phone), and neither setsid, a double fork nor a removed
# job directory takes it away. One grep (toybox has it; -z: the file is NUL-separated) and
# no use in the sampling loop. This shell itself never carries the tag.
tagged() {
  TPIDS='' TAGGED=''
  command -v grep >/dev/null 2>&1 || return 0
  if [ "$2" = -j ]; then
    bre_quote "$1"
    files=$(grep -l -a -z -x -e "ORCH_JOB=$Q/[^/][^/]*/" /proc/[0-9]*/environ 2>/dev/null)
  else
    files=$(grep -l -a -z -x -F -e "ORCH_JOB=$1" /proc/[0-9]*/environ 2>/dev/null)
  fi
  for f in $files; do
    p=${f#/proc/}
    p=${p%/environ}
    case $p in ''|*[!0-9]*) continue ;; esac
    [ "$p" = "$$" ] && continue
    proc_name "$p" || continue
    TPIDS="$TPIDS $p" TAGGED="$TAGGED $p($PNAME)"
  done
  TPIDS=${TPIDS# } TAGGED=${TAGGED# }
}

# bre_quote STRING: Q = STRING with every character a basic regular expression treats
# specially escaped, so that a path with . [ ] * ^ $ \ in it matches only itself. Builtins only.
bre_quote() {
  Q='' bq_s=$1
  while [ -n "$bq_s" ]; do
    bq_r=${bq_s#?} bq_c=${bq_s%"${bq_s#?}"}
    case $bq_c in '.'|'['|']'|'*'|'^'|'$'|\\) Q="$Q\\$bq_c" ;; *) Q="$Q$bq_c" ;; esac
    bq_s=$bq_r
  done
}

# kill_tagged VALUE: TERM the processes tagged ORCH_JOB=VALUE, KILL what is left after 3 s.
# KILLED = what they were ("PID(comm) ...", empty when none), KHOW how they ended.
kill_tagged() {
  tagged "$1" -x
  KILLED=$TAGGED KHOW=TERM
  [ -n "$TPIDS" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $TPIDS 2>/dev/null
  now_ms; k0=$NOW
  i=0
  while [ $i -lt 100 ]; do
    tagged "$1" -x
    [ -n "$TPIDS" ] || return 0
    now_ms
    if [ $((NOW - k0)) -ge 3000 ]; then
      KHOW="TERM, KILL after 3 s: $TAGGED"
      # shellcheck disable=SC2086
      kill -KILL $TPIDS 2>/dev/null
      return 0
    fi
    sleep 0.1 || sleep 1
    i=$((i + 1))
  done
}

# ==============================================================================================
# 4. Sensors and power
#    What a job reads, listed once per job so that the sampling loop reads known paths only:
#    thermal zones, battery, cores with cpufreq, power sources; read_sensor (cooldown, the
#    thermal ceiling).
# ==============================================================================================

# list_zones: ZONES = "N:c N: ..." for every readable thermal_zoneN/temp, listed once; the
# ":c" mark means the zone's type looks like a CPU sensor (it feeds cpu_temp_mC).
list_zones() {
  ZONES=''
  for z in "$THERMAL_DIR"/thermal_zone*; do
    [ -r "$z/temp" ] || continue
    n=${z##*thermal_zone}
    case $n in ''|*[!0-9]*) continue ;; esac
    ty=''
    read -r ty 2>/dev/null <"$z/type"
    case $ty in
      *[Cc][Pp][Uu]*|x86_pkg_temp|coretemp*|k10temp*|*cluster*|soc_thermal) c=c ;;
      BIG|MID|LITTLE|big|mid|little) c=c ;;  # Exynos / Tensor CPU clusters
      *) c='' ;;
    esac
    ZONES="$ZONES $n:$c"
  done
}

# battery_paths: BATT = the sysfs battery temperature file and BSTAT its status file, each
# empty when unreadable; DUMPSYS=1 when the temperature must come from `dumpsys battery`
# instead (most phones without root), which forks, so at most every DUMPSYS_EVERY-th sample
# (DS_N counts down to the next one).
battery_paths() {
  BATT='' BSTAT='' DUMPSYS=''
  [ -r "$BATTERY_DIR/temp" ] && BATT=$BATTERY_DIR/temp
  [ -r "$BATTERY_DIR/status" ] && BSTAT=$BATTERY_DIR/status
  if [ -z "$BATT" ] && command -v dumpsys >/dev/null 2>&1; then DUMPSYS=1; fi
  DUMPSYS_EVERY=${ORCH_DUMPSYS_EVERY:-10} DS_N=0
}

# list_freqs: FREQ_CPUS = "N N ..." for every core with a readable cpufreq/scaling_cur_freq,
# listed once per supervisor (numbers only, so a path with blanks cannot split the list).
list_freqs() {
  FREQ_CPUS=''
  for d in "$CPU_DIR"/cpu[0-9]*; do
    n=${d##*/cpu}
    case $n in ''|*[!0-9]*) continue ;; esac
    [ -r "$d/cpufreq/scaling_cur_freq" ] && FREQ_CPUS="$FREQ_CPUS $n"
  done
}

# read_sensor SENSOR: VAL = its temperature in milli-°C (empty when unreadable). SENSOR is
# `cpu` (the max over CPU zones, as cpu_temp_mC), `battery` (deci-°C on disk), or a
# pattern matched against the zones' `type` (the max over the zones that match).
read_sensor() {
  VAL=''
  case $1 in
    battery)
      t=''
      [ -n "$BATT" ] && read -r t 2>/dev/null <"$BATT"
      case ${t#-} in ''|*[!0-9]*) ;; *) VAL=$((t * 100)) ;; esac
      return ;;
  esac
  for z in $ZONES; do
    n=${z%:*} t=''
    if [ "$1" = cpu ]; then
      [ "${z#*:}" = c ] || continue
    else
      ty=''
      read -r ty 2>/dev/null <"$THERMAL_DIR/thermal_zone$n/type"
      # SENSOR is a pattern on purpose (`cooldown 'cpu-*' ...`, docs/agent-protocol.md)
      # shellcheck disable=SC2254
      case $ty in $1) ;; *) continue ;; esac
    fi
    read -r t 2>/dev/null <"$THERMAL_DIR/thermal_zone$n/temp"
    case ${t#-} in ''|*[!0-9]*) continue ;; esac
    if [ -z "$VAL" ] || [ "$t" -gt "$VAL" ]; then VAL=$t; fi
  done
}

# power_paths: the device's power sources, listed once per supervisor (docs/energy.md). Lists
# hold sysfs names and file names only, so no path with blanks can split them:
#   PWR_BDIR   the battery directory whose current_now and voltage_now (or power_now) read:
#              BATTERY_DIR, else the first SUPPLY_DIR/* of type Battery (a laptop's BAT0);
#              empty without one. PWR_BFILES = "FILE:KEY ..." of its readable power files.
#   PWR_RAPL   "NAME ..." of the powercap domains (intel-rapl:0, ...) whose energy_uj reads,
#              sampled as rapl<index>_uj in this order; PWR_RAPL_DENIED those whose does not
#              (root-only since Linux 5.10).
#   PWR_HWMON  "hwmonN/powerM_input ..." (µW) when no RAPL domain reads; hwmon<index>_uw.
# The values go out raw, as the files give them (µA or mA, either sign): the controller
# reads units and signs (orchestrator/results/energy.py). A file is tried by reading it, not
# by `-r`: sysfs grants modes that a read then refuses.
power_paths() {
  PWR_BDIR='' PWR_BFILES='' PWR_RAPL='' PWR_RAPL_DENIED='' PWR_HWMON=''
  for d in "$BATTERY_DIR" "$SUPPLY_DIR"/*; do
    [ -d "$d" ] || continue
    if [ "$d" != "$BATTERY_DIR" ]; then
      ty=''
      read -r ty 2>/dev/null <"$d/type"
      [ "$ty" = Battery ] || continue
    fi
    i='' v='' p=''
    read -r i 2>/dev/null <"$d/current_now"
    read -r v 2>/dev/null <"$d/voltage_now"
    read -r p 2>/dev/null <"$d/power_now"
    if { [ -n "$i" ] && [ -n "$v" ]; } || [ -n "$p" ]; then PWR_BDIR=$d; break; fi
  done
  if [ -n "$PWR_BDIR" ]; then
    for f in current_now:batt_ua voltage_now:batt_uv power_now:batt_uw \
        charge_counter:batt_uah energy_now:batt_uwh; do
      v=''
      read -r v 2>/dev/null <"$PWR_BDIR/${f%%:*}"
      [ -n "$v" ] && PWR_BFILES="$PWR_BFILES $f"
    done
    [ -z "$BSTAT" ] && [ -r "$PWR_BDIR/status" ] && BSTAT=$PWR_BDIR/status
  fi
  for d in "$POWERCAP_DIR"/*; do
    [ -e "$d/energy_uj" ] || continue
    n=${d##*/}
    case $n in ''|*[!A-Za-z0-9:._-]*) continue ;; esac
    v=''
    read -r v 2>/dev/null <"$d/energy_uj"
    case $v in
      ''|*[!0-9]*) PWR_RAPL_DENIED="$PWR_RAPL_DENIED $n" ;;
      *) PWR_RAPL="$PWR_RAPL $n" ;;
    esac
  done
  [ -n "$PWR_RAPL" ] && return 0
  for f in "$HWMON_DIR"/hwmon*/power*_input; do
    n=${f#"$HWMON_DIR"/}
    case $n in */*/*|*[!A-Za-z0-9/._-]*) continue ;; esac
    v=''
    read -r v 2>/dev/null <"$f"
    case $v in ''|*[!0-9]*) ;; *) PWR_HWMON="$PWR_HWMON $n" ;; esac
  done
}

# power_fields: PWR = the S line's power fields ("<TAB>key=value" each), one read per file
# power_paths found: batt_ua, batt_uv, batt_uw, batt_uah, batt_uwh as the battery gives them,
# rapl<N>_uj (cumulative, wraps at max_energy_range_uj), hwmon<N>_uw. Builtins only; values
# are never computed with here (RAPL counters pass 2^31, and mksh's arithmetic is 32-bit).
power_fields() {
  PWR=''
  for f in $PWR_BFILES; do
    v=''
    read -r v 2>/dev/null <"$PWR_BDIR/${f%%:*}"
    case ${v#-} in ''|*[!0-9]*) ;; *) PWR="$PWR$TAB${f#*:}=$v" ;; esac
  done
  n=0
  for d in $PWR_RAPL; do
    v=''
    read -r v 2>/dev/null <"$POWERCAP_DIR/$d/energy_uj"
    case $v in ''|*[!0-9]*) ;; *) PWR="$PWR${TAB}rapl${n}_uj=$v" ;; esac
    n=$((n + 1))
  done
  n=0
  for f in $PWR_HWMON; do
    v=''
    read -r v 2>/dev/null <"$HWMON_DIR/$f"
    case $v in ''|*[!0-9]*) ;; *) PWR="$PWR${TAB}hwmon${n}_uw=$v" ;; esac
    n=$((n + 1))
  done
}

# power_facts: F lines naming the power source (power.source; "no power source" when there
# is none), the battery's units and sign of discharge as read now, each RAPL domain's name
# and wrap-around range, and why a RAPL counter that exists gives nothing.
power_facts() {
  power_paths
  src=''
  if [ -n "$PWR_RAPL" ]; then
    names='' n=0
    for d in $PWR_RAPL; do
      nm=''
      read -r nm 2>/dev/null <"$POWERCAP_DIR/$d/name"
      F "power.rapl.$n.domain" "$d"
      F "power.rapl.$n.name" "${nm:-$d}"
      mx=''
      read -r mx 2>/dev/null <"$POWERCAP_DIR/$d/max_energy_range_uj"
      F "power.rapl.$n.max_uj" "$mx"
      names="$names ${nm:-$d}"
      n=$((n + 1))
    done
    src="rapl:$names"
  fi
  if [ -n "$PWR_RAPL_DENIED" ]; then
    F power.rapl.unreadable "energy_uj of${PWR_RAPL_DENIED} cannot be read (root-only since Linux 5.10): run the agent as root or make energy_uj readable; not measured, never 0"
  fi
  if [ -n "$PWR_HWMON" ]; then
    n=0
    for f in $PWR_HWMON; do
      nm=''
      read -r nm 2>/dev/null <"$HWMON_DIR/${f%%/*}/name"
      F "power.hwmon.$n.name" "${nm:-${f%%/*}}/${f#*/}"
      n=$((n + 1))
    done
    src="${src:+$src; }hwmon:$PWR_HWMON"
  fi
  if [ -n "$PWR_BDIR" ]; then
    F power.battery.path "$PWR_BDIR"
    fl=''
    for f in $PWR_BFILES; do fl="$fl ${f%%:*}"; done
    F power.battery.files "${fl# }"
    i='' v='' s=''
    read -r i 2>/dev/null <"$PWR_BDIR/current_now"
    read -r v 2>/dev/null <"$PWR_BDIR/voltage_now"
    read -r s 2>/dev/null <"$PWR_BDIR/status"
    # units by magnitude: a battery holds 2.5-25 V (mV: < 100000), and a device that answers
    # adb draws more than 10 mA (mA: |I| < 10000)
    case $v in ''|*[!0-9]*) ;; *) if [ "$v" -lt 100000 ]; then F power.battery.voltage_unit mV; else F power.battery.voltage_unit uV; fi ;; esac
    a=${i#-}
    case $a in ''|*[!0-9]*|0) ;; *) if [ "$a" -lt 10000 ]; then F power.battery.current_unit mA; else F power.battery.current_unit uA; fi ;; esac
    case $s:$i in
      Discharging:-*|Charging:[1-9]*) F power.battery.discharge_sign negative ;;
      Discharging:[1-9]*|Charging:-*) F power.battery.discharge_sign positive ;;
    esac
    src="${src:+$src; }battery:$fl"
  fi
  F power.source "${src:-no power source}"
}

# ==============================================================================================
# 5. The sample
#    One S line from builtins only: no fork per value (docs/agent-protocol.md, "S").
# ==============================================================================================

# centi X.YZ: C = the decimal X.YZ times 100, as an integer (S values are integers); empty
# when X.YZ is no unsigned decimal, an empty one included (an unreadable /proc/loadavg must
# give no load1_x100, not 0).
centi() {
  case $1 in
    *.*) ci=${1%%.*} cf=${1#*.} ;;
    *) ci=$1 cf='' ;;
  esac
  case $ci$cf in ''|*[!0-9]*) C=''; return ;; esac
  cf=${cf}00; cf=${cf%"${cf#??}"}; cf=${cf#0}   # 2 digits, no octal: "0.08" -> 8
  ci=${ci#0}   # no octal: "0.52" -> 52
  C=$((${ci:-0} * 100 + cf))
}

# stat_fields FIELDS-AFTER-COMM: split /proc/PID/stat (after "(comm) ") with the shell's
# own field splitting. Sets MAJ (majflt, field 10 here), TICKS (utime + stime, 12 + 13),
# THREADS (18) and START (starttime, 20).
stat_fields() { MAJ=${10}; TICKS=$((${12} + ${13})); THREADS=${18}; START=${20}; }

# sample: print one S line using builtins only. Sets GONE=1 once the engine has ended
# (status file vanished, zombie, or the pid now belongs to another process).
sample() {
  now_ms
  line="S$TAB$((NOW - UP0))"
  st='' rss='' hwm='' swp=''
  while read -r k v rest; do
    case $k in
      State:) st=$v ;;
      VmHWM:) hwm=$v ;;
      # State and VmHWM come before VmRSS: a one-shot job stops reading here; a session job
      # reads on to VmSwap, how much of the engine the kernel swapped out (an idle session's
      # cache): nine more lines a sample, only where the question is asked
      VmRSS:) rss=$v; [ -n "$SESSION" ] || break ;;
      # Threads follows VmSwap, so a kernel without VmSwap stops there, not at the file's end
      VmSwap:) swp=$v; break ;;
      Threads:) break ;;
    esac
  done 2>/dev/null <"/proc/$EPID/status"
  case $st in ''|Z|X) GONE=1 ;; esac
  [ -n "$rss" ] && line="$line${TAB}rss_kb=$rss"
  [ -n "$hwm" ] && line="$line${TAB}hwm_kb=$hwm"
  [ -n "$swp" ] && line="$line${TAB}swap_kb=$swp"
  # /proc/PID/stat split by `read` itself as it reads (fields 12 majflt, 14+15 utime+stime,
  # 20 threads, 22 starttime): splitting a saved copy with a function call cost mksh 0.3 ms
  # a sample. A comm with a blank shifts the fields; then the third is no state letter, and
  # the line is read again and split after its last ") ".
  MAJ='' START='' TICKS=''
  # shellcheck disable=SC2034  # x: the fields skipped
  read -r x x s x x x x x x x x MAJ x u y x x x x THREADS x START x 2>/dev/null <"/proc/$EPID/stat"
  case $s in
    [A-Za-z]) case $u$y in *[!0-9]*) START='' ;; *) TICKS=$((u + y)) ;; esac ;;
    *)
      stat='' START=''
      read -r stat 2>/dev/null <"/proc/$EPID/stat"
      case $stat in
        *') '*)
          # Split on purpose (no fork to cut fields): after "(comm) " come a state letter
          # and numbers only, nothing a glob could expand.
          # shellcheck disable=SC2086
          stat_fields ${stat##*) } ;;
      esac ;;
  esac
  if [ -n "$START" ]; then
    line="$line${TAB}majflt=$MAJ${TAB}cpu_ticks=$TICKS${TAB}threads=$THREADS"
    [ -z "$START0" ] && START0=$START
    [ "$START" = "$START0" ] || GONE=1
  fi
  while read -r k v rest; do
    case $k in MemAvailable:) line="$line${TAB}mem_avail_kb=$v"; break ;; esac
  done 2>/dev/null <"$MEMINFO"
  cmax=''
  for z in $ZONES; do
    n=${z%:*} t=''
    read -r t 2>/dev/null <"$THERMAL_DIR/thermal_zone$n/temp"
    case ${t#-} in ''|*[!0-9]*) continue ;; esac
    line="$line${TAB}tz${n}_mC=$t"
    if [ "${z#*:}" = c ] && { [ -z "$cmax" ] || [ "$t" -gt "$cmax" ]; }; then cmax=$t; fi
  done
  [ -n "$cmax" ] && line="$line${TAB}cpu_temp_mC=$cmax"
  TEMP_CPU=$cmax TEMP_BATT=''   # what check_ceiling compares (no second read of a zone)
  # 1-minute load average x 100: more runnable threads than cores means the engine shared
  # the CPU with someone else.
  l1='' rest=''
  read -r l1 rest 2>/dev/null <"$LOADAVG"
  centi "$l1"
  [ -n "$C" ] && line="$line${TAB}load1_x100=$C"
  # The current frequency of the fastest core (max over cores): the core the engine's
  # compute runs on sets the pace, idle cores clock down and mean nothing, and throttling caps
  # whole clusters, so the max drops when the fastest cluster is held back. One key per
  # sample, where per-core values would be eight on a phone.
  fmax=''
  for n in $FREQ_CPUS; do
    fq=''
    read -r fq 2>/dev/null <"$CPU_DIR/cpu$n/cpufreq/scaling_cur_freq"
    case $fq in ''|*[!0-9]*) continue ;; esac
    if [ -z "$fmax" ] || [ "$fq" -gt "$fmax" ]; then fmax=$fq; fi
  done
  [ -n "$fmax" ] && line="$line${TAB}cpu_khz=$fmax"
  if [ -n "$BATT" ]; then
    t=''
    read -r t 2>/dev/null <"$BATT"
    case ${t#-} in ''|*[!0-9]*) ;; *) line="$line${TAB}batt_temp_dC=$t" TEMP_BATT=$t ;; esac
  elif [ -n "$DUMPSYS" ]; then
    DS_N=$((DS_N - 1))
    if [ "$DS_N" -le 0 ]; then
      DS_N=$DUMPSYS_EVERY
      battery_dumpsys
    fi
    [ -n "$DS_T" ] && line="$line${TAB}batt_temp_dC=$DS_T" TEMP_BATT=$DS_T
  fi
  if [ -n "$BSTAT" ]; then
    t=''
    read -r t 2>/dev/null <"$BSTAT"
    case $t in Charging|Full) line="$line${TAB}batt_charging=1" ;; ?*) line="$line${TAB}batt_charging=0" ;; esac
  elif [ -n "$DUMPSYS" ]; then   # no readable status file: dumpsys's, as often as it runs
    case $DS_S in Charging|Full) line="$line${TAB}batt_charging=1" ;; ?*) line="$line${TAB}batt_charging=0" ;; esac
  fi
  power_fields
  say "$line$PWR"
}

# battery_dumpsys: DS_T (deci-°C), DS_S (charging state) and DS_L (level, percent) from
# `dumpsys battery`.
battery_dumpsys() {
  DS_T='' DS_S='' DS_L=''
  ds=$(dumpsys battery 2>/dev/null) || return 0
  oifs=$IFS
  set -f; IFS='
'
  for l in $ds; do
    l=${l#"${l%%[! ]*}"}
    case $l in
      temperature:*) DS_T=${l#*: } ;;
      level:*) DS_L=${l#*: } ;;
      status:*) case ${l#*: } in 2) DS_S=Charging ;; 3) DS_S=Discharging ;;
                  4) DS_S="Not charging" ;; 5) DS_S=Full ;; *) DS_S=Unknown ;; esac ;;
    esac
  done
  IFS=$oifs; set +f
  case ${DS_T#-} in ''|*[!0-9]*) DS_T='' ;; esac
  case $DS_L in ''|*[!0-9]*) DS_L='' ;; esac
}

# ==============================================================================================
# 6. Engine output
#    The engine's stdout, stderr and CSV, drained as O, E and C lines; a partial line waits.
# ==============================================================================================

# drain FD TAG: print every complete line now readable on FD as "TAG<TAB>line". At EOF
# `read` fails but leaves a partial line in $l: keep it in P_TAG (P_O, P_E or P_C) and
# prefix it next time, so a line the engine is still writing is never split. The three
# names are spelled out, not built with eval: a tag never becomes code.
drain() {
  case $2 in O) p=$P_O ;; E) p=$P_E ;; C) p=$P_C ;; *) p='' ;; esac
  while :; do
    l=''
    if IFS= read -r l <&"$1"; then
      l=$p$l p=''
      [ ${#l} -gt "$LINE_KEEP" ] && cut_line
      say "$2$TAB$l"
      # a session's turn ends with its BMOE_DONE or BMOE_ERROR line (session_line)
      [ -n "$SESSION" ] && [ "$2" = O ] && session_line "$l"
    else
      p=$p$l
      # a line still being written is held to the bound too (cut again as it grows)
      [ ${#p} -gt "$LINE_KEEP" ] && { l=$p; cut_line; p=$l; }
      break
    fi
  done
  case $2 in O) P_O=$p ;; E) P_E=$p ;; C) P_C=$p ;; esac
}

# An engine's line is held to orch's one bound, MAX_LINE = 65,536 bytes (orchestrator/
# line_bound.py, checked equal by tests/test_long_lines.py): a longer one keeps its first
# LINE_KEEP characters (room for the tag and the mark within the bound) and LINE_CUT, the
# mark the controller puts on a line it cuts. So the spool, `attach` and the controller never
# carry the rest of a 100 MB line; only the `read` that met it held it, once.
MAX_LINE=65536
LINE_KEEP=$((MAX_LINE - 64))
LINE_CUT=' [cut: the line was over 65,536 bytes]'

# cut_line: L = the first LINE_KEEP characters of L, then LINE_CUT (also when L already ends
# with it: a growing partial line is cut again). ${L:0:N} in mksh and bash (hidden from
# dash's parser by eval), printf's precision in dash; one subshell tells which, and only a
# line over the bound pays for it.
cut_line() {
  if (eval 'cl=ab; [ "${cl:0:1}" = a ]') 2>/dev/null; then
    eval 'l=${l:0:'"$LINE_KEEP"'}'
  else
    l=$(printf "%.${LINE_KEEP}s" "$l")
  fi
  l=$l$LINE_CUT
}

# open_csv: the engine may create its CSV late; open it (fd 5) as soon as it exists.
# `command exec` keeps a failed open from exiting the shell.
open_csv() {
  [ -n "$CSV" ] && [ -z "$CSV_OPEN" ] && [ -f "$CSV" ] &&
    command exec 5<"$CSV" 2>/dev/null && CSV_OPEN=1
}

# drain_all: drain the engine's stdout (O), stderr (E) and, once it exists, its CSV (C).
drain_all() {
  drain 3 O
  drain 4 E
  open_csv
  [ -n "$CSV_OPEN" ] && drain 5 C
}

# ==============================================================================================
# 7. Supervisor: setup
#    One job's detached supervisor, in four parts (7 to 10), one function per step; this part:
#    supervise (every step in order), meta, the pid files, the H line and the job's W lines.
# ==============================================================================================

# supervise: the detached process `start` launches. Its stdout is the spool. One step per
# function below, in the order the spool shows them (docs/agent-protocol.md, "Spool order").
# They share the job's state in globals: UP0 (uptime at the start), INTERVAL, SLP, TIMEOUT_MS,
# CSV, CWD, RUN (from meta), SETSID, WPID (the watcher), EPID (the engine), WOKE/SL (the USR1
# wake-up), GONE, CAUSE, TERM_AT, RC (the engine's exit status).
supervise() {
  cd "$JOBDIR" || exit 2
  now_ms; UP0=$NOW
  read_meta
  exec >>spool || exit 2
  record_supervisor
  say_header
  check_meta
  check_env
  SETSID=$(command -v setsid)
  [ -n "$SETSID" ] || say "W${TAB}no setsid on PATH: the engine shares the agent's process group"
  list_zones
  battery_paths
  list_freqs
  power_paths
  klog_mark
  start_engine
  sample_loop
  engine_status
  end_job
}

# read_meta: INTERVAL, TIMEOUT, TIMEOUT_MS, CSV, CWD, RUN as JOBDIR/meta gives them
# (check_meta checks them once the spool is open, so that its warnings reach the stream).
read_meta() {
  INTERVAL=1000 TIMEOUT=0 TIMEOUT_MS='' CSV='' CWD='' RUN='' ABORT_MC='' ABORT_SENSOR='' ABORT_X=''
  SESSION=''
  [ -r meta ] || return 0
  while IFS= read -r l || [ -n "$l" ]; do
    case $l in
      interval_ms=*) INTERVAL=${l#*=} ;;
      timeout_s=*) TIMEOUT=${l#*=} ;;
      timeout_ms=*) TIMEOUT_MS=${l#*=} ;;
      csv=*) CSV=${l#*=} ;;
      cwd=*) CWD=${l#*=} ;;
      run=*) RUN=${l#*=} ;;
      abort_above_mC=*) ABORT_MC=${l#*=} ;;
      abort_sensor=*) ABORT_SENSOR=${l#*=} ;;
      session=*) SESSION=${l#*=} ;;
    esac
  done <meta
}

# record_supervisor: JOBDIR/pid names this process, sup.start its start time.
record_supervisor() {
  # `start` recorded $! as our pid; rewrite it only if wrong (setsid had to fork), and by
  # rename, so a concurrent `status` never reads a truncated file.
  p=''
  read -r p 2>/dev/null <pid
  [ "$p" = "$$" ] || { say "$$" >pid.new && mv -f pid.new pid; }
  # pid + start time name this supervisor for good: after a reboot or a long time the pid
  # may belong to another process, which must not pass for a live job.
  st=''
  read -r st 2>/dev/null </proc/self/stat
  proc_start "$st"
  say "$PSTART" >sup.start
}

# say_header: the H line. t0 is epoch ms from `date` (/proc/uptime knows no epoch); a date
# without %N gives whole seconds.
say_header() {
  t0=$(date +%s%N 2>/dev/null)
  case $t0 in ''|*[!0-9]*) t0=$(date +%s)000 ;; *) t0=${t0%??????} ;; esac
  say "H${TAB}proto=1${TAB}agent=$AGENT_VERSION${TAB}run=$RUN${TAB}t0=$t0"
}

# check_meta: a W line per unusable meta value, which falls back to its default; then
# SLP = the interval as sleep takes it, TIMEOUT_MS the timeout (0: none), CSV and CWD
# absolute.
check_meta() {
  case $INTERVAL in
    ''|*[!0-9]*) say "W${TAB}bad interval_ms '$INTERVAL', using 1000"; INTERVAL=1000 ;;
  esac
  [ "$INTERVAL" -lt 10 ] && INTERVAL=10
  case $TIMEOUT in ''|*[!0-9]*) say "W${TAB}bad timeout_s '$TIMEOUT', using 0"; TIMEOUT=0 ;; esac
  # timeout_ms (sub-second timeouts) wins over timeout_s when given
  case $TIMEOUT_MS in
    '') TIMEOUT_MS=$((TIMEOUT * 1000)) ;;
    *[!0-9]*) say "W${TAB}bad timeout_ms '$TIMEOUT_MS', using timeout_s"; TIMEOUT_MS=$((TIMEOUT * 1000)) ;;
  esac
  # the thermal ceiling (check_ceiling): milli-°C, and a sensor to read it on
  case ${ABORT_MC#-} in
    '') ;;
    *[!0-9]*) say "W${TAB}bad abort_above_mC '$ABORT_MC': no thermal ceiling"; ABORT_MC='' ;;
    *) [ -n "$ABORT_SENSOR" ] || ABORT_SENSOR=cpu ;;
  esac
  ms_secs "$INTERVAL"
  SLP=$SECS
  case $CSV in ''|/*) ;; *) CSV=$JOBDIR/$CSV ;; esac
  case $CWD in '') CWD=$JOBDIR ;; /*) ;; *) CWD=$JOBDIR/$CWD ;; esac
  case $SESSION in ''|/*) ;; *) SESSION=$JOBDIR/$SESSION ;; esac
  if [ -n "$SESSION" ] && [ ! -r "$SESSION" ]; then
    say "W${TAB}session file missing: $SESSION; the engine's stdin is empty"; SESSION=''
  fi
}

# check_env: a W line per JOBDIR/env line that is no NAME=VALUE (exec_engine skips those).
check_env() {
  [ -r env ] || return 0
  while IFS= read -r l || [ -n "$l" ]; do
    case ${l%%=*} in
      ''|[!A-Za-z_]*|*[!A-Za-z0-9_]*) say "W${TAB}env: ignored line '$l'" ;;
      *) case $l in *=*) ;; *) say "W${TAB}env: ignored line '$l'" ;; esac ;;
    esac
  done <"env"
}

# ==============================================================================================
# 8. Supervisor: the engine's start
#    argv from args/NNN, the watcher that waits for the engine, and the engine's exec
#    (its own session and process group, the job's env and tag).
# ==============================================================================================

# start_engine: launch the engine under its watcher (WPID), with argv from args/NNN; EPID =
# the engine's pid; fds 3 and 4 read its stdout and stderr.
start_engine() {
  # argv: one file per element, read with `read` (arg_value), not $(cat ...): a fork per
  # element cost 1-2 ms, 30 ms a cell for a 20-word command line. Nothing goes through eval
  # or a command line.
  set --
  i=0
  while :; do
    a=$i
    while [ ${#a} -lt 3 ]; do a=0$a; done
    [ -f "args/$a" ] || break
    arg_value "args/$a"
    set -- "$@" "$ARG"
    i=$((i + 1))
  done
  [ $# -gt 0 ] || say "W${TAB}args/000 missing"
  : >"$JOBDIR/stdout"
  : >"$JOBDIR/stderr"
  P_O='' P_E='' P_C='' CSV_OPEN=''
  # The engine's end is seen at once, not at the next sample: the watcher signals USR1 to
  # this supervisor, whose trap kills the sleep it waits for (a signal landing between the
  # test of WOKE and `wait` finds SL set, so no interval is slept through).
  SL='' WOKE=''
  trap 'WOKE=1; [ -n "$SL" ] && kill "$SL" 2>/dev/null' USR1
  rm -f engine.pid
  session_open
  watch_engine "$@" &
  WPID=$!
  await_engine_pid
  exec 3<"$JOBDIR/stdout" 4<"$JOBDIR/stderr"
}

# arg_value FILE: ARG = the file's bytes exactly, newlines (a trailing one too) included.
# Each `read` that succeeds took one line and its newline; the last, failing one leaves what
# follows the last newline (nothing, or a line without one) in $l.
arg_value() {
  ARG='' l=''
  while IFS= read -r l; do ARG=$ARG$l$NL; l=''; done <"$1"
  ARG=$ARG$l
}

# watch_engine ARGV... (in the background): the watcher. It runs the engine, writes
# engine.start, engine.pid and engine.rc, `wait`s for it, wakes the supervisor (USR1) and
# exits with the engine's status.
watch_engine() {
  # the session's FIFO writer is the supervisor's alone: a copy here would keep the engine
  # from ever seeing EOF
  [ -n "$SESSION" ] && exec 6>&-
  exec_engine "$@" &
  ep=$!
  st=''
  read -r st 2>/dev/null <"/proc/$ep/stat"
  proc_start "$st"
  say "$PSTART" >engine.start
  say "$ep" >engine.pid
  wait "$ep"
  rc=$?
  say "$rc" >engine.rc
  # Signal the supervisor only while it is still our parent (no stale pid is signalled).
  st=''
  read -r st 2>/dev/null </proc/self/stat
  ppid_of "$st"
  [ "$PPID_OF" = "$$" ] && kill -USR1 "$$" 2>/dev/null
  exit "$rc"
}

# exec_engine ARGV... (in the background): become the engine. The env lines are exported
# only in this process (an env line cannot change the agent's PATH or IFS). `exec setsid`
# keeps the pid and makes the engine the leader of its own session and process group (a `&`
# child of a non-interactive shell is not a group leader, so setsid does not fork): its
# group is what timeouts, `kill` and the stray cleanup signal.
exec_engine() {
  if [ -r env ]; then
    while IFS= read -r l || [ -n "$l" ]; do
      case ${l%%=*} in ''|[!A-Za-z_]*|*[!A-Za-z0-9_]*) continue ;; esac
      case $l in *=*) export "${l%%=*}=${l#*=}" ;; esac
    done <"env"
  fi
  # The job's tag, after the env lines so that none can change it (tagged, kill_tagged).
  export "ORCH_JOB=$JOBDIR/"
  cd "$CWD" 2>>"$JOBDIR/stderr" || exit 126   # the reason shows up as an E line
  if [ -n "$SESSION" ]; then   # a session's requests come on stdin (session_open's FIFO)
    exec ${SETSID:+"$SETSID"} "$@" <"$JOBDIR/stdin" >"$JOBDIR/stdout" 2>"$JOBDIR/stderr" 6>&-
  fi
  exec ${SETSID:+"$SETSID"} "$@" </dev/null >"$JOBDIR/stdout" 2>"$JOBDIR/stderr"
}

# await_engine_pid: EPID = the pid the watcher wrote to engine.pid (a line without its
# newline is not complete yet), or the watcher's own when it ended without writing one.
await_engine_pid() {
  EPID=''
  # (The watcher may finish between a failed read and the alive check: read once more.)
  until read -r EPID 2>/dev/null <engine.pid; do
    alive "$WPID" || { read -r EPID 2>/dev/null <engine.pid; break; }
  done
  case $EPID in ''|*[!0-9]*) EPID=$WPID ;; esac
}

# ==============================================================================================
# 9. Supervisor: the sampling loop
#    One sample_step per interval: output, S line, timeout, thermal ceiling, sleep.
# ==============================================================================================

# sample_loop: one sample_step per interval until the engine has ended.
sample_loop() {
  GONE='' CAUSE='' TERM_AT='' START0='' WOKEN=''
  [ -n "$SESSION" ] && session_step   # the first request at once (or after its idle)
  while sample_step; do :; done
}

# sample_step: drain the engine's output, print one S line, enforce the timeout, sleep.
# Fails when the loop is over: the sample saw the engine gone, or this is the one more
# sample after the watcher's USR1 (the sample before it may predate the engine's end).
sample_step() {
  # The job directory removed under the job: nobody can collect it, nothing may outlive it.
  [ -d "$JOBDIR" ] || lost_job
  drain_all
  [ -n "$SESSION" ] && session_step
  sample
  [ -n "$GONE" ] && return 1
  [ -n "$WOKEN" ] && return 1
  [ -n "$WOKE" ] && WOKEN=1
  t=$((NOW - UP0))
  enforce_timeout "$t"
  check_ceiling "$t"
  [ -n "$WOKE" ] || sleep_interval "$t"
  return 0
}

# lost_job: the job directory is gone (removed, its storage unmounted): stop the engine's
# group and everything tagged with the job, as a timeout would, and end the supervisor. The
# spool went with the directory: the controller finds the job absent, the busy check no
# stray.
lost_job() {
  kill -TERM -"$EPID" 2>/dev/null || kill -TERM "$EPID" 2>/dev/null
  [ -n "$SETSID" ] && kill_strays "$EPID"
  kill_tagged "$JOBDIR/"
  exit 3
}

# enforce_timeout T_MS: once T_MS reaches TIMEOUT_MS, TERM the engine's group (CAUSE=timeout,
# TERM_AT = T_MS); KILL it when 3 s have passed since.
enforce_timeout() {
  if [ "$TIMEOUT_MS" -gt 0 ] && [ -z "$TERM_AT" ] && [ "$1" -ge "$TIMEOUT_MS" ]; then
    CAUSE=timeout TERM_AT=$1
    kill -TERM -"$EPID" 2>/dev/null || kill -TERM "$EPID" 2>/dev/null
  fi
  if [ -n "$TERM_AT" ] && [ $(($1 - TERM_AT)) -ge 3000 ]; then
    kill -KILL -"$EPID" 2>/dev/null || kill -KILL "$EPID" 2>/dev/null
  fi
  return 0
}

# check_ceiling T_MS: the thermal ceiling in flight (meta abort_above_mC, abort_sensor: cpu,
# battery or a zone type pattern). When the sample just taken reads the sensor at or above
# the ceiling, TERM the engine's group once (CAUSE=aborted, TERM_AT = T_MS, so that
# enforce_timeout KILLs it 3 s later), with a W line and the reading in the X line
# (ABORT_X: sensor=, value_mC=, above_mC=). cpu and battery reuse the sample's readings.
check_ceiling() {
  [ -n "$ABORT_MC" ] && [ -z "$TERM_AT" ] || return 0
  case $ABORT_SENSOR in
    cpu) VAL=$TEMP_CPU ;;
    battery) VAL=''; [ -n "$TEMP_BATT" ] && VAL=$((TEMP_BATT * 100)) ;;
    *) read_sensor "$ABORT_SENSOR" ;;
  esac
  [ -n "$VAL" ] && [ "$VAL" -ge "$ABORT_MC" ] || return 0
  CAUSE=aborted TERM_AT=$1
  ABORT_X="${TAB}sensor=$ABORT_SENSOR${TAB}value_mC=$VAL${TAB}above_mC=$ABORT_MC"
  say "W${TAB}thermal ceiling: $ABORT_SENSOR read $VAL mC >= $ABORT_MC mC at t_ms=$1; engine stopped (TERM, KILL after 3 s)"
  kill -TERM -"$EPID" 2>/dev/null || kill -TERM "$EPID" 2>/dev/null
  return 0
}

# sleep_interval T_MS: sleep one interval in a background `sleep` (SL while it runs, so the
# USR1 trap can cut it short); a timeout that falls before the next sample is kept: sleep
# only until it.
sleep_interval() {
  wms=$INTERVAL
  if [ "$TIMEOUT_MS" -gt 0 ] && [ -z "$TERM_AT" ] && [ $((TIMEOUT_MS - $1)) -lt "$wms" ]; then
    wms=$((TIMEOUT_MS - $1))
  fi
  # a session's next request, deadline or stop falls before the next sample: sleep until it
  if [ -n "$SESS_NEXT" ] && [ $((SESS_NEXT - $1)) -lt "$wms" ]; then wms=$((SESS_NEXT - $1)); fi
  w=$SLP
  if [ "$wms" -lt "$INTERVAL" ]; then
    [ "$wms" -lt 10 ] && wms=10
    ms_secs "$wms"
    w=$SECS
  fi
  # `6>&-`: a session's FIFO writer stays the supervisor's alone (the engine's EOF)
  sleep "$w" 6>&- &
  SL=$!
  [ -n "$WOKE" ] && kill "$SL" 2>/dev/null
  # a sleep without fractions must not turn this into a busy loop
  wait "$SL" || [ -n "$WOKE" ] || sleep 1
  SL=''
}

# ==============================================================================================
# 10. Supervisor: the end
#    After the engine's end: its status, its strays, its last output, OOM evidence, the X line.
# ==============================================================================================

# engine_status: RC = the engine's exit status, once the watcher has ended.
engine_status() {
  # The watcher's USR1 may still be on its way: ignored now, so it cannot cut this wait short.
  trap '' USR1
  wait "$WPID"
  RC=$?
  # The engine's status as the watcher saw it: bash's `wait` may answer -1 for a child that
  # it reaped while a trap ran. A line without its newline is not complete yet.
  r=''
  until read -r r 2>/dev/null <engine.rc; do
    alive "$WPID" || { read -r r 2>/dev/null <engine.rc; break; }
  done
  case $r in ''|*[!0-9]*) ;; *) RC=$r ;; esac
}

# end_job: after the engine's end: its strays killed, its last output, the W lines about it,
# the X line, then the file `done`.
end_job() {
  # What the engine left in its process group (a child it forked and did not wait for)
  # must not outlive the cell: TERM, KILL after 3 s, and a W line saying so.
  STRAYS=''
  [ -n "$SETSID" ] && kill_strays "$EPID"
  # What left the group (setsid, a daemon's double fork) still carries the job's tag.
  kill_tagged "$JOBDIR/"
  flush_output
  [ -n "$CSV" ] && [ -z "$CSV_OPEN" ] && say "W${TAB}csv never appeared: $CSV"
  [ -n "$STRAYS" ] && say "W${TAB}$STRAYS"
  [ -n "$KILLED" ] && say "W${TAB}stray processes: the engine left $KILLED outside its process group; killed ($KHOW)"
  oom_cause
  # A full device cannot take the X line: an empty file still fits (it needs no data block),
  # and `status` then says `full` instead of passing the job for done.
  say_exit || : >"$JOBDIR/spool-full"
  # `done` holds the X line itself: the proof a reader compares the spool's X line with
  # (end_proven). By rename, so no reader sees half of it; a full device still gets an empty
  # file (it needs no data block), with `spool-full` saying why.
  { say "$XLINE" >"$JOBDIR/done.new" && mv -f "$JOBDIR/done.new" "$JOBDIR/done"; } 2>/dev/null ||
    : >"$JOBDIR/done"
}

# flush_output: the engine has ended, so everything it wrote is in the files now: drain them,
# then the last line of each that had no newline.
flush_output() {
  drain_all
  [ -n "$P_O" ] && say "O$TAB$P_O"
  [ -n "$P_E" ] && say "E$TAB$P_E"
  [ -n "$P_C" ] && say "C$TAB$P_C"
  return 0
}

# oom_cause: CAUSE=oom, with a W line quoting the evidence, for a SIGKILL that nobody here
# sent when the kernel says it killed the engine for memory (OOM killer, Android's
# lowmemorykiller); where its log is readable, that line is the evidence.
oom_cause() {
  if [ "$RC" -eq $((128 + 9)) ] && [ -z "$CAUSE" ] && oom_line "$EPID"; then
    CAUSE=oom
    say "W${TAB}oom: $OOMLINE"
  fi
}

# say_exit: the X line (XLINE, which end_job also writes to `done`): rc, signal (rc-128 for rc > 128, else 0), t_ms, cause=CAUSE if any.
say_exit() {
  sig=0
  [ "$RC" -gt 128 ] && sig=$((RC - 128))
  now_ms
  XLINE="X$TAB$RC$TAB$sig$TAB$((NOW - UP0))"
  [ -n "$CAUSE" ] && XLINE="$XLINE${TAB}cause=$CAUSE"
  [ -n "$ABORT_X" ] && XLINE="$XLINE$ABORT_X"
  say "$XLINE"
}

# ==============================================================================================
# 10b. Session feeder
#    A session job (meta `session=FILE`) runs an engine that reads requests as JSON lines on
#    its stdin (bmoe-cli --session, moe-probe --session): the engine's stdin is a FIFO the
#    supervisor writes, one request at once, each next one once the previous turn's
#    BMOE_DONE (or non-fatal BMOE_ERROR) line was drained plus its idle time; `cancel` at a
#    turn's deadline, `close` and EOF after the last. A T line marks each step. Builtins
#    only: session_step runs in the sampling loop (docs/agent-protocol.md, "Sessions").
# ==============================================================================================

# session_open: SESS_N = the number of requests in the SESSION file (lines
# "IDLE_MS<TAB>DEADLINE_MS<TAB>JSON"), the FIFO JOBDIR/stdin made and held open on fd 6.
# Read-write: the open does not wait for the engine, and the supervisor, a reader too, is
# never killed by SIGPIPE when the engine has gone. One mkfifo fork per session job.
session_open() {
  SESS_N=0 SESS_TURN=0 SESS_PHASE='' SESS_AT=0 SESS_DL='' SESS_STOP='' SESS_NEXT='' SESS_WHY=''
  [ -n "$SESSION" ] || return 0
  while IFS= read -r l || [ -n "$l" ]; do
    [ -n "$l" ] && SESS_N=$((SESS_N + 1))
  done <"$SESSION"
  # `command exec`: a failed open must not end the supervisor (dash exits on one)
  if ! mkfifo "$JOBDIR/stdin" 2>/dev/null || ! command exec 6<>"$JOBDIR/stdin"; then
    say "W${TAB}session: no FIFO for the engine's stdin (mkfifo failed); requests not sent"
    SESSION=''
    return 0
  fi
  SESS_PHASE=idle
  if [ "$SESS_N" -eq 0 ]; then session_close 1; return 0; fi
  session_request 1
  SESS_AT=$SESS_IDLE
}

# session_request K: SESS_IDLE, SESS_DLMS (ms, 0: none) and SESS_REQ (the JSON line) of
# request K (1-based) of the SESSION file, read with builtins.
session_request() {
  SESS_IDLE=0 SESS_DLMS=0 SESS_REQ='' k=0
  while IFS= read -r l || [ -n "$l" ]; do
    [ -n "$l" ] || continue
    k=$((k + 1))
    [ "$k" -eq "$1" ] || continue
    SESS_IDLE=${l%%"$TAB"*} l=${l#*"$TAB"}
    SESS_DLMS=${l%%"$TAB"*} SESS_REQ=${l#*"$TAB"}
    break
  done <"$SESSION"
  case $SESS_IDLE in ''|*[!0-9]*) SESS_IDLE=0 ;; esac
  case $SESS_DLMS in ''|*[!0-9]*) SESS_DLMS=0 ;; esac
}

# session_event TURN EVENT: the T line (TURN, ms since the start, EVENT), and the feeder's
# progress in JOBDIR/session.pos ("TURN EVENT"): what was sent survives any follower.
session_event() {
  now_ms
  say "T$TAB$1$TAB$((NOW - UP0))$TAB$2"
  say "$1 $2" >"$JOBDIR/session.pos"
}

# session_line LINE: a line of the engine's stdout, drained. The turn in flight ends with its
# BMOE_DONE (T done) or a BMOE_ERROR (T error: the session goes on; T fatal: it ends). The tag
# may follow text the engine printed without a newline (a streamed answer), so it is looked
# for anywhere in the line, except in the lines that carry generated text themselves.
session_line() {
  [ "$SESS_PHASE" = run ] || return 0
  case $1 in
    BMOE_PROGRESS*|BMOE_LOAD*|BMOE_BEGIN*|BMOE_READY*) return 0 ;;
    *'BMOE_DONE '*) session_event "$SESS_TURN" 'done' ;;
    *'BMOE_ERROR '*'"fatal":true'*|*'BMOE_ERROR '*'"fatal": true'*)
      session_event "$SESS_TURN" fatal
      session_close 0
      return 0 ;;
    *'BMOE_ERROR '*) session_event "$SESS_TURN" error ;;
    *) return 0 ;;
  esac
  SESS_DL='' SESS_STOP=''
  if [ "$SESS_TURN" -ge "$SESS_N" ]; then session_close 1; return 0; fi
  session_request $((SESS_TURN + 1))
  now_ms
  SESS_PHASE=idle SESS_AT=$((NOW - UP0 + SESS_IDLE))
}

# session_close SAY: end the engine's input: `{"cmd":"close"}` first when SAY is 1 (the last
# turn is done), then EOF. An engine still there 10 s later is stopped (session_step).
session_close() {
  if [ "$1" = 1 ]; then
    say '{"cmd":"close"}' >&6
    session_event "$SESS_TURN" close
  fi
  exec 6>&-
  now_ms
  SESS_PHASE=closed SESS_DL='' SESS_STOP=$((NOW - UP0 + 10000)) SESS_WHY='closed input'
}

# session_step: once per sample step (and before the first): send the next request when its
# idle time is over (T sent), `cancel` the turn in flight at its deadline (T cancel), stop an
# engine that has not ended 10 s after its input was closed or a cancel went unanswered.
# SESS_NEXT = the next of these times (sleep_interval wakes for it).
session_step() {
  now_ms
  t=$((NOW - UP0))
  if [ "$SESS_PHASE" = idle ] && [ "$t" -ge "$SESS_AT" ]; then
    say "$SESS_REQ" >&6
    SESS_TURN=$((SESS_TURN + 1)) SESS_PHASE=run SESS_DL=''
    session_event "$SESS_TURN" sent
    [ "$SESS_DLMS" -gt 0 ] && SESS_DL=$((t + SESS_DLMS))
  fi
  if [ "$SESS_PHASE" = run ] && [ -n "$SESS_DL" ] && [ "$t" -ge "$SESS_DL" ]; then
    say '{"cmd":"cancel"}' >&6
    session_event "$SESS_TURN" cancel
    SESS_DL='' SESS_STOP=$((t + 10000)) SESS_WHY=cancel
  fi
  if [ -n "$SESS_STOP" ] && [ "$t" -ge "$SESS_STOP" ] && [ -z "$TERM_AT" ]; then
    say "W${TAB}session: the engine did not end 10 s after turn $SESS_TURN's $SESS_WHY; stopped (TERM, KILL after 3 s)"
    TERM_AT=$t SESS_STOP=''
    kill -TERM -"$EPID" 2>/dev/null || kill -TERM "$EPID" 2>/dev/null
  fi
  SESS_NEXT=''
  case $SESS_PHASE in idle) SESS_NEXT=$SESS_AT ;; run) SESS_NEXT=$SESS_DL ;; esac
  if [ -n "$SESS_STOP" ] && { [ -z "$SESS_NEXT" ] || [ "$SESS_STOP" -lt "$SESS_NEXT" ]; }; then
    SESS_NEXT=$SESS_STOP
  fi
  return 0
}

# ==============================================================================================
# 11. Process groups and OOM evidence
#    What is left in the engine's group is stopped and named; the kernel log is marked
#    before the engine starts, so that only newer lines count as OOM evidence.
# ==============================================================================================

# group_members: MEMBERS = "PID(comm) ..." of the live (not zombie) processes in group PG,
# from /proc with builtins only. Zombies are left out: they are dead, and a container's init
# may take its time to reap what was reparented to it.
group_members() {
  MEMBERS=''
  for d in /proc/[0-9]*; do
    st=''
    read -r st 2>/dev/null <"$d/stat" || continue
    case $st in *') '*) ;; *) continue ;; esac
    c=${st#*\(}
    c=${c%\)*}
    # Split on purpose, as in `sample`: a state letter and numbers, nothing a glob expands.
    # shellcheck disable=SC2086
    set -- ${st##*) }
    [ "$3" = "$PG" ] && [ "$1" != Z ] && MEMBERS="$MEMBERS ${d#/proc/}($c)"
  done
  MEMBERS=${MEMBERS# }
}

# kill_strays PGID: TERM what is left of the engine's group, KILL it after 3 s, and say so.
kill_strays() {
  kill -0 -"$1" 2>/dev/null || return 0
  PG=$1
  group_members
  [ -n "$MEMBERS" ] || return 0
  left=$MEMBERS how=TERM
  kill -TERM -"$1" 2>/dev/null
  now_ms; k0=$NOW
  while [ -n "$MEMBERS" ]; do
    now_ms
    if [ $((NOW - k0)) -ge 3000 ]; then
      how="TERM, KILL after 3 s: $MEMBERS"
      kill -KILL -"$1" 2>/dev/null
      i=0   # KILL cannot be caught: gone at once, unless stuck in the kernel (D state)
      while [ $i -lt 20 ] && [ -n "$MEMBERS" ]; do sleep 0.05 || sleep 1; i=$((i + 1)); group_members; done
      break
    fi
    sleep 0.1 || sleep 1
    group_members
  done
  STRAYS="stray processes: the engine left $left in its process group $1; killed ($how)"
}

# klog_mark: KLOG_MARK = the kernel log's last line before the engine starts (empty without
# dmesg, or when the log is empty or unreadable), so that oom_line reads only what came after.
# One `tail` fork per job, outside the sampling loop; the log itself is never held in a shell
# variable (a shell pattern over a long log took minutes in mksh).
klog_mark() {
  KLOG_MARK=''
  command -v dmesg >/dev/null 2>&1 || return 0
  KLOG_MARK=$(dmesg 2>/dev/null | tail -n 1)
}

# oom_line PID: OOMLINE = the last kernel log line logged after KLOG_MARK that says PID was
# killed for memory. Older lines are no evidence: pids are reused, and an old OOM kill of
# another process with the engine's pid once made a plain SIGKILL `oom`. The mark is found by
# grep (its last occurrence); a mark no longer in the log, which the kernel's ring buffer
# overwrote, means all of the log came after it. Only the SIGKILL path runs this. -a: a log
# with bytes that are no text must still print lines, not "Binary file matches".
oom_line() {
  OOMLINE=''
  command -v dmesg >/dev/null 2>&1 || return 1
  from=1
  if [ -n "$KLOG_MARK" ]; then
    k=$(dmesg 2>/dev/null | grep -a -n -F -x -e "$KLOG_MARK" | tail -n 1)
    k=${k%%:*}
    case $k in ''|*[!0-9]*) ;; *) from=$((k + 1)) ;; esac
  fi
  OOMLINE=$(dmesg 2>/dev/null | tail -n +"$from" | grep -a -E "[^0-9]$1[^0-9]" |
    grep -a -iE "out of memory|oom|lowmemorykiller|lmk|killed process" | tail -n 1)
  [ -n "$OOMLINE" ]
}

# ==============================================================================================
# 12. Cooldown
#    `cooldown`: wait on the device until a sensor is back down (T lines, one R line).
# ==============================================================================================

# cooldown SENSOR UNTIL_mC MIN_MS MAX_MS INTERVAL_MS: wait on the device until SENSOR reads
# at most UNTIL_mC, no shorter than MIN_MS and no longer than MAX_MS. Prints a T line per
# reading (elapsed ms, the sensor, cpu and battery) and ends with one R line:
# R met|max|nosensor ELAPSED_MS VALUE_mC. Done here, not by the controller, so the wait is
# timed on the device and costs no round trip per reading.
cooldown() {
  sensor=$1 until=$2 min=$3 max=$4 iv=${5:-1000}
  for v in "$until" "$min" "$max" "$iv"; do
    case ${v#-} in ''|*[!0-9]*) die "cooldown: numbers expected, got '$v'" ;; esac
  done
  list_zones
  battery_paths
  power_paths   # the T lines carry power too: `orch calibrate` measures idle power with them
  f=$((iv % 1000))
  case ${#f} in 1) f=00$f ;; 2) f=0$f ;; esac
  slp=$((iv / 1000)).$f
  now_ms; T0=$NOW; miss=0
  while :; do
    read_sensor "$sensor"; val=$VAL
    read_sensor cpu; cpu=$VAL
    read_sensor battery; bat=$VAL
    now_ms; el=$((NOW - T0))
    power_fields
    ch=''
    [ -n "$BSTAT" ] && read -r ch 2>/dev/null <"$BSTAT"
    case $ch in Charging|Full) PWR="$PWR${TAB}batt_charging=1" ;; ?*) PWR="$PWR${TAB}batt_charging=0" ;; esac
    say "T$TAB$el${TAB}value_mC=$val${TAB}cpu_mC=$cpu${TAB}batt_mC=$bat$PWR"
    # a sensor that reads empty three times in a row is not there; one empty read is a file
    # caught mid-rewrite or a zone that briefly failed (EAGAIN on some phones), not an answer
    if [ -z "$val" ]; then miss=$((miss + 1)); else miss=0; fi
    if [ "$miss" -ge 3 ] && [ "$el" -ge "$min" ]; then say "R${TAB}nosensor$TAB$el$TAB"; return 0; fi
    if [ -n "$val" ] && [ "$el" -ge "$min" ] && [ "$val" -le "$until" ]; then
      say "R${TAB}met$TAB$el$TAB$val"; return 0
    fi
    if [ "$el" -ge "$max" ]; then say "R${TAB}max$TAB$el$TAB$val"; return 0; fi
    sleep "$slp" || sleep 1
  done
}

# ==============================================================================================
# 13. Commands
#    attach, kill, reap, facts and start; status and jobs are answered in main.
# ==============================================================================================

# attach SKIP: print the spool from complete line SKIP on, following it until the X line
# that is the supervisor's own end. Every reader of a job's end (the live follow, a re-attach,
# --resume, the lab, quality probes) comes through here, so this is the one place that
# decides: an X line is held back until it is proven (end_proven, and no line after it);
# one that is not is passed on as a W line in its place (the line count stays the same, so
# SKIP still counts spool lines) and the follow goes on to the real end.
attach() {
  skip=$1 n=0 p='' dead='' held='' hn=0
  case $skip in ''|*[!0-9]*) die "attach: SKIP must be a number" ;; esac
  while [ ! -f "$JOBDIR/spool" ]; do
    sup_alive || [ -f "$JOBDIR/spool" ] || exit 3
    sleep 0.2
  done
  exec 3<"$JOBDIR/spool"
  while :; do
    l=''
    if IFS= read -r l <&3; then
      l=$p$l p=''
      n=$((n + 1))
      # a line after a held X line: that one was not the supervisor's (it writes none after)
      [ -n "$held" ] && forged_end
      case $l in "X$TAB"*) held=$l hn=$n; continue ;; esac
      [ "$n" -gt "$skip" ] && say "$l"
    else
      p=$p$l
      if [ -n "$held" ] && [ -z "$p" ] && end_proven "$held"; then
        [ "$hn" -gt "$skip" ] && say "$held"
        exit 0
      fi
      if [ -n "$dead" ]; then [ -n "$held" ] && forged_end; exit 3; fi
      # Seen dead: read once more, the X line may have landed just before it exited.
      if sup_alive; then sleep 0.2; else dead=1; fi
    fi
  done
}

# forged_end: the held X line (line HN) was not the supervisor's end: a W line in its place,
# its fields joined by blanks.
forged_end() {
  if [ "$hn" -gt "$skip" ]; then
    ifs=$IFS
    IFS=$TAB
    set -f
    # shellcheck disable=SC2086
    set -- $held
    set +f
    IFS=' '
    say "W${TAB}a line claiming the end was not the supervisor's: $*"
    IFS=$ifs
  fi
  held=''
}

# kill_job: TERM the engine's process group, KILL whatever is left after 3 s; then every
# process still tagged with the job (tagged), the same way. Prints one "killed<TAB>PID(comm)
# ..." line naming what it stopped (nothing when nothing ran), which the controller quotes.
kill_job() {
  job_state   # a proven end only: a `done` file anyone made must not spare a live engine
  [ "$STATE" = 'done' ] && return 0
  ep=''
  read -r ep 2>/dev/null <"$JOBDIR/engine.pid"
  case $ep in ''|*[!0-9]*) ep=''; [ -f "$JOBDIR/pid" ] || die "kill: no engine.pid in $JOBDIR" ;; esac
  gone=''
  if [ -n "$ep" ]; then
    PG=$ep
    group_members
    gone=$MEMBERS
    if kill -TERM -"$ep" 2>/dev/null || kill -TERM "$ep" 2>/dev/null; then
      i=0
      while [ $i -lt 15 ] && kill -0 -"$ep" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
      kill -KILL -"$ep" 2>/dev/null
    fi
  fi
  kill_tagged "$JOBDIR/"
  for m in $KILLED; do
    case " $gone " in *" $m "*) ;; *) gone="${gone:+$gone }$m" ;; esac
  done
  [ -n "$gone" ] && say "killed$TAB$gone"
  return 0
}

# reap RUNSDIR: stop the stray processes `jobs` lists (tagged with a job of RUNSDIR that
# is not live, or whose directory is gone): TERM, KILL after 3 s; one "killed<TAB>PID(comm)
# ..." line when there were any. Live jobs, and the processes they own, are left alone.
reap() {
  live_jobs "$1"
  pids='' what='' ifs=$IFS
  IFS='
'
  for l in $LIVE; do
    case $l in "stray$TAB"*) p=${l##*"$TAB"}; n=${l#*"$TAB"}; n=${n%"$TAB"*}
      pids="$pids $p" what="${what:+$what }$p($n)" ;; esac
  done
  IFS=$ifs
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null
  i=0 n=$pids
  while [ $i -lt 30 ] && [ -n "$n" ]; do
    sleep 0.1 || sleep 1
    n=''
    for p in $pids; do alive "$p" && n="$n $p"; done
    i=$((i + 1))
  done
  # shellcheck disable=SC2086
  [ -n "$n" ] && kill -KILL $n 2>/dev/null
  say "killed$TAB$what"
}

# facts: the F lines (one-shot: the forks of uname, getprop, dumpsys are fine here).
facts() {
  F() { [ -n "$2" ] && say "F$TAB$1$TAB$2"; }
  F uname "$(uname -a)"
  F kernel "$(uname -r)"
  F arch "$(uname -m)"
  F hostname "$(uname -n)"
  GETPROP=$(command -v getprop)
  os=''
  if [ -r /etc/os-release ]; then
    while IFS= read -r l; do
      case $l in PRETTY_NAME=*) os=${l#*=}; os=${os#\"}; os=${os%\"} ;; esac
    done </etc/os-release
  fi
  [ -z "$os" ] && [ -n "$GETPROP" ] && os="Android $(getprop ro.build.version.release)"
  F os "$os"
  mn='' hw='' pr='' np=0
  while IFS= read -r l; do
    v=${l#*:}
    while :; do   # strip leading blanks
      case $v in " "*|"$TAB"*) v=${v#?} ;; *) break ;; esac
    done
    case $l in
      'model name'*) [ -z "$mn" ] && mn=$v ;;
      Hardware*) hw=$v ;;
      Processor*) pr=$v ;;
      processor*) np=$((np + 1)) ;;
    esac
  done 2>/dev/null <"$CPUINFO"
  F cpu_model "${mn:-${hw:-$pr}}"
  nc=0
  for d in "$CPU_DIR"/cpu[0-9]*; do [ -d "$d" ] && nc=$((nc + 1)); done
  [ "$nc" -gt 0 ] || nc=$np
  [ "$nc" -gt 0 ] || nc=$(nproc 2>/dev/null)
  F cores "$nc"
  while read -r k v rest; do
    case $k in MemTotal:) F mem_total_kb "$v"; break ;; esac
  done 2>/dev/null <"$MEMINFO"
  if [ -n "$KSH_VERSION" ]; then shn=${KSH_VERSION#'@(#)'}
  elif [ -n "$BASH_VERSION" ]; then shn="bash $BASH_VERSION"
  else shn=$(readlink "/proc/$$/exe" 2>/dev/null); shn=${shn##*/}
  fi
  F shell "$shn"
  list_zones
  battery_paths
  for z in $ZONES; do
    n=${z%:*} ty=''
    read -r ty 2>/dev/null <"$THERMAL_DIR/thermal_zone$n/type"
    F "thermal.zone$n.type" "$ty"
  done
  fmax='' govs=''
  for d in "$CPU_DIR"/cpu[0-9]*; do
    n=${d##*/cpu}
    case $n in ''|*[!0-9]*) continue ;; esac
    v=''
    if read -r v 2>/dev/null <"$d/cpufreq/cpuinfo_max_freq"; then
      F "cpu.$n.max_khz" "$v"
      case $v in ''|*[!0-9]*) ;; *) if [ -z "$fmax" ] || [ "$v" -gt "$fmax" ]; then fmax=$v; fi ;; esac
    fi
    v=''
    read -r v 2>/dev/null <"$d/cpufreq/cpuinfo_min_freq" && F "cpu.$n.min_khz" "$v"
    v=''
    read -r v 2>/dev/null <"$d/cpufreq/scaling_max_freq" && F "cpu.$n.scaling_max_khz" "$v"
    v=''
    if read -r v 2>/dev/null <"$d/cpufreq/scaling_governor"; then
      F "cpu.$n.governor" "$v"
      case " $govs " in *" $v "*) ;; *) govs="${govs:+$govs }$v" ;; esac
    fi
  done
  F cpu.max_khz "$fmax"
  F cpu.governor "$govs"
  if [ -n "$GETPROP" ]; then
    for p in ro.product.model ro.product.manufacturer ro.build.fingerprint \
        ro.build.version.release ro.build.version.sdk ro.soc.model ro.board.platform \
        ro.product.cpu.abi; do
      F "prop.$p" "$(getprop "$p" 2>/dev/null)"
    done
  fi
  F battery.temp_path "$BATT"
  bt='' bs='' bl=''
  [ -n "$BATT" ] && read -r bt 2>/dev/null <"$BATT"
  [ -n "$BSTAT" ] && read -r bs 2>/dev/null <"$BSTAT"
  [ -r "$BATTERY_DIR/capacity" ] && read -r bl 2>/dev/null <"$BATTERY_DIR/capacity"
  if { [ -z "$bt" ] || [ -z "$bs" ] || [ -z "$bl" ]; } && command -v dumpsys >/dev/null 2>&1; then
    battery_dumpsys
    [ -n "$bt" ] || bt=$DS_T
    [ -n "$bs" ] || bs=$DS_S
    [ -n "$bl" ] || bl=$DS_L
  fi
  [ -n "$bt" ] && F battery.temp_dC "$bt"
  [ -n "$bs" ] && F battery.status "$bs"
  # the charge in percent: the lab's health check holds a phone whose battery is low
  [ -n "$bl" ] && F battery.level_pct "$bl"
  power_facts
  return 0
}

# start: launch the supervisor detached (own session, stdin /dev/null, output to agent.log)
# under the shell running this script, and return at once.
start() {
  [ -f "$JOBDIR/args/000" ] || die "start: $JOBDIR/args/000 missing"
  if [ -e "$JOBDIR/pid" ] || [ -e "$JOBDIR/spool" ]; then die "start: $JOBDIR already started"; fi
  command -v setsid >/dev/null || die "start: no setsid on PATH"
  # One engine per device: another live job (of any session) is reported, exit 4, unless
  # the controller says `force`.
  if [ "$1" != force ]; then
    me=$JOBDIR
    live_jobs "${JOBDIR%/*}" "$me"
    JOBDIR=$me
    if [ -n "$LIVE" ]; then say "busy"; say "$LIVE"; exit 4; fi
  fi
  shb=${ORCH_AGENT_SHELL:-$(readlink "/proc/$$/exe" 2>/dev/null)}
  [ -x "$shb" ] || shb='sh'
  setsid "$shb" "$0" _supervise "$JOBDIR" </dev/null >>"$JOBDIR/agent.log" 2>&1 &
  spid=$!
  # Written here, before returning, so `status`/`attach` work at once; by rename, since the
  # supervisor may be reading it.
  say "$spid" >"$JOBDIR/pid.start" && mv -f "$JOBDIR/pid.start" "$JOBDIR/pid"
  say "started $spid"
}

# jobdir DIR: JOBDIR = DIR made absolute (the supervisor and the engine change directory).
jobdir() {
  [ -n "$1" ] || die "$cmd: JOBDIR missing"
  JOBDIR=$(cd "$1" 2>/dev/null && pwd) || die "$cmd: no such directory: $1"
}

# ==============================================================================================
# 14. The command line
#    main: one case per command (docs/agent-protocol.md, "Invocation"), then the
#    source-only mode.
# ==============================================================================================

# main COMMAND ARGS...: the command line (docs/agent-protocol.md, "Invocation").
main() {
  cmd=$1
  case $cmd in
    version) say "$AGENT_VERSION" ;;
    facts) facts ;;
    start) jobdir "$2"; start "${3:-}" ;;
    _supervise) jobdir "$2"; supervise ;;
    attach) jobdir "$2"; attach "${3:-0}" ;;
    status)
      if [ -z "$2" ] || [ ! -d "$2" ]; then say absent; exit 0; fi
      jobdir "$2"
      job_state
      say "$STATE" ;;
    jobs)
      # jobs RUNSDIR: the live jobs under RUNSDIR, then "end" (an empty answer is no answer).
      [ -d "${2:-}" ] && { live_jobs "${2%/}"; [ -n "$LIVE" ] && say "$LIVE"; }
      say end ;;
    kill) jobdir "$2"; kill_job ;;
    reap) [ -d "${2:-}" ] && reap "${2%/}"; say end ;;
    cooldown) shift; cooldown "$@" ;;
    *) die "usage: orch-agent.sh version | facts | start JOBDIR [force] | attach JOBDIR SKIP |" \
        "status JOBDIR | jobs RUNSDIR | kill JOBDIR | reap RUNSDIR | cooldown SENSOR UNTIL_mC MIN_MS MAX_MS [INTERVAL_MS]" ;;
  esac
}

# Source-only mode (`ORCH_AGENT_LIB=1 . ./orch-agent.sh`): the functions are defined and no
# command runs. `.` takes no arguments portably, hence a variable; it is unset so that nothing
# this shell starts later inherits it.
if [ "${ORCH_AGENT_LIB:-}" = 1 ]; then
  unset ORCH_AGENT_LIB
else
  main "$@"
fi
