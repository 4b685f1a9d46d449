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


def last_level_cache() -> str:
    """The largest data or unified cache of CPU 0 as sysfs lists it ("32768K"
    -> "32 MiB"), which in a VM is the guest's, unlike glibc's sysconf."""
    best = 0
    for index in range(16):
        d = f"/sys/devices/system/cpu/cpu0/cache/index{index}/"
        try:
            with open(d + "type") as f:
                kind = f.read().strip()
            with open(d + "size") as f:
                size = f.read().strip()
            with open(d + "level") as f:
                level = f.read().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        best = max(best, int(size.rstrip("KMG")) * scale)
    if not best:
        return "unknown"
    return f"L{level} {best >> 20} MiB" if best >= 1 << 20 else f"{best >> 10} KiB"


def cpu_details() -> str:
    """Vendor, family and model, vector width and last-level cache, e.g.
    "AuthenticAMD family 25 model 17, AVX-512, L3 32 MiB"."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else ("AVX2, no AVX-512" if "avx2" in flags else "no AVX2")
    return (f"{info.get('vendor_id', '?')} family {info.get('cpu family', '?')} model {info.get('model', '?')}, "
            f"{isa}, {last_level_cache()}")


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
