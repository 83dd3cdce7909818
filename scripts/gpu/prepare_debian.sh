#!/usr/bin/env bash
# Issue 20 part 3: more real long-document data for the GPU studies, from Debian packages, prepared on the CPU
# machine (it has the Debian mirror; the GPU machine has no network) and carried compressed in .gpu/.
#
#   bash scripts/gpu/prepare_debian.sh [OUT_ARCHIVE]      # default .gpu/debian.tar.xz
#
# Three source and documentation trees, one document per file, their directories kept (repository structure
# for SPLICE's repo retriever and for --domain-field):
#   code/glibc/     glibc-source: the GNU C library's C, assembly, headers, Python/awk helpers, Makefiles
#                   and the Texinfo manual (LGPL-2.1+, GPL-2+ parts)
#   code/xorg-server/  xorg-server-source: the X.Org server's C, headers, meson/automake files, man pages (MIT/X11)
#   docs/python/    python3.11-doc: the reStructuredText sources of the Python documentation (PSF licence)
# The archive is deterministic for the same package versions (sorted names, fixed owner and times); its
# SOURCE.txt names each package, version, .deb SHA-256, licence, file count and bytes. Needs apt-get, dpkg-deb,
# tar and xz; about 1 minute.
set -euo pipefail
out=${1:-.gpu/debian.tar.xz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")" "$work/debs" "$work/root/debian/code" "$work/root/debian/docs"
(cd "$work/debs" && apt-get download glibc-source xorg-server-source python3.11-doc >/dev/null 2>&1) \
  || { echo "error: apt-get download failed (no Debian mirror reachable); run this on a machine with one" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/x"; done

# Unpack a source tarball and copy the files matching the find expression into DEST (relative paths kept).
pick() {  # pick TARBALL DEST find-expression...
  local tarball=$1 dest=$2; shift 2
  local tmp; tmp=$(mktemp -d -p "$work")
  tar -xJf "$tarball" -C "$tmp"
  local top; top=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -1)
  (cd "$top" && find . -type f \( "$@" \) -print0 | sort -z | xargs -0 cp --parents -t "$dest")
  rm -rf "$tmp"
}
mkdir -p "$work/root/debian/code/glibc" "$work/root/debian/code/xorg-server" "$work/root/debian/docs/python"
pick "$work"/x/usr/src/glibc/glibc-*.tar.xz "$work/root/debian/code/glibc" \
  -name '*.c' -o -name '*.h' -o -name '*.S' -o -name '*.texi' -o -name '*.py' -o -name '*.awk' -o -name Makefile
pick "$work"/x/usr/src/xorg-server.tar.xz "$work/root/debian/code/xorg-server" \
  -name '*.c' -o -name '*.h' -o -name '*.am' -o -name meson.build -o -name '*.man'
(cd "$work/x/usr/share/doc/python3.11/html/_sources" && find . -type f -name '*.rst.txt' -print0 | sort -z \
  | xargs -0 cp --parents -t "$work/root/debian/docs/python")

# Files that are not UTF-8 (27 glibc locale tests and i386 assembly with Latin-1 comments) are left out and named.
dropped=$(cd "$work/root/debian" && python3 -c '
import pathlib, sys
bad = []
for p in sorted(pathlib.Path(".").rglob("*")):
    if p.is_file():
        try:
            p.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            bad.append(str(p)); p.unlink()
print(len(bad), "files left out as not UTF-8:", " ".join(bad))')
{
  echo "Debian packages (bookworm) unpacked and filtered by scripts/gpu/prepare_debian.sh on $(date -u +%F)."
  echo "One document per file; directory structure kept."
  echo
  for deb in "$work"/debs/*.deb; do
    name=$(dpkg-deb -f "$deb" Package) ver=$(dpkg-deb -f "$deb" Version)
    echo "$name $ver sha256 $(sha256sum "$deb" | cut -c1-64)"
  done
  echo
  echo "$dropped"
  echo "licences: glibc LGPL-2.1+ (some parts GPL-2+); xorg-server MIT/X11; Python documentation PSF-2.0"
  for d in code/glibc code/xorg-server docs/python; do
    echo "$d: $(find "$work/root/debian/$d" -type f | wc -l) files, $(find "$work/root/debian/$d" -type f -print0 | du -cb --files0-from=- | tail -1 | cut -f1) bytes"
  done
} > "$work/root/debian/SOURCE.txt"
tar -C "$work/root" --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' -cf - debian \
  | xz -9 -T0 > "$out.tmp"
mv "$out.tmp" "$out"
cat "$work/root/debian/SOURCE.txt"
echo "wrote $out ($(du -h "$out" | cut -f1))"
