"""A fake ``nvidia-smi`` for the tests, written onto a PATH by `install`.

* ``nvidia-smi -L`` lists ``FAKE_GPUS`` devices (``GPU 0: Fake GPU (UUID: GPU-fake-0)``);
* ``nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -i 0,1`` prints
  ``index, MiB`` for each device asked, the MiB read from ``FAKE_SMI_DIR/gpu-<index>.mib``
  (0 when there is no such file): a test's unit writes its "GPU memory" there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def install(bin_dir: Path, state_dir: Path, gpus: int = 2) -> Path:
    """Write the fake as ``bin_dir/nvidia-smi``, with ``gpus`` devices and its memory
    readings in ``state_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[2]
    exe = bin_dir / "nvidia-smi"
    exe.write_text(
        "#!/bin/sh\n"
        f"export FAKE_GPUS={gpus} FAKE_SMI_DIR='{state_dir}' PYTHONPATH='{repo}'\n"
        f"exec '{sys.executable}' -m tests.support.fake_nvidia_smi \"$@\"\n"
    )
    exe.chmod(0o755)
    return exe


def main(argv: list[str]) -> int:
    count = int(os.environ.get("FAKE_GPUS", "2"))
    if argv == ["-L"]:
        for i in range(count):
            print(f"GPU {i}: Fake GPU (UUID: GPU-fake-{i})")
        return 0
    if argv and argv[0] == "--query-gpu=index,memory.used":
        ids = argv[argv.index("-i") + 1].split(",") if "-i" in argv else map(str, range(count))
        state = Path(os.environ["FAKE_SMI_DIR"])
        for i in ids:
            mib = state / f"gpu-{i}.mib"
            print(f"{i}, {mib.read_text().strip() if mib.exists() else '0'}")
        return 0
    print(f"fake nvidia-smi: unknown arguments {argv}", file=sys.stderr)
    return 6


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
