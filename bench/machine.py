"""What the benchmark scripts print about the machine they ran on."""

import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (the processor may differ from
    one run to the next, so every benchmark prints it)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
