"""What the benchmark scripts share in their reports: the machine they ran
on, and how times and ratios are printed."""

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


def fmt_time(seconds) -> str:
    """A median as "12.3 us" below a millisecond, else "4.56 ms"; None is "-"."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def fmt_ratio(r) -> str:
    """A speedup as "1.59x"; None is "-"."""
    return "-" if r is None else f"{r:.2f}x"
