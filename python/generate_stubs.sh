#!/usr/bin/env bash
# Regenerates the type stubs of the extension from the built module (run after changing the
# binding): python/switchyard/_switchyard.pyi and python/switchyard/reference.pyi.
# Usage: bash python/generate_stubs.sh [PYTHONPATH with the built package, default build/python]
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-build/python}"
out=$(mktemp -d)
PYTHONPATH="$path" python3 -m nanobind.stubgen -q -m switchyard._switchyard -r -O "$out"
sed -e 's/^from switchyard._switchyard import reference as reference$/from switchyard import reference as reference/' \
    "$out/_switchyard/__init__.pyi" > python/switchyard/_switchyard.pyi
{
    cat "$out/_switchyard/reference.pyi"
    printf '\n\ndef bf16_bits(tensor: object) -> numpy.typing.NDArray[numpy.uint16]:\n'
    printf '    """The raw bits of a bf16 tensor as a flat NumPy uint16 array."""\n'
} > python/switchyard/reference.pyi
grep -q '^import numpy.typing' python/switchyard/reference.pyi || sed -i '1i import numpy\nimport numpy.typing' python/switchyard/reference.pyi
rm -rf "$out"
echo "wrote python/switchyard/_switchyard.pyi and python/switchyard/reference.pyi"
