"""What a device with a POSIX shell (sh, dash, bash, mksh; toybox or coreutils) offers every
transport: command lines quoted for sh, the inventory's env as an `env K=V` prefix, and the
sha256 of a device file with its cache next to it. Local, ssh and adb devices are all POSIX;
a kind without a POSIX shell derives from Transport and implements remote_size and
remote_sha256 itself."""
from __future__ import annotations

import shlex

from orchestrator.errors import ConfigError
from orchestrator.transports.base import CommandResult, Transport, TransportError

# sha256 of $1, cached in `$1.orch-sha256` ("size mtime sha256") while `stat` still matches,
# so an unchanged 20 GB model is not re-hashed every run. A file modified less than 2 s ago is
# hashed but not cached (same-second rewrites keep %Y). POSIX sh + toybox only.
SHA256_CACHED = r'''f=$1 c=$1.orch-sha256
[ -f "$f" ] || exit 5
st=$(stat -c '%s %Y' -- "$f" 2>/dev/null) || exit 3
if [ -f "$c" ] && read -r s m h rest < "$c" && [ "$s $m" = "$st" ] && [ -n "$h" ]; then
  echo "$h cached"; exit 0; fi
h=$(sha256sum < "$f") || exit 4
h=${h%% *}
if [ "$(stat -c '%s %Y' -- "$f")" = "$st" ] && [ $(( $(date +%s) - ${st#* } )) -ge 2 ]; then
  { printf '%s %s\n' "$st" "$h" > "$c.$$" && mv -f -- "$c.$$" "$c"; } 2>/dev/null ||
    rm -f -- "$c.$$"
fi
echo "$h computed"'''
# After a push we know the sha256 ($2) of $1: cache it against the new size and mtime.
REMEMBER_SHA256 = 'st=$(stat -c "%s %Y" -- "$1") && printf "%s %s\\n" "$st" "$2" > "$1.orch-sha256"'
SIZE = 'stat -L -c %s -- "$1"'
# Before a hash: `[ -f ]` (links followed; mksh/toybox, dash, bash) and the size, or what the
# path is instead ("not-regular KIND"; nothing and rc 3 when it names nothing).
REGULAR_SIZE = r'''if [ -f "$1" ]; then stat -L -c %s -- "$1"
elif [ -e "$1" ]; then echo "not-regular $(stat -L -c %F -- "$1" 2>/dev/null)"
else exit 3; fi'''
HASH_RATE = 50 * 1048576      # bytes/s a device's sha256sum is at least given
HASH_TIMEOUT_MAX = 3600.0


def hash_timeout(size: int) -> float:
    """How long a sha256 of `size` bytes may take on the device: 60 s plus 50 MiB/s, at most
    an hour (a FIFO swapped in after the check then costs a minute, not an hour)."""
    return min(HASH_TIMEOUT_MAX, 60.0 + size / HASH_RATE)


def quote_argv(argv: list[str]) -> str:
    """argv as one sh command line; argv[0] always quoted, so never a keyword, alias or
    assignment."""
    if not argv:
        raise ValueError("empty argv")
    return " ".join(["'" + argv[0].replace("'", "'\"'\"'") + "'",
                     *(shlex.quote(a) for a in argv[1:])])


class PosixTransport(Transport):
    """A Transport whose device runs commands with a POSIX shell; `env` is the inventory's
    environment for every command."""

    def __init__(self, name: str, workdir: str, shell: str = "sh",
                 env: dict[str, str] | None = None) -> None:
        super().__init__(name, workdir, shell)
        self.env = dict(env or {})

    def command_line(self, argv: list[str], cwd: str | None = None) -> str:
        """`cd CWD && env K=V ... argv` for `sh -c`, every word quoted."""
        line = quote_argv(argv)
        if self.env:  # the inventory's env (e.g. ORCH_THERMAL_DIR), for every command
            line = " ".join(["env", *(shlex.quote(f"{k}={v}") for k, v in self.env.items()),
                             line])
        return (f"cd {shlex.quote(cwd)} && " if cwd else "") + line

    def sh(self, script: str, *args: str, timeout: float = 60.0) -> CommandResult:
        """Run a sh script with positional arguments $1.. (never interpolated into it)."""
        return self.run([self.shell, "-c", script, "sh", *args], timeout)

    def sh_checked(self, script: str, *args: str, timeout: float = 60.0) -> CommandResult:
        """sh(), raising TransportError when the script fails."""
        result = self.sh(script, *args, timeout=timeout)
        if result.rc != 0:
            raise TransportError(f"{self.name}: `{script[:30]}...` {args[0] if args else ''} "
                                 f"failed (rc {result.rc}): "
                                 f"{result.stderr.decode(errors='replace')[:300]}")
        return result

    def remote_size(self, remote: str) -> int | None:
        result = self.sh(SIZE, self._path(remote), timeout=30)
        text = result.stdout.decode(errors="replace").strip()
        return int(text) if result.rc == 0 and text.isdigit() else None

    def remote_sha256(self, remote: str) -> str | None:
        """sha256 of a device file (None when it does not exist); `<file>.orch-sha256`
        spares re-hashing an unchanged one. A path that is no regular file (a FIFO,
        /dev/zero, a directory) is a ConfigError, and no hash starts."""
        path = self._path(remote)
        checked = self.sh(REGULAR_SIZE, path, timeout=30)
        answer = checked.stdout.decode(errors="replace").strip()
        if checked.rc == 0 and answer.startswith("not-regular"):
            kind = answer.removeprefix("not-regular").strip() or "not a regular file"
            raise ConfigError(f"{self.name}: {remote} is not a regular file ({kind}): "
                              f"not hashed")
        if checked.rc != 0 or not answer.isdigit():
            return None
        result = self.sh(SHA256_CACHED, path, timeout=hash_timeout(int(answer)))
        fields = result.stdout.decode(errors="replace").split()
        if result.rc != 0 or len(fields) < 2:
            return None
        self.last_sha256_source = fields[1]   # "cached" or "computed"
        return fields[0]

    def remember_sha256(self, remote: str, digest: str) -> None:
        self.sh_checked(REMEMBER_SHA256, self._path(remote), digest)
