"""A workload for the runtime tests, driven through files in a control directory.

`python workload_program.py CONTROL [--child]`: prints its environment, traps SIGTERM (writes
`CONTROL/sigterm-<role>` and keeps running, as a workload that checkpoints would), optionally
starts a child in its process group that does the same (and never exits by itself), writes
`CONTROL/ready`, then exits with the code found in `CONTROL/exit` once that file appears.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    control, role = Path(sys.argv[1]), "child" if "--as-child" in sys.argv else "main"
    signal.signal(signal.SIGTERM, lambda *_: (control / f"sigterm-{role}").write_text("1"))
    if role == "main":
        for name in ("CUDA_VISIBLE_DEVICES", "LOWCOSTGPU_VOLUME", "LOWCOSTGPU_INSTANCE_ID"):
            print(f"{name}={os.environ.get(name, '<unset>')}")
        print(f"SECRET={os.environ.get('LOWCOSTGPU_TEST_SECRET', '<unset>')}")
        print(f"CWD={os.getcwd()}", flush=True)
        if "--child" in sys.argv:
            subprocess.Popen([sys.executable, __file__, str(control), "--as-child"])
            while not (control / "ready-child").exists():
                time.sleep(0.01)
        (control / "ready").write_text(str(os.getpid()))
    else:
        (control / "ready-child").write_text(str(os.getpid()))
        while True:  # a child that never ends by itself: only its group's SIGKILL ends it
            time.sleep(1)
    while not (control / "exit").exists():
        time.sleep(0.02)
    sys.exit(int((control / "exit").read_text() or 0))


if __name__ == "__main__":
    main()
