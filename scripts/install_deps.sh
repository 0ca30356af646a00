#!/usr/bin/env bash
# Installs meshnn's build and run dependencies from Debian packages, only those missing.
set -euo pipefail
packages=(cmake g++ make pkg-config openmpi-bin libopenmpi-dev libhwloc-dev libfmt-dev libhdf5-dev
          hdf5-tools libgtest-dev libopenblas-dev python3 nlohmann-json3-dev
          python3-numpy python3-h5py libcli11-dev libsentencepiece-dev sentencepiece
          libpcre2-dev libutf8proc-dev python3-regex python3-sentencepiece python3-jinja2 libdnnl-dev
          libcpp-httplib-dev)
# --plot: also what scripts/scaling.py needs to draw (Debian's matplotlib for /usr/bin/python3).
[ "${1:-}" = "--plot" ] && packages+=(python3-matplotlib)
# --fuzz: clang with libFuzzer for scripts/fuzz.sh.
[ "${1:-}" = "--fuzz" ] && packages+=(clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
