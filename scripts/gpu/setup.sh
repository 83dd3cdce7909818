# Sourced at the start of every GPU-machine command: the machine has PyTorch + CUDA but no network.
# Installs the carried wheels (.whl/: pure-Python packages its image lacks), puts contextlab on the
# path, and unpacks the carried data (.gpu/: the Gutenberg books and the Debian trees, into /tmp/books).
# REHEARSAL=1 (scripts/gpu/rehearse.sh, on a CPU machine) installs nothing: the caller's Python has it all.
export PYTHONUNBUFFERED=1
source scripts/gpu/state.sh
if [ -z "${REHEARSAL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 \
    || echo "note: pip install -e . failed; using PYTHONPATH"
fi
site=/tmp/site:
[ -z "${REHEARSAL:-}" ] || site=
export PYTHONPATH="$site$PWD/src:$PWD"
mkdir -p /tmp/books && tar -xJf .gpu/books.tar.xz -C /tmp/books  # texts/, manifest.jsonl
[ ! -f .gpu/debian.tar.xz ] || tar -xJf .gpu/debian.tar.xz -C /tmp/books  # debian/, beside texts/
need_debian() {  # the part-3 studies read /tmp/books/debian
  [ -d /tmp/books/debian ] || { echo "error: .gpu/debian.tar.xz is missing: run bash scripts/gpu/prepare_debian.sh on the CPU machine and carry .gpu"; exit 1; }
}
if [ -z "${REHEARSAL:-}" ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
fi
