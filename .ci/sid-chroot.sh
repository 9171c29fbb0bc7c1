# sid-chroot.sh - a Debian sid chroot with its CPythons (3.14, 3.15), for
# .ci/install-matrix.sh's `sid` route; sourced, not run. As root:
#
#   sid_enter ROOT DIR...   make ROOT afresh with mmdebstrap from the Debian
#                           mirror this machine's apt uses, copy the resolver
#                           and CA configuration in, mount /proc and /dev, and
#                           bind-mount each DIR at its own path inside
#   sid_leave               unmount all of it (the caller traps EXIT with it)
#
# The mirror is read from apt's sources at run time; sid's Release file may
# be older than its Valid-Until on a snapshot mirror, hence the apt option.

SID_ROOT=""
SID_MOUNTS=()

debian_mirror() {  # the URI of the Debian archive this machine's apt uses
  local codename
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  python3 - "$codename" <<'EOF'
import glob, re, sys

codename = sys.argv[1]


def sources():  # (types, uris, suites) of each entry, deb822 files then one-line ones
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for block in re.split(r"\n\s*\n", open(path).read()):
            f = dict(re.findall(r"^([A-Za-z][\w-]*):[ \t]*(.*)$", block, re.M))
            if f.get("Enabled", "yes").lower() != "no":
                yield f.get("Types", "").split(), f.get("URIs", "").split(), f.get("Suites", "").split()
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = re.sub(r"\[[^]]*\]", " ", line.split("#")[0]).split()
            if len(words) >= 3:
                yield words[:1], words[1:2], words[2:3]


entries = [(u, s) for t, u, s in sources() if "deb" in t and u]
# The release's own archive (not -security, -updates or a third party's).
for uris, suites in entries:
    if codename in suites:
        sys.exit(print(uris[0]))
for uris, suites in entries:
    if "debian" in uris[0] and not any("security" in s for s in suites):
        sys.exit(print(uris[0]))
sys.exit("no Debian archive among apt's sources (/etc/apt/sources.list*)")
EOF
}

sid_mounted() {  # the mount points under $SID_ROOT, if any
  [ -n "$SID_ROOT" ] && awk -v r="$SID_ROOT/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo
}

sid_leave() {
  local i
  for ((i = ${#SID_MOUNTS[@]} - 1; i >= 0; i--)); do
    umount -R "${SID_MOUNTS[i]}" 2>/dev/null || umount -R -l "${SID_MOUNTS[i]}" 2>/dev/null
  done
  SID_MOUNTS=()
  # Left by a run that was killed before its trap ran: deepest first.
  for i in $(sid_mounted | sort -r); do umount -R -l "$i" 2>/dev/null; done
  if [ -n "$(sid_mounted)" ]; then
    echo "sid-chroot: still mounted under $SID_ROOT:" $(sid_mounted) >&2
    return 1
  fi
}

sid_mount() {  # mount ARGS... TARGET: remembered for sid_leave
  mount "$@" && SID_MOUNTS+=("${!#}")
}

sid_enter() {  # ROOT DIR...
  local root=$1 mirror dir cert=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  shift
  [ "$(id -u)" = 0 ] || { echo "sid-chroot: needs root (mmdebstrap, chroot, mount)" >&2; return 1; }
  command -v mmdebstrap >/dev/null ||
    { echo "sid-chroot: no mmdebstrap (Debian: apt-get install mmdebstrap)" >&2; return 1; }
  for dir in "$@"; do  # a bound folder that held the root would hold it twice
    case "$root/" in "$dir"/*) echo "sid-chroot: $root is inside $dir" >&2; return 1 ;; esac
  done
  mirror=$(debian_mirror) || return 1
  SID_ROOT=$root
  # Never remove a root with something mounted in it (a bound clone).
  sid_leave || return 1
  rm -rf --one-file-system "$root"
  echo "sid-chroot: mmdebstrap sid from $mirror"
  mmdebstrap --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
    --include=python3.14-venv,python3.15-venv,ca-certificates \
    sid "$root" "deb $mirror sid main" >"$root.log" 2>&1 || { tail -n 20 "$root.log"; return 1; }
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  [ -f "$cert" ] && cp "$cert" "$root/etc/ssl/certs/ca-certificates.crt"
  sid_mount -t proc proc "$root/proc" &&
    sid_mount --rbind /dev "$root/dev" &&
    mount --make-rslave "$root/dev" || return 1
  for dir in "$@"; do
    mkdir -p "$root$dir" && sid_mount --bind "$dir" "$root$dir" || return 1
  done
}
