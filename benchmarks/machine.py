"""What the benchmarks print about the machine they ran on, so that their figures can be compared."""
import platform
from pathlib import Path


def cpu_name() -> str:
    "The processor's model name as the operating system reports it (Linux), else what platform knows."
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
