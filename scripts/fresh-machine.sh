#!/usr/bin/env bash
# The README's Quick start on a fresh machine: a Debian 12 (bookworm) root made with mmdebstrap (variant
# minbase: the fewest packages a Debian has), with exactly the Quick start's `apt-get install python3
# python3-venv gcc g++` (and git), a clone of this checkout in root's home (/root, mode 0700, as on Debian), and
# both Quick start commands run there as root in a chroot: ./scripts/example.sh must exit 0 and print the
# README's sample output and its status line, ./scripts/test.sh must exit 0. The example also runs as an
# unprivileged user from a clone in that user's home. Exit 0 when every promise held; else 1 and what differed;
# 3 when no fresh machine could be made (mmdebstrap not installable, no Debian mirror answering).
#
#   scripts/fresh-machine.sh            needs root, mmdebstrap (installed with apt-get when missing), network
#                                       access to a Debian mirror and to the package index pip uses
#
# The clone is of HEAD plus the working tree's uncommitted changes (tracked and untracked files git does not
# ignore), so a check of an edit needs no commit (FRESH_WORKTREE=0: HEAD alone). The root lies in a private
# mount namespace: its /proc, /sys, /dev and bind mounts vanish with the script. It is made a mount point of
# its own, as / is on a machine (FRESH_ROOT_IS_MOUNT=0 leaves it a plain directory, where `unshare --mount`
# cannot run: the tests that need it must then skip, saying so).
#
# To fit CI's time it reuses, read-only, what is already built or downloaded outside (and binds shared/, as CI
# has it beside its clone):
#   - the Triton-core oracle (tests/triton_core.py), $CUSTOMOPS_TRITON_CORE or ~/.cache/customops-oracles/triton
#     when built: bound in and named by CUSTOMOPS_TRITON_CORE, with the run-time libraries its build would have
#     installed (libprotobuf32, ...: what ldd finds missing, by the host's dpkg -S); without it those tests skip;
#   - pip's configuration (/etc/pip.conf, PIP_* variables) and the local directories it names (find-links,
#     file:// indexes), and a pip cache kept in $FRESH_PIP_CACHE (default ~/.cache/customops-fresh-pip).
# Variables: FRESH_WORK (a directory for the root, kept, and reused when it holds one; default a new one under
# /var/tmp, removed at the end unless FRESH_KEEP=1 or something failed), FRESH_VARIANT (minbase),
# FRESH_MIRROR (http://deb.debian.org/debian), FRESH_USER_EXAMPLE=0 (skips the unprivileged run),
# FRESH_TEST_ARGS (extra pytest arguments for test.sh, e.g. "-x").
set -euo pipefail
# The whole script is one function, read before it runs: an edit of this file meanwhile cannot change what runs.
main() {
  cd "$(dirname "$0")/.."
  src=$PWD
  say() { echo "fresh-machine: $*" >&2; }
  [ "$(id -u)" = 0 ] || { say "needs root (mmdebstrap, chroot, mounts)"; exit 2; }
  if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap) >/dev/null \
      || { say "could not install mmdebstrap"; exit 3; }
  fi

  mirror=${FRESH_MIRROR:-http://deb.debian.org/debian}
  security=${FRESH_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
  keep=${FRESH_KEEP:-0}
  work=${FRESH_WORK:-}
  if [ -z "$work" ]; then work=$(mktemp -d /var/tmp/customops-fresh.XXXXXX); else keep=1; mkdir -p "$work"; fi
  work=$(cd "$work" && pwd)
  root=$work/root
  cleanup() {
    if [ "$keep" = 1 ]; then say "kept $root"; else rm -rf --one-file-system "$work"; fi
  }
  trap cleanup EXIT
  started=$SECONDS
  elapsed() { echo "$(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s"; }

  # 1. the machine: minbase bookworm (with its updates and security suites, as an installed Debian has), then
  #    exactly the Quick start's packages, installed the way the README says (apt-get install: Recommends too)
  if [ ! -e "$root/.quickstart-installed" ]; then
    rm -rf --one-file-system "$root"
    say "mmdebstrap --variant=${FRESH_VARIANT:-minbase} bookworm (log: $work/mmdebstrap.log)"
    mmdebstrap --variant="${FRESH_VARIANT:-minbase}" --mode=root \
      --customize-hook='chroot "$1" apt-get install -y python3 python3-venv gcc g++ git' \
      bookworm "$root" "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
      "deb $security bookworm-security main" >"$work/mmdebstrap.log" 2>&1 \
      || { tail -30 "$work/mmdebstrap.log" >&2; say "mmdebstrap failed (no Debian mirror?)"; exit 3; }
    touch "$root/.quickstart-installed"
    say "root made ($(elapsed)): $(chroot "$root" python3 --version), $(chroot "$root" gcc --version | head -1)"
  fi
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"

  # 2. the checkout: a clone of HEAD, with the working tree's changes on top, in /root (root) and in
  #    /home/tester (an unprivileged user)
  clone() {  # clone DEST
    rm -rf --one-file-system "$1"
    git clone -q "$src" "$1"
    [ "${FRESH_WORKTREE:-1}" = 1 ] || return 0
    (cd "$src" && git ls-files -z --cached --others --exclude-standard) | (cd "$src" && xargs -0 -r \
      sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh) \
      | tar -C "$src" --null -T - -cf - | tar -C "$1" -xf -
    (cd "$src" && git ls-files -z --deleted) | (cd "$1" && xargs -0 -r rm -f --)
  }
  clone "$root/root/customops"
  if [ "${FRESH_USER_EXAMPLE:-1}" = 1 ]; then
    chroot "$root" sh -c 'id tester >/dev/null 2>&1 || useradd -m -s /bin/bash tester'
    clone "$root/home/tester/customops"
    chroot "$root" chown -R tester:tester /home/tester/customops
  fi

  # 3. what the root reuses from outside (read-only): the Triton-core oracle, pip's set-up and a pip cache
  binds=()
  envs=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb
        CI="${CI:-}" CUSTOMOPS_FRESH_INSIDE=1)  # the suite inside does not make a fresh machine of its own
  core=${CUSTOMOPS_TRITON_CORE:-$HOME/.cache/customops-oracles/triton}
  if [ -x "$core/bin/mini_tritonserver" ] && [ -f "$core/lib/libtritonserver.so" ]; then
    mkdir -p "$root/opt/customops-triton-core"
    binds+=("$core:/opt/customops-triton-core")
    envs+=(CUSTOMOPS_TRITON_CORE=/opt/customops-triton-core)
    # its run-time libraries (build.sh installs their -dev packages when it builds the core on a machine)
    pkgs=$(for f in "$core"/bin/mini_tritonserver "$core"/lib/*.so "$core"/backends/*.so; do
             LD_LIBRARY_PATH="$core/lib" ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u \
           | while read -r lib; do
               [ -e "$root$(readlink -f "$lib")" ] || [ -e "$root$lib" ] \
                 || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
             done | cut -d: -f1 | sort -u | tr '\n' ' ')
    if [ -n "$pkgs" ]; then
      say "the Triton-core oracle at $core needs, in the root: $pkgs"
      chroot "$root" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs" \
        >"$work/oracle-apt.log" 2>&1 \
        || { tail "$work/oracle-apt.log" >&2; say "could not install $pkgs"; exit 1; }
    fi
  else
    say "no built Triton-core oracle at $core: the tests that need it skip in the root"
  fi
  # shared/ beside the checkout (the oracles' sources and headers, the SARIF schema), as CI lays it beside its
  # clone: beside the clone in the root, and at /work/shared where the tests look by default
  if [ -d "$src/../shared" ]; then
    shared=$(cd "$src/../shared" && pwd)
    for at in /root/shared /work/shared; do mkdir -p "$root$at"; binds+=("$shared:$at"); done
  fi
  if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
  for var in $(compgen -e | grep '^PIP_' || true); do envs+=("$var=${!var}"); done
  for dir in $(cat /etc/pip.conf 2>/dev/null
               echo "${PIP_FIND_LINKS:-} ${PIP_EXTRA_INDEX_URL:-} ${PIP_INDEX_URL:-}"); do
    dir=${dir#file://}
    case $dir in /*) ;; *) continue ;; esac
    while [ ! -d "$dir" ] && [ "$dir" != / ]; do dir=$(dirname "$dir"); done
    # a PEP 503 index's pages (…/simple) link to files beside it (../../files/…): bind what holds both
    case $dir in */simple|*/simple/) dir=$(dirname "$dir") ;; esac
    case " ${binds[*]} " in *" $dir:$dir "*) continue ;; esac
    if [ "$dir" = / ] || [ -z "$(ls -A "$dir")" ]; then continue; fi
    mkdir -p "$root$dir"
    binds+=("$dir:$dir")
  done
  # the CA bundle pip is told to trust (PIP_CERT, cert = in pip.conf: a proxy's CA), copied in apart from the root's
  cert=${PIP_CERT:-$(sed -n 's/^ *cert *= *//p' /etc/pip.conf 2>/dev/null | head -1)}
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    cp -L "$cert" "$root/etc/customops-fresh-pip-cert.pem"
    sed -i '/^ *cert *=/d' "$root/etc/pip.conf" 2>/dev/null || true
    kept=(); for e in "${envs[@]}"; do [[ $e == PIP_CERT=* ]] || kept+=("$e"); done
    envs=("${kept[@]}" PIP_CERT=/etc/customops-fresh-pip-cert.pem)
  fi
  pipcache=${FRESH_PIP_CACHE:-$HOME/.cache/customops-fresh-pip}
  mkdir -p "$pipcache" "$root/var/cache/customops-pip"
  envs+=(PIP_CACHE_DIR=/var/cache/customops-pip)

  # 4. the Quick start, inside the root, in a private mount namespace
  export FRESH_ROOT="$root" FRESH_ROOT_IS_MOUNT="${FRESH_ROOT_IS_MOUNT:-1}" FRESH_PIPCACHE="$pipcache"
  inside() {  # inside LOG COMMAND...: run COMMAND in the chroot (its own mount namespace); stdout to LOG
    local log=$1; shift
    unshare --mount --fork bash -ec '
      root=$FRESH_ROOT
      mount --make-rprivate /
      [ "$FRESH_ROOT_IS_MOUNT" = 1 ] && mount --bind "$root" "$root"
      mount -t proc proc "$root/proc"
      mount -t sysfs sysfs "$root/sys"
      mount --rbind /dev "$root/dev"
      mount --bind "$FRESH_PIPCACHE" "$root/var/cache/customops-pip"
      for b in ${FRESH_BINDS:-}; do
        mount --bind "${b%%:*}" "$root${b#*:}" && mount -o remount,bind,ro "$root${b#*:}"
      done
      exec chroot "$root" "$@"' inside "$@" >"$log"
  }
  export FRESH_BINDS="${binds[*]}"
  failed=()

  say "example.sh as root ($(elapsed))"
  status=0
  inside "$work/example-root.out" env "${envs[@]}" bash -c 'cd /root/customops && ./scripts/example.sh' \
    2>"$work/example-root.err" || status=$?
  expect_example() {  # expect_example NAME STATUS OUT ERR CHECKOUT
    local name=$1 status=$2 out=$3 err=$4
    if [ "$status" != 0 ]; then
      failed+=("$name exited $status")
      tail -40 "$err" >&2
      return
    fi
    # the README's sample (its first ```text block) with the fixture tree's hash as the README writes it
    awk '/^```text$/ {on=1; next} on && /^```$/ {exit} on' "$src/README.md" >"$work/readme-sample"
    { cat "$work/readme-sample"
      echo
      echo "customops check exited with status 1 (1: findings at or above --fail-on, as this example intends)"
    } >"$work/readme-expected"
    # and the checkout's own path left out, as the README does (it prints absolute paths)
    sed -E -e "s#$5/##g" -e 's#\.fixture-cache/tree-[0-9a-f]+/#.fixture-cache/tree-…/#g' "$out" >"$out.shown"
    if ! diff -u "$work/readme-expected" "$out.shown" >"$out.diff"; then
      failed+=("$name printed other than the README shows (diff: $out.diff)")
      head -60 "$out.diff" >&2
    fi
  }
  expect_example "example.sh as root" "$status" "$work/example-root.out" "$work/example-root.err" /root/customops

  if [ "${FRESH_USER_EXAMPLE:-1}" = 1 ]; then
    say "example.sh as the unprivileged user tester ($(elapsed))"
    status=0
    inside "$work/example-user.out" env "${envs[@]/#HOME=\/root/HOME=/home/tester}" \
      runuser -u tester -- bash -c 'cd ~/customops && ./scripts/example.sh' 2>"$work/example-user.err" || status=$?
    expect_example "example.sh as tester" "$status" "$work/example-user.out" "$work/example-user.err" \
      /home/tester/customops
  fi

  say "test.sh as root ($(elapsed); log: $work/test.log)"
  status=0
  # shellcheck disable=SC2086
  inside "$work/test.log" env "${envs[@]}" bash -c "cd /root/customops && ./scripts/test.sh ${FRESH_TEST_ARGS:-} 2>&1" \
    || status=$?
  tail -25 "$work/test.log" >&2
  [ "$status" = 0 ] || failed+=("test.sh exited $status (log: $work/test.log)")

  say "done in $(elapsed)"
  if [ ${#failed[@]} -gt 0 ]; then
    keep=1
    for f in "${failed[@]}"; do say "FAILED: $f"; done
    exit 1
  fi
  say "the Quick start's promises held: example.sh ($([ "${FRESH_USER_EXAMPLE:-1}" = 1 ] && echo "root, tester" \
    || echo root)) and test.sh"
}
main "$@"; exit $?
